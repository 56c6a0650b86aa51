#!/usr/bin/env python3
"""Many TFTP clients at once: usage tftp_storm.py HOST PORT FILE CLIENTS EXPECTED_FILE

Each client sends an RRQ (octet, blksize 1468), ACKs every block in lock-step as PXE ROMs do,
retransmits its last ACK after 2 s of silence (up to 5 times), and checks the bytes it got
against EXPECTED_FILE. Prints: clients, failures, total seconds, MiB/s.
"""
import asyncio, socket, struct, sys, time

HOST, PORT, NAME, CLIENTS, EXPECTED = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), open(sys.argv[5], "rb").read()
BLKSIZE = 1468


class Client(asyncio.DatagramProtocol):
    def __init__(self):
        self.queue = asyncio.Queue()

    def datagram_received(self, data, addr):
        self.queue.put_nowait((data, addr))


async def fetch(loop):
    transport, proto = await loop.create_datagram_endpoint(Client, local_addr=("127.0.0.1", 0), family=socket.AF_INET)
    try:
        rrq = b"\x00\x01" + NAME.encode() + b"\x00octet\x00blksize\x00" + str(BLKSIZE).encode() + b"\x00"
        transport.sendto(rrq, (HOST, PORT))
        last, peer, expected_block, blksize, data = rrq, (HOST, PORT), 1, 512, bytearray()
        retries = 0
        while True:
            try:
                packet, addr = await asyncio.wait_for(proto.queue.get(), 2.0)
            except asyncio.TimeoutError:
                retries += 1
                if retries > 5:
                    return False
                transport.sendto(last, peer)
                continue
            op = struct.unpack("!H", packet[:2])[0]
            if op == 6:  # OACK
                peer = addr
                for k, v in zip(packet[2:].split(b"\0")[::2], packet[2:].split(b"\0")[1::2]):
                    if k.lower() == b"blksize":
                        blksize = int(v)
                last = b"\x00\x04\x00\x00"
                transport.sendto(last, peer)
            elif op == 3:  # DATA
                peer = addr
                block = struct.unpack("!H", packet[2:4])[0]
                if block == expected_block & 0xFFFF:
                    data += packet[4:]
                    expected_block += 1
                    retries = 0
                last = b"\x00\x04" + packet[2:4]
                transport.sendto(last, peer)
                if block == (expected_block - 1) & 0xFFFF and len(packet) - 4 < blksize:
                    return bytes(data) == EXPECTED
            elif op == 5:
                return False
    finally:
        transport.close()


async def main():
    loop = asyncio.get_running_loop()
    start = time.monotonic()
    results = await asyncio.gather(*(fetch(loop) for _ in range(CLIENTS)), return_exceptions=True)
    elapsed = time.monotonic() - start
    failures = sum(1 for r in results if r is not True)
    mib = CLIENTS * len(EXPECTED) / 1048576
    print(f"{CLIENTS} {failures} {elapsed:.2f} {mib / elapsed:.1f}")


asyncio.run(main())
