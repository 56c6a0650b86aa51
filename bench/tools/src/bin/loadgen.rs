//! The bench's load generator, one core (current-thread tokio), every byte checked.
//!
//!     loadgen tftp-storm SERVER FILE CLIENTS EXPECTED
//!         CLIENTS TFTP clients at once, blksize 1468, lock-step, each compares what it got
//!         with EXPECTED. Prints: clients failures seconds MiB/s p50_s p99_s cpu_%
//!     loadgen boot-storm TFTP_SERVER HTTP_SERVER NODES KPXE BOOT_IPXE MACS SCRIPTS_DIR
//!         NODES nodes at once, each like a BIOS PXE ROM then iPXE: undionly.kpxe over TFTP
//!         (blksize 1468, tsize), then on one HTTP/1.1 connection /boot.ipxe and its own
//!         /boot/<mac>.ipxe (the MACs of the file MACS in turn), compared with KPXE, BOOT_IPXE
//!         and SCRIPTS_DIR/<mac>.ipxe. Prints: nodes failures seconds p50_s p99_s cpu_%
//!     loadgen neighbour HTTP_SERVER CLIENTS_FILE SCRIPTS_DIR SECONDS
//!         One keep-alive connection per line "device address mac" of CLIENTS_FILE, bound to
//!         that device and address, fetching /boot/<mac>.ipxe over and over for SECONDS; each
//!         answer must be a 200 with the bytes of SCRIPTS_DIR/<mac>.ipxe.
//!         Prints: clients requests failures requests/s p99_ms cpu_%
//!
//! Failures are counted, and the first few are printed on standard error. cpu_% is the
//! generator's own CPU time over the wall time: near 100, it is the limit, not the server.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bootvol_bench_tools::{cpu_percent, percentile, runtime, tftp_get, Http};
use tokio::net::{TcpSocket, TcpStream};

const TFTP_TIMEOUT: Duration = Duration::from_secs(2);
const TFTP_RETRIES: u32 = 5;

fn usage() -> ! {
    eprintln!("usage: see the header of bench/tools/src/bin/loadgen.rs");
    std::process::exit(2);
}

