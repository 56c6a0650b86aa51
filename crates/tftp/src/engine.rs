//! The packet loop of every transfer, on one thread: a `mio` poll over all transfer sockets,
//! a deadline heap for retransmissions, and a channel (with a `mio::Waker`) through which the
//! transfers' tasks start and stop transfers.
//!
//! Why one thread and not a task per transfer or a thread per transfer: a lock-step transfer is
//! one round trip per block. Waking a tokio task per block costs about a microsecond more than
//! a blocking receive, and a thread per transfer pays a context switch per block and falls
//! behind when thousands of clients start at once on one core. One poll loop that reads every
//! ready socket until it would block, answers from the transfer's state machine and goes back
//! to `epoll_wait` pays neither (dnsmasq's TFTP server is shaped the same way).
//!
//! The loop owns each transfer's socket and state from `start` to its end, then hands back how
//! it ended and its counters. Nothing here knows what is being served.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::packet::{self, Packet, code};
use crate::transfer::{Action, Transfer};
use crate::{End, MAX_REPLY_LEN, Stats};

/// The waker's token; transfers count from 1.
const WAKE: Token = Token(0);

/// What a transfer's task asks of the loop.
enum Command {
    Start(Box<Job>),
    /// Stop a transfer now (superseded or abandoned): it ends as `End::Superseded`.
    Stop(usize),
    Quit,
}

struct Job {
    id: usize,
    socket: std::net::UdpSocket,
    transfer: Transfer,
    peer: SocketAddr,
    timeout: Duration,
    done: tokio::sync::oneshot::Sender<(End, Stats)>,
}

/// A running transfer inside the loop.
struct Slot {
    socket: UdpSocket,
    transfer: Transfer,
    peer: SocketAddr,
    timeout: Duration,
    /// When to retransmit, and which arming of the timer is current (older heap entries for
    /// this slot are stale).
    deadline: Instant,
    armed: u64,
    done: Option<tokio::sync::oneshot::Sender<(End, Stats)>>,
}

/// The handle the listener and the transfer tasks share; dropping the last one stops the loop.
#[derive(Debug)]
pub(crate) struct Engine {
    commands: std::sync::Mutex<mpsc::Sender<Command>>,
    waker: Waker,
    next_id: std::sync::atomic::AtomicUsize,
}

impl Engine {
    /// Starts the loop's thread.
    pub(crate) fn start() -> io::Result<Arc<Engine>> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKE)?;
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("tftp-transfers".to_owned())
            .spawn(move || run(poll, rx))?;
        Ok(Arc::new(Engine {
            commands: std::sync::Mutex::new(tx),
            waker,
            next_id: std::sync::atomic::AtomicUsize::new(1),
        }))
    }

    fn send(&self, command: Command) {
        let sent = self.commands.lock().map(|tx| tx.send(command).is_ok()).unwrap_or(false);
        if sent {
            // If this fails the loop is gone, and with it every transfer.
            let _ = self.waker.wake();
        }
    }

    /// Runs `transfer` on `socket` (non-blocking) until it ends, is stopped (`cancel`), or this
    /// future is dropped (then the loop drops it too).
    pub(crate) async fn run(
        &self,
        socket: std::net::UdpSocket,
        transfer: Transfer,
        peer: SocketAddr,
        timeout: Duration,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> (End, Stats) {
        let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (done, mut done_rx) = tokio::sync::oneshot::channel();
        self.send(Command::Start(Box::new(Job { id, socket, transfer, peer, timeout, done })));
        let guard = StopOnDrop { engine: self, id, armed: true };
        let died = || (End::Io(io::Error::other("the transfer loop stopped")), Stats::default());
        tokio::select! {
            ended = &mut done_rx => {
                guard.disarm();
                ended.unwrap_or_else(|_| died())
            }
            () = cancel.cancelled() => {
                drop(guard); // the loop stops it now and reports its counters
                let stats = done_rx.await.map(|(_, stats)| stats).unwrap_or_default();
                (End::Superseded, stats)
            }
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.send(Command::Quit);
    }
}

/// Stops a transfer in the loop when its task lets go of it first.
struct StopOnDrop<'a> {
    engine: &'a Engine,
    id: usize,
    armed: bool,
}

