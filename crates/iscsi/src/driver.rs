//! The probe on tokio: TCP to each portal in turn, the [`Machine`]'s PDUs written and read with a
//! deadline on every connect, read and write, and the whole of one portal's session bounded by
//! [`SESSION_TIMEOUTS`] timeouts (a target that answers slowly but forever cannot hold a probe).
//! The randomness the machine needs comes from the operating system.
//!
//! Several portals: each is tried in the order given until one answers ok; the outcome is that
//! one, or else the last portal's failure.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::login::{Machine, Random, Step};
use crate::outcome::{ProbeOutcome, ProbeRequest, parse_portal};
use crate::pdu::{BHS_LEN, Pdu, PduError, frame_len};

/// One portal's whole session takes at most this many timeouts.
pub const SESSION_TIMEOUTS: u32 = 4;

/// Probes the boot target as the node would log in to it: see the crate's documentation.
pub async fn probe(request: &ProbeRequest) -> ProbeOutcome {
    if let Err(why) = request.validate() {
        return ProbeOutcome::Invalid(why);
    }
    let mut last = ProbeOutcome::Invalid("no portal to probe".into());
    for portal in &request.portals {
        last = probe_portal(request, portal).await;
        if last.is_ok() {
            break;
        }
    }
    last
}

async fn probe_portal(request: &ProbeRequest, portal: &str) -> ProbeOutcome {
    let stream = match connect(request, portal).await {
        Ok(stream) => stream,
        Err(outcome) => return outcome,
    };
    let random = match random() {
        Ok(random) => random,
        Err(e) => return unreachable(portal, format!("no randomness for the ISID: {e}")),
    };
    let whole = request.timeout.saturating_mul(SESSION_TIMEOUTS);
    match timeout(whole, session(stream, request, portal, random)).await {
        Ok(outcome) => outcome,
        Err(_) => ProbeOutcome::PortalTimedOut { portal: portal.to_owned(), after: whole },
    }
}

fn unreachable(portal: &str, error: String) -> ProbeOutcome {
    ProbeOutcome::PortalUnreachable { portal: portal.to_owned(), error }
}

/// A connection to the first address of `portal` that accepts one.
async fn connect(request: &ProbeRequest, portal: &str) -> Result<TcpStream, ProbeOutcome> {
    let (host, port) = parse_portal(portal).map_err(ProbeOutcome::Invalid)?;
    let timed_out =
        || ProbeOutcome::PortalTimedOut { portal: portal.to_owned(), after: request.timeout };
    let addrs: Vec<SocketAddr> =
        match timeout(request.timeout, tokio::net::lookup_host((host.as_str(), port))).await {
            Err(_) => return Err(timed_out()),
            Ok(Err(e)) => return Err(unreachable(portal, e.to_string())),
            Ok(Ok(addrs)) => addrs.collect(),
        };
    let mut last = unreachable(portal, format!("{host} has no address"));
    for addr in addrs {
        match timeout(request.timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                last = ProbeOutcome::PortalRefused { portal: portal.to_owned() };
            }
            Ok(Err(e)) => last = unreachable(portal, e.to_string()),
            Err(_) => last = timed_out(),
        }
    }
    Err(last)
}

fn random() -> Result<Random, getrandom::Error> {
    let mut bytes = [0u8; 20];
    getrandom::fill(&mut bytes)?;
    let mut challenge = [0; 16];
    challenge.copy_from_slice(&bytes[4..]);
    Ok(Random { isid: [bytes[0], bytes[1], bytes[2]], chap_id: bytes[3], challenge })
}

/// Why reading or writing a PDU failed.
enum Failure {
    TimedOut,
    Closed,
    Io(io::Error),
    Pdu(PduError),
}

async fn session(
    mut stream: TcpStream,
    request: &ProbeRequest,
    portal: &str,
    random: Random,
) -> ProbeOutcome {
    let (mut machine, first) = Machine::new(request.config(), random);
    let mut next = Some(first);
    loop {
        if let Some(pdu) = next.take()
            && let Err(failure) = write(&mut stream, &pdu, request.timeout).await
        {
            return failed(failure, &machine, request, portal);
        }
        let pdu = match read(&mut stream, request.timeout).await {
            Ok(pdu) => pdu,
            Err(failure) => return failed(failure, &machine, request, portal),
        };
        match machine.receive(pdu) {
            Step::Send(pdu) => next = Some(pdu),
            Step::Wait => {}
            Step::Done(finish) => return ProbeOutcome::from_finish(finish, portal, request),
        }
    }
}

fn failed(
    failure: Failure,
    machine: &Machine,
    request: &ProbeRequest,
    portal: &str,
) -> ProbeOutcome {
    // Closed while logging out: the session is over, and the result was already known.
    if let (Failure::Closed, Some(finish)) = (&failure, machine.pending()) {
        return ProbeOutcome::from_finish(finish.clone(), portal, request);
    }
    let portal = portal.to_owned();
    match failure {
        Failure::TimedOut => ProbeOutcome::PortalTimedOut { portal, after: request.timeout },
        Failure::Closed => {
            ProbeOutcome::Protocol { portal, detail: "the target closed the connection".into() }
        }
        Failure::Io(e) => ProbeOutcome::PortalUnreachable { portal, error: e.to_string() },
        Failure::Pdu(e) => ProbeOutcome::Protocol { portal, detail: e.to_string() },
    }
}

async fn write(stream: &mut TcpStream, pdu: &Pdu, deadline: Duration) -> Result<(), Failure> {
    match timeout(deadline, stream.write_all(&pdu.encode())).await {
        Err(_) => Err(Failure::TimedOut),
        Ok(Err(e)) => Err(io_failure(e)),
        Ok(Ok(())) => Ok(()),
    }
}

async fn read(stream: &mut TcpStream, deadline: Duration) -> Result<Pdu, Failure> {
    let mut frame = vec![0u8; BHS_LEN];
    read_exact(stream, &mut frame, deadline).await?;
    let len = frame_len(&frame).map_err(Failure::Pdu)?;
    frame.resize(len, 0);
    read_exact(stream, &mut frame[BHS_LEN..], deadline).await?;
    Pdu::decode(&frame).map_err(Failure::Pdu)
}

async fn read_exact(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Duration,
) -> Result<(), Failure> {
    match timeout(deadline, stream.read_exact(buf)).await {
        Err(_) => Err(Failure::TimedOut),
        Ok(Err(e)) => Err(io_failure(e)),
        Ok(Ok(_)) => Ok(()),
    }
}

fn io_failure(e: io::Error) -> Failure {
    match e.kind() {
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::BrokenPipe => Failure::Closed,
        _ => Failure::Io(e),
    }
}