fn report_failure(count: &Cell<usize>, what: String) {
    count.set(count.get() + 1);
    if count.get() <= 5 {
        eprintln!("failure: {what}");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = |s: &String| -> SocketAddr { s.parse().unwrap_or_else(|_| usage()) };
    let local = tokio::task::LocalSet::new();
    match args.first().map(String::as_str) {
        Some("tftp-storm") if args.len() == 5 => {
            let (server, name, clients) = (addr(&args[1]), args[2].clone(), args[3].parse::<usize>().unwrap());
            let expected: &'static [u8] = std::fs::read(&args[4]).unwrap().leak();
            let failures = Rc::new(Cell::new(0));
            let start = Instant::now();
            let times = runtime().block_on(local.run_until(async {
                let tasks: Vec<_> = (0..clients)
                    .map(|_| {
                        let (name, failures) = (name.clone(), failures.clone());
                        tokio::task::spawn_local(async move {
                            let t0 = Instant::now();
                            if let Err(e) = tftp_get(server, &name, 1468, false, expected, TFTP_TIMEOUT, TFTP_RETRIES).await {
                                report_failure(&failures, e);
                            }
                            t0.elapsed().as_secs_f64()
                        })
                    })
                    .collect();
                let mut times = Vec::new();
                for t in tasks {
                    times.push(t.await.unwrap());
                }
                times
            }));
            let secs = start.elapsed().as_secs_f64();
            let mut times = times;
            let mib = (clients * expected.len()) as f64 / 1048576.0;
            println!(
                "{clients} {} {secs:.2} {:.1} {:.3} {:.3} {:.0}",
                failures.get(),
                mib / secs,
                percentile(&mut times, 50.0),
                percentile(&mut times, 99.0),
                cpu_percent(secs)
            );
        }
        Some("boot-storm") if args.len() == 8 => {
            let (tftp, http, nodes) = (addr(&args[1]), addr(&args[2]), args[3].parse::<usize>().unwrap());
            let kpxe: &'static [u8] = std::fs::read(&args[4]).unwrap().leak();
            let boot: &'static [u8] = std::fs::read(&args[5]).unwrap().leak();
            let macs: Vec<String> = std::fs::read_to_string(&args[6]).unwrap().lines().map(str::to_owned).collect();
            let scripts: Vec<&'static [u8]> = macs
                .iter()
                .map(|m| &*std::fs::read(format!("{}/{m}.ipxe", args[7])).unwrap().leak())
                .collect();
            let host = http.to_string();
            let failures = Rc::new(Cell::new(0));
            let start = Instant::now();
            let mut times = runtime().block_on(local.run_until(async {
                let tasks: Vec<_> = (0..nodes)
                    .map(|i| {
                        let (mac, script, host, failures) =
                            (macs[i % macs.len()].clone(), scripts[i % macs.len()], host.clone(), failures.clone());
                        tokio::task::spawn_local(async move {
                            let t0 = Instant::now();
                            let result = async {
                                tftp_get(tftp, "undionly.kpxe", 1468, true, kpxe, TFTP_TIMEOUT, TFTP_RETRIES)
                                    .await
                                    .map_err(|e| format!("undionly.kpxe: {e}"))?;
                                let stream = TcpStream::connect(http).await.map_err(|e| format!("connect: {e}"))?;
                                let mut conn = Http::new(stream, &host);
                                for (path, want) in [("/boot.ipxe".to_owned(), boot), (format!("/boot/{mac}.ipxe"), script)] {
                                    let (status, body) = conn.get(&path).await.map_err(|e| format!("{path}: {e}"))?;
                                    if status != 200 || body != want {
                                        return Err(format!("{path}: status {status}, {} bytes, not the expected ones", body.len()));
                                    }
                                }
                                Ok::<(), String>(())
                            }
                            .await;
                            if let Err(e) = result {
                                report_failure(&failures, format!("node {i}: {e}"));
                            }
                            t0.elapsed().as_secs_f64()
                        })
                    })
                    .collect();
                let mut times = Vec::new();
                for t in tasks {
                    times.push(t.await.unwrap());
                }
                times
            }));
            let secs = start.elapsed().as_secs_f64();
            println!(
                "{nodes} {} {secs:.2} {:.3} {:.3} {:.0}",
                failures.get(),
                percentile(&mut times, 50.0),
                percentile(&mut times, 99.0),
                cpu_percent(secs)
            );
        }
        Some("neighbour") if args.len() == 5 => {
            let server = addr(&args[1]);
            let clients: Vec<(String, std::net::Ipv4Addr, String)> = std::fs::read_to_string(&args[2])
                .unwrap()
                .lines()
                .map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    (f[0].to_owned(), f[1].parse().unwrap(), f[2].to_owned())
                })
                .collect();
            let seconds: f64 = args[4].parse().unwrap();
            let deadline = Instant::now() + Duration::from_secs_f64(seconds);
            let failures = Rc::new(Cell::new(0));
            let host = server.to_string();
            let latencies = runtime().block_on(local.run_until(async {
                let tasks: Vec<_> = clients
                    .iter()
                    .map(|(dev, ip, mac)| {
                        let want = std::fs::read(format!("{}/{mac}.ipxe", args[3])).unwrap();
                        let (dev, ip, path, host, failures) =
                            (dev.clone(), *ip, format!("/boot/{mac}.ipxe"), host.clone(), failures.clone());
                        tokio::task::spawn_local(async move {
                            let mut latencies = Vec::new();
                            let connect = || async {
                                let socket = TcpSocket::new_v4().map_err(|e| e.to_string())?;
                                socket.bind_device(Some(dev.as_bytes())).map_err(|e| format!("{dev}: {e}"))?;
                                socket.bind(SocketAddr::new(ip.into(), 0)).map_err(|e| format!("{ip}: {e}"))?;
                                let stream = socket.connect(server).await.map_err(|e| format!("{dev} connect: {e}"))?;
                                Ok::<Http, String>(Http::new(stream, &host))
                            };
                            let mut conn = None;
                            // As iPXE does: /boot.ipxe first (a boot sign: it opens the
                            // node's boot window, inside which its secret script goes out).
                            let mut signed = false;
                            while Instant::now() < deadline {
                                if conn.is_none() {
                                    match connect().await {
                                        Ok(mut c) => {
                                            if !signed {
                                                signed = c.get("/boot.ipxe").await.is_ok_and(|(s, _)| s == 200);
                                            }
                                            conn = Some(c)
                                        }
                                        Err(e) => {
                                            report_failure(&failures, e);
                                            tokio::time::sleep(Duration::from_millis(100)).await;
                                            continue;
                                        }
                                    }
                                }
                                let t0 = Instant::now();
                                match conn.as_mut().unwrap().get(&path).await {
                                    Ok((200, body)) if body == want => latencies.push(t0.elapsed().as_secs_f64()),
                                    Ok((status, body)) => {
                                        report_failure(&failures, format!("{dev} {path}: status {status}, {} bytes", body.len()));
                                    }
                                    Err(e) => {
                                        report_failure(&failures, format!("{dev} {path}: {e}"));
                                        conn = None;
                                    }
                                }
                            }
                            latencies
                        })
                    })
                    .collect();
                let mut all = Vec::new();
                for t in tasks {
                    all.extend(t.await.unwrap());
                }
                all
            }));
            let mut latencies = latencies;
            println!(
                "{} {} {} {:.0} {:.2} {:.0}",
                clients.len(),
                latencies.len(),
                failures.get(),
                latencies.len() as f64 / seconds,
                percentile(&mut latencies, 99.0) * 1000.0,
                cpu_percent(seconds)
            );
        }
        _ => usage(),
    }
}