impl StopOnDrop<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.engine.send(Command::Stop(self.id));
        }
    }
}

/// The retransmission deadlines: (when, transfer, which arming), soonest first.
type Timers = BinaryHeap<Reverse<(Instant, usize, u64)>>;

/// The loop: until `Quit` (or every handle is gone). Each turn: wait for a socket, a command or
/// the next deadline; read the ready sockets; take the commands; retransmit what is due.
fn run(poll: Poll, commands: mpsc::Receiver<Command>) {
    let mut events = Events::with_capacity(1024);
    let mut state = Loop {
        poll,
        slots: HashMap::new(),
        timers: BinaryHeap::new(),
        incoming: [0u8; MAX_REPLY_LEN],
        out: Vec::with_capacity(packet::DATA_HEADER_LEN + 65464),
    };
    loop {
        if !state.wait(&mut events) {
            return;
        }
        state.sockets_ready(&events);
        // Commands after the sockets: a Stop that raced a transfer's last packet finds it gone.
        if !state.take_commands(&commands) {
            return;
        }
        state.deadlines_due();
    }
}

/// What the loop owns: the poll, the running transfers, their timers, and the buffers every
/// packet goes through (allocated once).
struct Loop {
    poll: Poll,
    slots: HashMap<usize, Slot>,
    timers: Timers,
    incoming: [u8; MAX_REPLY_LEN],
    out: Vec<u8>,
}

impl Loop {
    /// Waits for a socket, a command or the next deadline; `false` when the poll fails (then
    /// every transfer ends).
    fn wait(&mut self, events: &mut Events) -> bool {
        let wait = self
            .timers
            .peek()
            .map(|Reverse((at, _, _))| at.saturating_duration_since(Instant::now()));
        if let Err(e) = self.poll.poll(events, wait)
            && e.kind() != io::ErrorKind::Interrupted
        {
            tracing::error!(error = %e, "tftp: the transfer loop cannot poll; transfers end");
            return false;
        }
        true
    }

    /// Reads every ready transfer socket.
    fn sockets_ready(&mut self, events: &Events) {
        for event in events {
            if event.token() == WAKE {
                continue;
            }
            let id = event.token().0;
            if let Some(slot) = self.slots.get_mut(&id)
                && let Some(end) =
                    slot.readable(&mut self.incoming, &mut self.out, &mut self.timers, id)
            {
                finish(&mut self.poll, &mut self.slots, id, end);
            }
        }
    }

    /// Takes every command waiting; `false` on `Quit` (or when every handle is gone).
    fn take_commands(&mut self, commands: &mpsc::Receiver<Command>) -> bool {
        loop {
            match commands.try_recv() {
                Ok(Command::Start(job)) => self.start(*job),
                Ok(Command::Stop(id)) => {
                    finish(&mut self.poll, &mut self.slots, id, End::Superseded);
                }
                Ok(Command::Quit) | Err(mpsc::TryRecvError::Disconnected) => return false,
                Err(mpsc::TryRecvError::Empty) => return true,
            }
        }
    }

    /// Registers a new transfer's socket and sends its first packet (an OACK or DATA).
    fn start(&mut self, job: Job) {
        let Job { id, socket, transfer, peer, timeout, done } = job;
        let mut socket = UdpSocket::from_std(socket);
        if let Err(e) = self.poll.registry().register(&mut socket, Token(id), Interest::READABLE) {
            let _ = done.send((End::Io(e), Stats::default()));
            return;
        }
        let mut slot = Slot {
            socket,
            transfer,
            peer,
            timeout,
            deadline: Instant::now(),
            armed: 0,
            done: Some(done),
        };
        let action = slot.transfer.start();
        self.slots.insert(id, slot);
        if let Some(slot) = self.slots.get_mut(&id)
            && let Some(end) = slot.perform(action, &mut self.out, &mut self.timers, id)
        {
            finish(&mut self.poll, &mut self.slots, id, end);
        }
    }

