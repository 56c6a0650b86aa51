//! Shared pieces of the bench tools: a TFTP client (RRQ, OACK, lock-step ACKs, every byte
//! compared) and a minimal HTTP/1.1 keep-alive client (status and `Content-Length` body).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// Fetches `name` from `server` in lock-step (as PXE ROMs do) and compares every block with
/// `expected`. `blksize` 0: no options (512-byte blocks). Retransmits its last packet after
/// `timeout` of silence, gives up after `retries` in a row.
pub async fn tftp_get(
    server: SocketAddr,
    name: &str,
    blksize: u16,
    tsize: bool,
    expected: &[u8],
    timeout: Duration,
    retries: u32,
) -> Result<(), String> {
    let socket = UdpSocket::bind(if server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" })
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let mut rrq = vec![0, 1];
    rrq.extend_from_slice(name.as_bytes());
    rrq.extend_from_slice(b"\0octet\0");
    if blksize != 0 {
        rrq.extend_from_slice(format!("blksize\0{blksize}\0").as_bytes());
    }
    if tsize {
        rrq.extend_from_slice(b"tsize\x000\0");
    }
    let mut last = rrq;
    let mut peer = server;
    let mut peer_known = false;
    let mut size = 512usize;
    let mut next: u64 = 1; // the next block wanted, counted from 1 without wrapping
    let mut buf = vec![0u8; 65536];
    let mut silent = 0;
    socket.send_to(&last, peer).await.map_err(|e| format!("send: {e}"))?;
    loop {
        let (n, from) = match tokio::time::timeout(timeout, socket.recv_from(&mut buf)).await {
            Ok(Ok(got)) => got,
            Ok(Err(e)) => return Err(format!("recv: {e}")),
            Err(_) => {
                silent += 1;
                if silent > retries {
                    return Err(format!("timed out waiting for block {next}"));
                }
                socket.send_to(&last, peer).await.map_err(|e| format!("send: {e}"))?;
                continue;
            }
        };
        if peer_known && from != peer {
            continue; // another TID: RFC 1350 says send it an error; ignoring is enough here
        }
        let packet = &buf[..n];
        if n < 4 {
            return Err("short packet".into());
        }
        match u16::from_be_bytes([packet[0], packet[1]]) {
            6 if next == 1 => {
                // OACK
                peer = from;
                peer_known = true;
                let fields: Vec<&[u8]> = packet[2..].split(|&b| b == 0).collect();
                for pair in fields.chunks(2) {
                    if pair.len() == 2 && pair[0].eq_ignore_ascii_case(b"blksize") {
                        size = std::str::from_utf8(pair[1])
                            .ok()
                            .and_then(|v| v.parse().ok())
                            .ok_or("bad blksize in OACK")?;
                    }
                }
                last = vec![0, 4, 0, 0];
                silent = 0;
                socket.send_to(&last, peer).await.map_err(|e| format!("send: {e}"))?;
            }
            3 => {
                peer = from;
                peer_known = true;
                let block = u16::from_be_bytes([packet[2], packet[3]]);
                if block == next as u16 {
                    let data = &packet[4..];
                    let at = ((next - 1) as usize) * size;
                    if at + data.len() > expected.len() || expected[at..at + data.len()] != *data {
                        return Err(format!("block {next}: bytes differ"));
                    }
                    silent = 0;
                    last = vec![0, 4, packet[2], packet[3]];
                    socket.send_to(&last, peer).await.map_err(|e| format!("send: {e}"))?;
                    next += 1;
                    if data.len() < size {
                        return if at + data.len() == expected.len() {
                            Ok(())
                        } else {
                            Err(format!("short file: {} bytes", at + data.len()))
                        };
                    }
                } else if block == (next - 1) as u16 {
                    // The server did not see our ACK: send it again.
                    socket.send_to(&last, peer).await.map_err(|e| format!("send: {e}"))?;
                }
            }
            5 => {
                let text = String::from_utf8_lossy(&packet[4..]).trim_end_matches('\0').to_string();
                return Err(format!("ERROR {}: {text}", u16::from_be_bytes([packet[2], packet[3]])));
            }
            _ => {}
        }
    }
}

/// One keep-alive HTTP/1.1 connection.
#[derive(Debug)]
pub struct Http {
    stream: TcpStream,
    buf: Vec<u8>,
    host: String,
}

impl Http {
    pub fn new(stream: TcpStream, host: &str) -> Self {
        let _ = stream.set_nodelay(true);
        Http { stream, buf: Vec::with_capacity(8192), host: host.to_owned() }
    }

    /// GET `path`: the status and the body (read by `Content-Length`, which is required).
    pub async fn get(&mut self, path: &str) -> Result<(u16, Vec<u8>), String> {
        let request = format!("GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: iPXE/1.21.1\r\n\r\n", self.host);
        self.stream.write_all(request.as_bytes()).await.map_err(|e| format!("write: {e}"))?;
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            self.fill().await?;
        };
        let head = std::str::from_utf8(&self.buf[..head_end]).map_err(|_| "head is not UTF-8")?;
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad status line: {}", head.lines().next().unwrap_or("")))?;
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse().ok())?
            })
            .ok_or("no Content-Length")?;
        while self.buf.len() < head_end + length {
            self.fill().await?;
        }
        let body = self.buf[head_end..head_end + length].to_vec();
        self.buf.drain(..head_end + length);
        Ok((status, body))
    }

    async fn fill(&mut self) -> Result<(), String> {
        let mut chunk = [0u8; 16384];
        match self.stream.read(&mut chunk).await {
            Ok(0) => Err("connection closed".into()),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) => Err(format!("read: {e}")),
        }
    }
}

/// Sorted copy's `p`-th percentile (0..=100) of `values` (seconds), 0 when empty.
pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

/// A current-thread runtime: each tool runs on the one core `taskset` gives it.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}

/// This process's CPU time (user + system) as a percentage of `wall` seconds: near 100, the
/// generator itself is the limit of what it measured.
pub fn cpu_percent(wall: f64) -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<f64>().ok()).sum();
    ticks / 100.0 / wall * 100.0 // USER_HZ is 100 on Linux
}
