//! The null TFTP server: the limit a lock-step (or windowed) client and the kernel allow.
//!
//!     null-tftp ADDR FILE...
//!
//! Loads each FILE once (served under its base name) and answers from one socket: an RRQ with
//! options gets an OACK (blksize up to 1468, windowsize up to 16, tsize, timeout echoed), else
//! block 1; each ACK gets the next window of prepared DATA packets. No file reads per request,
//! no timers (the client retransmits), no logging.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};

struct Transfer {
    file: usize,
    blksize: usize,
    window: u64,
    acked: u64, // blocks acknowledged, counted without wrapping
    total: u64, // blocks in the file, the last one shorter than blksize (maybe empty)
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(addr) = args.next() else {
        eprintln!("usage: null-tftp ADDR FILE...");
        std::process::exit(2);
    };
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for path in args {
        let name = path.rsplit('/').next().unwrap().to_owned();
        files.push((name, std::fs::read(&path)?));
    }
    let addr: SocketAddr = addr.parse().expect("ADDR");
    let socket2 = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::DGRAM, None)?;
    socket2.set_recv_buffer_size(8 << 20)?;
    socket2.set_send_buffer_size(8 << 20)?;
    socket2.bind(&addr.into())?;
    let socket: UdpSocket = socket2.into();
    // Prepared DATA packets per (file, blksize), built the first time that pair is asked for.
    let mut packets: HashMap<(usize, usize), Vec<Vec<u8>>> = HashMap::new();
    let mut transfers: HashMap<SocketAddr, Transfer> = HashMap::new();
    let mut buf = [0u8; 2048];
    loop {
        let (n, peer) = socket.recv_from(&mut buf)?;
        let packet = &buf[..n];
        if n < 4 {
            continue;
        }
        match u16::from_be_bytes([packet[0], packet[1]]) {
            1 => {
                let fields: Vec<&[u8]> = packet[2..n - 1].split(|&b| b == 0).collect();
                let name = String::from_utf8_lossy(fields[0]);
                let name = name.trim_start_matches('/');
                let Some(file) = files.iter().position(|(f, _)| f == name) else {
                    let _ = socket.send_to(b"\x00\x05\x00\x01File not found\x00", peer);
                    continue;
                };
                let (mut blksize, mut window) = (512usize, 1u64);
                let mut oack = vec![0u8, 6];
                for pair in fields[2.min(fields.len())..].chunks(2) {
                    let [key, value] = pair else { continue };
                    let value = String::from_utf8_lossy(value);
                    let key_text = String::from_utf8_lossy(key).to_ascii_lowercase();
                    let answer = match key_text.as_str() {
                        "blksize" => {
                            blksize = value.parse::<usize>().unwrap_or(512).clamp(8, 1468);
                            blksize.to_string()
                        }
                        "windowsize" => {
                            window = value.parse::<u64>().unwrap_or(1).clamp(1, 16);
                            window.to_string()
                        }
                        "tsize" => files[file].1.len().to_string(),
                        "timeout" => value.to_string(),
                        _ => continue,
                    };
                    oack.extend_from_slice(key);
                    oack.push(0);
                    oack.extend_from_slice(answer.as_bytes());
                    oack.push(0);
                }
                let data = &files[file].1;
                packets.entry((file, blksize)).or_insert_with(|| {
                    let mut list: Vec<Vec<u8>> = data
                        .chunks(blksize)
                        .enumerate()
                        .map(|(i, chunk)| {
                            let mut p = vec![0, 3];
                            p.extend_from_slice(&((i + 1) as u16).to_be_bytes());
                            p.extend_from_slice(chunk);
                            p
                        })
                        .collect();
                    if data.len() % blksize == 0 {
                        let mut p = vec![0, 3];
                        p.extend_from_slice(&((list.len() + 1) as u16).to_be_bytes());
                        list.push(p);
                    }
                    list
                });
                let total = packets[&(file, blksize)].len() as u64;
                transfers.insert(peer, Transfer { file, blksize, window, acked: 0, total });
                if oack.len() > 2 {
                    let _ = socket.send_to(&oack, peer);
                } else {
                    let _ = socket.send_to(&packets[&(file, blksize)][0], peer);
                    transfers.get_mut(&peer).unwrap().window = 1;
                }
            }
            4 => {
                let Some(t) = transfers.get_mut(&peer) else { continue };
                let block = u16::from_be_bytes([packet[2], packet[3]]);
                let ahead = block.wrapping_sub(t.acked as u16) as u64;
                if ahead > t.window {
                    continue; // an old ACK: the client resends the newest on timeout
                }
                t.acked += ahead;
                if t.acked >= t.total {
                    transfers.remove(&peer);
                    continue;
                }
                let list = &packets[&(t.file, t.blksize)];
                for i in t.acked..(t.acked + t.window).min(t.total) {
                    let _ = socket.send_to(&list[i as usize], peer);
                }
            }
            5 => {
                transfers.remove(&peer);
            }
            _ => {}
        }
    }
}