    /// Retransmits for every deadline that passed (stale entries, re-armed since, skipped).
    fn deadlines_due(&mut self) {
        let now = Instant::now();
        while let Some(&Reverse((at, id, armed))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(slot) = self.slots.get_mut(&id) else { continue };
            if slot.armed != armed {
                continue; // re-armed since: a stale entry
            }
            let action = slot.transfer.on_timeout();
            if let Some(end) = slot.perform(action, &mut self.out, &mut self.timers, id) {
                finish(&mut self.poll, &mut self.slots, id, end);
            }
        }
    }
}

/// Ends transfer `id` (if it is still running): deregisters and closes its socket, reports.
fn finish(poll: &mut Poll, slots: &mut HashMap<usize, Slot>, id: usize, end: End) {
    let Some(mut slot) = slots.remove(&id) else { return };
    let _ = poll.registry().deregister(&mut slot.socket);
    let stats = Stats {
        bytes: slot.transfer.bytes_acknowledged(),
        blocks: slot.transfer.blocks_sent(),
        resent: slot.transfer.blocks_resent(),
    };
    if let Some(done) = slot.done.take() {
        let _ = done.send((end, stats));
    }
}

impl Slot {
    /// Reads every datagram waiting on the socket and acts on each; `Some` when the transfer
    /// ended.
    fn readable(
        &mut self,
        incoming: &mut [u8],
        out: &mut Vec<u8>,
        timers: &mut Timers,
        id: usize,
    ) -> Option<End> {
        loop {
            let (len, from) = match self.socket.recv_from(incoming) {
                Ok(received) => received,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // An ICMP error queued on the socket (port unreachable): the client is gone;
                // the retransmission timer ends the transfer as timed out, as before.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => return Some(End::Io(e)),
            };
            let datagram = &incoming[..len];
            if from != self.peer {
                // RFC 1350: a packet from another TID gets ERROR 5 and the transfer goes on.
                // An ERROR is not answered, so that two servers cannot ping-pong.
                if !datagram.starts_with(&[0, 5]) {
                    packet::encode_error(out, code::UNKNOWN_TRANSFER_ID, "unknown transfer ID");
                    let _ = self.socket.send_to(out, from);
                }
                continue;
            }
            let action = match Packet::parse(datagram) {
                Ok(Packet::Ack { block }) => self.transfer.on_ack(block),
                Ok(Packet::Error { code, message }) => self.transfer.on_error(code, &message),
                // A repeated RRQ, DATA, OACK or garbage from the peer: nothing to act on.
                _ => Action::Wait,
            };
            if let Some(end) = self.perform(action, out, timers, id) {
                return Some(end);
            }
        }
    }

    /// Sends what `action` asks and re-arms the retransmission timer; `Some` when it is the
    /// end. A packet the kernel will not take now (a full send buffer) counts as lost: the
    /// timer sends it again.
    fn perform(
        &mut self,
        action: Action,
        out: &mut Vec<u8>,
        timers: &mut Timers,
        id: usize,
    ) -> Option<End> {
        match action {
            Action::Done(outcome) => return Some(End::Protocol(outcome)),
            Action::Wait => return None,
            Action::SendOack(options) => {
                packet::encode_oack(out, &options);
                if let Err(e) = self.send(out) {
                    return Some(End::Io(e));
                }
            }
            Action::Send(window) => {
                for index in window.blocks() {
                    let (block, data) = self.transfer.block(index);
                    packet::encode_data(out, block, data);
                    if let Err(e) = self.send(out) {
                        return Some(End::Io(e));
                    }
                }
            }
        }
        self.armed += 1;
        self.deadline = Instant::now() + self.timeout;
        timers.push(Reverse((self.deadline, id, self.armed)));
        None
    }

    fn send(&self, packet: &[u8]) -> io::Result<()> {
        match self.socket.send_to(packet, self.peer) {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}
