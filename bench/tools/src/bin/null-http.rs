//! The minimal HTTP responder: the practical limit of one core for the per-MAC row.
//!
//!     null-http ADDR BODY_FILE
//!
//! Answers every request head (up to the blank line) on every keep-alive connection with the
//! same prepared bytes: a 200 with `Content-Length` and BODY_FILE. No routing, no logging.

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn main() -> io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(addr), Some(body)) = (args.next(), args.next()) else {
        eprintln!("usage: null-http ADDR BODY_FILE");
        std::process::exit(2);
    };
    let body = std::fs::read(body)?;
    let mut answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    let answer: &'static [u8] = Box::leak(answer.into_boxed_slice());
    bootvol_bench_tools::runtime().block_on(async move {
        let listener = TcpListener::bind(&addr).await?;
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut have = 0;
                loop {
                    match stream.read(&mut buf[have..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => have += n,
                    }
                    let mut start = 0;
                    let mut heads = 0;
                    while let Some(i) = buf[start..have].windows(4).position(|w| w == b"\r\n\r\n") {
                        start += i + 4;
                        heads += 1;
                    }
                    for _ in 0..heads {
                        if stream.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                    buf.copy_within(start..have, 0);
                    have -= start;
                    if have == buf.len() {
                        return; // a head larger than the buffer: not a client of this bench
                    }
                }
            });
        }
    })
}
