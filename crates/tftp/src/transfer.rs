//! One read transfer as a sans-io state machine: option negotiation, windowing (RFC 7440, from
//! the first acknowledged block on),
//! block-number roll-over, retransmission counting and the end of the transfer.
//!
//! It never touches a socket or the clock. The caller feeds it what arrived from the peer
//! (`on_ack`, `on_error`) and "the timeout elapsed" (`on_timeout`), and gets back an [`Action`]:
//! what to send, or that the transfer is over. The caller arms its timer whenever it sends.
//!
//! Blocks are counted here with absolute `u64` indices (block 1 is the first DATA); the 16-bit
//! number on the wire is the index modulo 65536, so after 65535 comes 0, as curl, atftp and
//! tftp-hpa expect.

use std::ops::RangeInclusive;
use std::time::Duration;

use bytes::Bytes;

use super::TftpConfig;
use super::packet::{MAX_BLOCK_SIZE, MIN_BLOCK_SIZE, Options};

/// RFC 1350's block size, used when the client does not ask for `blksize`.
const DEFAULT_BLOCK_SIZE: u16 = 512;

/// The longest retransmission interval a client's `timeout` option can impose (unless the
/// configured timeout is longer). A client may ask for up to 255 s; honouring that literally
/// would let one lost packet stall a transfer for minutes. Retransmitting earlier than the client
/// asked is harmless: it just sees a duplicate.
const MAX_CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Retransmissions of one packet before the client has acknowledged anything (the OACK, with
/// ACK 0, or block 1). Until then nothing shows the client exists (a request's source address
/// can be forged), so the transfer is dropped early and never windowed: the OACK (when options
/// were asked) or DATA 1 alone, each sent at most `1 + FIRST_PACKET_RETRIES` times. A forged
/// request without options draws at most two DATA packets of one block; with options, two OACKs.
/// The OACK's ACK 0 proves the client as well as ACK 1 would (only a host that received the
/// OACK at that address knows the transfer's port), and a windowed client (RFC 7440) that waits
/// for a full window before it acknowledges must get one at once, not after its timeout.
pub(crate) const FIRST_PACKET_RETRIES: u32 = 1;

/// What was agreed with the client: the OACK to send (if any) and the parameters it implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Negotiated {
    pub(crate) block_size: u16,
    pub(crate) window_size: u16,
    pub(crate) timeout: Duration,
    /// `None` when the client sent no option this server recognises: then there is no OACK and
    /// DATA 1 goes out first.
    pub(crate) oack: Option<Options>,
}

impl Negotiated {
    pub(crate) fn new(requested: &Options, file_len: u64, config: &TftpConfig) -> Negotiated {
        let block_cap = config.max_block_size.clamp(MIN_BLOCK_SIZE, MAX_BLOCK_SIZE);
        let window_cap = config.max_window_size.max(1);
        let answer = Options {
            blksize: requested.blksize.map(|size| size.min(block_cap)),
            // RFC 2349: the server echoes the client's timeout if it accepts the option.
            timeout: requested.timeout,
            // RFC 2349: a read request carries tsize 0 and gets the real size back. Except for
            // an empty file: curl (7.88) fails on "tsize 0" in an OACK, so the option is declined
            // (left out), which RFC 2347 allows.
            tsize: requested.tsize.and(Some(file_len)).filter(|&len| len > 0),
            windowsize: requested.windowsize.map(|size| size.min(window_cap)),
        };
        let timeout = match requested.timeout {
            Some(secs) => {
                Duration::from_secs(secs.into()).min(MAX_CLIENT_TIMEOUT.max(config.timeout))
            }
            None => config.timeout,
        };
        Negotiated {
            block_size: answer.blksize.unwrap_or(DEFAULT_BLOCK_SIZE),
            window_size: answer.windowsize.unwrap_or(1),
            timeout,
            oack: (!answer.is_empty()).then_some(answer),
        }
    }
}

/// A run of blocks to send, by absolute index (first block of the file is 1), both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) first: u64,
    pub(crate) last: u64,
}

impl Window {
    pub(crate) fn blocks(self) -> RangeInclusive<u64> {
        self.first..=self.last
    }
}

/// What the caller must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Send this OACK, arm the timer, wait for ACK 0.
    SendOack(Options),
    /// Send these DATA blocks (see [`Transfer::block`]), arm the timer, wait for an ACK.
    Send(Window),
    /// Nothing to send (a duplicate or stray packet); keep waiting with the timer as it is.
    Wait,
    /// The transfer is over.
    Done(Outcome),
}

/// How a transfer ended, as far as the protocol is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The last block was acknowledged.
    Complete,
    /// The client sent an ERROR packet (a PXE ROM's tsize probe ends this way, with code 8).
    PeerError { code: u16, message: String },
    /// No acknowledgement after the last retransmission.
    TimedOut,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    NotStarted,
    AwaitingOackAck,
    Sending,
    Finished(Outcome),
}

/// The state of one read transfer.
#[derive(Debug)]
pub(crate) struct Transfer {
    data: Bytes,
    block_size: u64,
    window_size: u64,
    max_retries: u32,
    oack: Option<Options>,
    /// Always `len / block_size + 1`: the last block is short, or empty when the size is an
    /// exact multiple of the block size (that is how the client learns the file ended).
    total_blocks: u64,
    phase: Phase,
    /// Highest block acknowledged (0 before any).
    acked: u64,
    /// The client acknowledged the OACK (ACK 0).
    oack_acked: bool,
    /// Last block of the window in flight.
    window_end: u64,
    /// Timeouts since the last progress.
    retries: u32,
    blocks_sent: u64,
    blocks_resent: u64,
}

impl Transfer {
    pub(crate) fn new(data: Bytes, negotiated: &Negotiated, max_retries: u32) -> Transfer {
        let block_size = u64::from(negotiated.block_size.max(1));
        let total_blocks = data.len() as u64 / block_size + 1;
        Transfer {
            data,
            block_size,
            window_size: u64::from(negotiated.window_size.max(1)),
            max_retries,
            oack: negotiated.oack,
            total_blocks,
            phase: Phase::NotStarted,
            acked: 0,
            oack_acked: false,
            window_end: 0,
            retries: 0,
            blocks_sent: 0,
            blocks_resent: 0,
        }
    }

    /// The first thing to send: the OACK, or the first window when there is no OACK.
    pub(crate) fn start(&mut self) -> Action {
        if self.phase != Phase::NotStarted {
            return self.finished_or_wait();
        }
        match self.oack {
            Some(oack) => {
                self.phase = Phase::AwaitingOackAck;
                Action::SendOack(oack)
            }
            None => {
                self.phase = Phase::Sending;
                self.next_window()
            }
        }
    }

    /// An ACK from the peer. ACK n acknowledges every block up to n; the next window starts at
    /// n + 1. ACKs that acknowledge nothing new (duplicates, stale ones, numbers beyond what was
    /// sent) change nothing and do not trigger a resend: answering duplicates is what makes the
    /// Sorcerer's Apprentice bug.
    pub(crate) fn on_ack(&mut self, wire_block: u16) -> Action {
        match self.phase {
            Phase::AwaitingOackAck if wire_block == 0 => {
                self.phase = Phase::Sending;
                self.oack_acked = true;
                self.retries = 0;
                self.next_window()
            }
            Phase::Sending => {
                // Distance forward from the last acknowledged block, modulo 65536.
                let advance = u64::from(wire_block.wrapping_sub(self.acked as u16));
                if advance == 0 || advance > self.window_end - self.acked {
                    return Action::Wait;
                }
                self.acked += advance;
                self.retries = 0;
                if self.acked == self.total_blocks {
                    self.finish(Outcome::Complete)
                } else {
                    self.next_window()
                }
            }
            _ => self.finished_or_wait(),
        }
    }

    /// An ERROR from the peer ends the transfer at once.
    pub(crate) fn on_error(&mut self, code: u16, message: &str) -> Action {
        match self.phase {
            Phase::Finished(_) => self.finished_or_wait(),
            _ => self.finish(Outcome::PeerError { code, message: message.to_owned() }),
        }
    }

    /// The timer armed at the last send elapsed: resend what is unacknowledged, or give up.
    pub(crate) fn on_timeout(&mut self) -> Action {
        let resend = match self.phase {
            Phase::AwaitingOackAck => self.oack.map(Action::SendOack),
            Phase::Sending => Some(Action::Send(self.window())),
            _ => None,
        };
        let Some(resend) = resend else { return self.finished_or_wait() };
        self.retries += 1;
        let allowed = if self.confirmed() {
            self.max_retries
        } else {
            self.max_retries.min(FIRST_PACKET_RETRIES)
        };
        if self.retries > allowed {
            return self.finish(Outcome::TimedOut);
        }
        if let Action::Send(window) = resend {
            let count = window.last - window.first + 1;
            self.blocks_sent += count;
            self.blocks_resent += count;
        }
        resend
    }

    /// Block `index` as it goes on the wire: its 16-bit number and its payload.
    pub(crate) fn block(&self, index: u64) -> (u16, &[u8]) {
        let len = self.data.len() as u64;
        let start = index.saturating_sub(1).saturating_mul(self.block_size).min(len);
        let end = start.saturating_add(self.block_size).min(len);
        (index as u16, &self.data[start as usize..end as usize])
    }

    /// Bytes the peer has acknowledged.
    pub(crate) fn bytes_acknowledged(&self) -> u64 {
        (self.acked * self.block_size).min(self.data.len() as u64)
    }

    /// DATA packets handed out to send, retransmissions included.
    pub(crate) fn blocks_sent(&self) -> u64 {
        self.blocks_sent
    }

    /// DATA packets handed out again after a timeout.
    pub(crate) fn blocks_resent(&self) -> u64 {
        self.blocks_resent
    }

    /// Whether the client has acknowledged the OACK or a block: it is there, and listening.
    /// Before that the window is one block and the retries are [`FIRST_PACKET_RETRIES`].
    fn confirmed(&self) -> bool {
        self.acked > 0 || self.oack_acked
    }

    fn window(&self) -> Window {
        Window { first: self.acked + 1, last: self.window_end }
    }

    fn next_window(&mut self) -> Action {
        let window = if self.confirmed() { self.window_size } else { 1 };
        self.window_end = (self.acked + window).min(self.total_blocks);
        self.blocks_sent += self.window_end - self.acked;
        Action::Send(self.window())
    }

    fn finish(&mut self, outcome: Outcome) -> Action {
        self.phase = Phase::Finished(outcome.clone());
        Action::Done(outcome)
    }

    fn finished_or_wait(&self) -> Action {
        match &self.phase {
            Phase::Finished(outcome) => Action::Done(outcome.clone()),
            _ => Action::Wait,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> TftpConfig {
        TftpConfig::default()
    }

    fn negotiated(block_size: u16, window_size: u16, oack: Option<Options>) -> Negotiated {
        Negotiated { block_size, window_size, timeout: Duration::from_secs(1), oack }
    }

    /// A file of `len` bytes whose byte i is `i % 251`, so blocks are distinguishable.
    fn file(len: usize) -> Bytes {
        (0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into()
    }

    fn send(first: u64, last: u64) -> Action {
        Action::Send(Window { first, last })
    }

    #[test]
    fn no_recognised_option_means_no_oack_and_rfc_defaults() {
        let n = Negotiated::new(&Options::default(), 1000, &config());
        assert_eq!(n, negotiated(512, 1, None));
    }

    #[test]
    fn options_are_answered_within_the_caps() {
        let requested =
            Options { blksize: Some(8192), timeout: Some(3), tsize: Some(0), windowsize: Some(64) };
        let n = Negotiated::new(&requested, 123_456, &config());
        let answer = Options {
            blksize: Some(1468),
            timeout: Some(3),
            tsize: Some(123_456),
            windowsize: Some(16),
        };
        assert_eq!(n.oack, Some(answer));
        assert_eq!((n.block_size, n.window_size, n.timeout), (1468, 16, Duration::from_secs(3)));

        // Below the caps the client's values stand.
        let small = Options { blksize: Some(1024), windowsize: Some(4), ..Options::default() };
        let n = Negotiated::new(&small, 0, &config());
        assert_eq!((n.block_size, n.window_size), (1024, 4));
        assert_eq!(n.oack, Some(small));
    }

    #[test]
    fn a_long_client_timeout_is_echoed_but_capped() {
        let requested = Options { timeout: Some(200), ..Options::default() };
        let n = Negotiated::new(&requested, 0, &config());
        assert_eq!(n.oack, Some(requested));
        assert_eq!(n.timeout, MAX_CLIENT_TIMEOUT);
    }

    #[test]
    fn tsize_alone_gets_an_oack_with_the_real_size() {
        let requested = Options { tsize: Some(0), ..Options::default() };
        let n = Negotiated::new(&requested, 77, &config());
        assert_eq!(n.oack, Some(Options { tsize: Some(77), ..Options::default() }));
        assert_eq!((n.block_size, n.window_size), (512, 1));
    }

    #[test]
    fn tsize_is_declined_for_an_empty_file() {
        let requested = Options { tsize: Some(0), blksize: Some(1468), ..Options::default() };
        let n = Negotiated::new(&requested, 0, &config());
        assert_eq!(n.oack, Some(Options { blksize: Some(1468), ..Options::default() }));
        let alone =
            Negotiated::new(&Options { tsize: Some(0), ..Options::default() }, 0, &config());
        assert_eq!(alone.oack, None, "nothing left to acknowledge: DATA 1 goes first");
    }

    #[test]
    fn lock_step_without_oack_sends_data_1_first() {
        let mut t = Transfer::new(file(1000), &negotiated(512, 1, None), 5);
        assert_eq!(t.start(), send(1, 1));
        assert_eq!(t.block(1), (1, &file(1000)[..512]));
        assert_eq!(t.on_ack(1), send(2, 2));
        assert_eq!(t.block(2), (2, &file(1000)[512..]));
        assert_eq!(t.on_ack(2), Action::Done(Outcome::Complete));
        assert_eq!(t.bytes_acknowledged(), 1000);
        assert_eq!(t.blocks_sent(), 2);
        assert_eq!(t.blocks_resent(), 0);
    }

    #[test]
    fn oack_waits_for_ack_0_and_is_resent_on_timeout() {
        let oack = Options { blksize: Some(8), ..Options::default() };
        let mut t = Transfer::new(file(20), &negotiated(8, 1, Some(oack)), 5);
        assert_eq!(t.start(), Action::SendOack(oack));
        assert_eq!(t.on_ack(1), Action::Wait, "no DATA before ACK 0");
        assert_eq!(t.on_timeout(), Action::SendOack(oack));
        assert_eq!(t.on_ack(0), send(1, 1));
        assert_eq!(t.on_ack(0), Action::Wait, "a duplicate ACK 0 is ignored");
        assert_eq!(t.on_ack(1), send(2, 2));
        assert_eq!(t.on_ack(2), send(3, 3));
        assert_eq!(t.block(3), (3, &file(20)[16..]));
        assert_eq!(t.on_ack(3), Action::Done(Outcome::Complete));
    }

    #[test]
    fn windows_advance_on_full_and_partial_acks() {
        let data = file(10 * 8 + 3); // 11 blocks, the last one 3 bytes
        let mut t = Transfer::new(data.clone(), &negotiated(8, 4, None), 5);
        assert_eq!(t.start(), send(1, 1), "one block until the client acknowledges one");
        assert_eq!(t.on_ack(1), send(2, 5));
        assert_eq!(t.on_ack(5), send(6, 9));
        // Blocks 8 and 9 lost: the client acknowledges 7, and only the suffix is sent again,
        // followed by as much as fits in a window.
        assert_eq!(t.on_ack(7), send(8, 11));
        assert_eq!(t.on_ack(7), Action::Wait, "duplicate");
        assert_eq!(t.on_ack(3), Action::Wait, "stale");
        assert_eq!(t.on_ack(12), Action::Wait, "beyond what was sent");
        assert_eq!(t.on_ack(10), send(11, 11));
        assert_eq!(t.block(11), (11, &data[80..]));
        assert_eq!(t.on_ack(11), Action::Done(Outcome::Complete));
        assert_eq!(t.blocks_sent(), 1 + 4 + 4 + 4 + 1);
    }

    #[test]
    fn a_timeout_resends_the_whole_unacknowledged_window() {
        let mut t = Transfer::new(file(100), &negotiated(8, 4, None), 5);
        assert_eq!(t.start(), send(1, 1));
        assert_eq!(t.on_ack(1), send(2, 5));
        assert_eq!(t.on_ack(2), send(3, 6));
        assert_eq!(t.on_timeout(), send(3, 6));
        assert_eq!(t.blocks_resent(), 4);
    }

    #[test]
    fn exact_multiple_of_block_size_ends_with_an_empty_block() {
        let data = file(3 * 512);
        let mut t = Transfer::new(data.clone(), &negotiated(512, 8, None), 5);
        assert_eq!(t.start(), send(1, 1));
        assert_eq!(t.on_ack(1), send(2, 4));
        assert_eq!(t.block(3), (3, &data[1024..]));
        assert_eq!(t.block(4), (4, &b""[..]));
        assert_eq!(t.on_ack(3), send(4, 4), "the empty block must be acknowledged too");
        assert_eq!(t.on_ack(4), Action::Done(Outcome::Complete));

        let mut empty = Transfer::new(Bytes::new(), &negotiated(512, 1, None), 5);
        assert_eq!(empty.start(), send(1, 1));
        assert_eq!(empty.block(1), (1, &b""[..]));
        assert_eq!(empty.on_ack(1), Action::Done(Outcome::Complete));
    }

    #[test]
    fn block_numbers_roll_over_from_65535_to_0_in_lock_step() {
        // 70 000 blocks of 8 bytes plus the empty last one: crosses 65535 once.
        let data = file(70_000 * 8);
        let mut t = Transfer::new(data.clone(), &negotiated(8, 1, None), 5);
        let mut action = t.start();
        let mut received = Vec::with_capacity(data.len());
        let mut expected_wire: u16 = 1;
        let mut acks = 0u64;
        while let Action::Send(window) = action {
            assert_eq!(window.first, window.last);
            let (wire, payload) = t.block(window.first);
            assert_eq!(wire, expected_wire);
            received.extend_from_slice(payload);
            expected_wire = expected_wire.wrapping_add(1);
            acks += 1;
            action = t.on_ack(wire);
        }
        assert_eq!(action, Action::Done(Outcome::Complete));
        assert_eq!(acks, 70_001);
        assert_eq!(received, data);
        assert_eq!(t.block(65_536).0, 0);
        assert_eq!(t.block(65_537).0, 1);
    }

    #[test]
    fn a_window_spanning_the_roll_over_is_acknowledged_by_its_wire_number() {
        let data = file(70_000 * 8);
        let mut t = Transfer::new(data, &negotiated(8, 4, None), 5);
        let mut action = t.start();
        // Advance to block 65532 acknowledged, one window at a time.
        while let Action::Send(window) = action {
            if window.first >= 65_533 {
                break;
            }
            action = t.on_ack(window.last.min(65_532) as u16);
        }
        assert_eq!(action, send(65_533, 65_536));
        assert_eq!(t.on_ack(65_534), send(65_535, 65_538));
        assert_eq!([65_535, 65_536, 65_537].map(|i| t.block(i).0), [65_535, 0, 1]);
        assert_eq!(t.on_ack(0), send(65_537, 65_540), "ACK 0 after the wrap means block 65536");
        assert_eq!(t.on_ack(65_535), Action::Wait, "stale from before the wrap");
        assert_eq!(t.on_ack(2), send(65_539, 65_542));
    }

    #[test]
    fn a_peer_error_ends_the_transfer_and_nothing_is_resent() {
        let oack = Options { tsize: Some(100), ..Options::default() };
        let mut t = Transfer::new(file(100), &negotiated(512, 1, Some(oack)), 5);
        assert_eq!(t.start(), Action::SendOack(oack));
        let done = Action::Done(Outcome::PeerError { code: 8, message: "tsize probe".into() });
        assert_eq!(t.on_error(8, "tsize probe"), done);
        assert_eq!(t.on_timeout(), done, "no OACK retransmission after the client's ERROR");
        assert_eq!(t.on_ack(0), done);
        assert_eq!(t.blocks_sent(), 0);
    }

    #[test]
    fn a_client_that_never_acknowledges_gets_at_most_two_packets_of_one_block() {
        // Without options: DATA 1, then one retransmission, whatever max_retries says.
        let mut t = Transfer::new(file(100_000), &negotiated(512, 1, None), 5);
        let mut sent = vec![t.start()];
        loop {
            match t.on_timeout() {
                Action::Done(outcome) => break assert_eq!(outcome, Outcome::TimedOut),
                action => sent.push(action),
            }
        }
        assert_eq!(sent, [send(1, 1), send(1, 1)]);
        assert_eq!(1 + FIRST_PACKET_RETRIES as usize, sent.len());
        // With options: the OACK alone, twice.
        let oack = Options { blksize: Some(1468), windowsize: Some(16), ..Options::default() };
        let mut t = Transfer::new(file(100_000), &negotiated(1468, 16, Some(oack)), 5);
        assert_eq!(t.start(), Action::SendOack(oack));
        assert_eq!(t.on_timeout(), Action::SendOack(oack));
        assert_eq!(t.on_timeout(), Action::Done(Outcome::TimedOut));
        assert_eq!(t.blocks_sent(), 0);
        // ACK 0 of the OACK proves the client: the agreed window at once (a windowed client
        // that waits for a full window before it acknowledges must not wait for its timeout),
        // and the configured retries.
        let mut t = Transfer::new(file(100_000), &negotiated(1468, 16, Some(oack)), 5);
        t.start();
        assert_eq!(t.on_ack(0), send(1, 16));
        for _ in 0..5 {
            assert_eq!(t.on_timeout(), send(1, 16));
        }
        assert_eq!(t.on_timeout(), Action::Done(Outcome::TimedOut));
        let mut t = Transfer::new(file(100_000), &negotiated(1468, 16, Some(oack)), 5);
        t.start();
        assert_eq!(t.on_ack(0), send(1, 16));
        assert_eq!(t.on_ack(16), send(17, 32));
        // Once the client acknowledged something, the configured retries apply.
        let mut t = Transfer::new(file(100_000), &negotiated(512, 1, None), 5);
        t.start();
        assert_eq!(t.on_ack(1), send(2, 2));
        for _ in 0..5 {
            assert_eq!(t.on_timeout(), send(2, 2));
        }
        assert_eq!(t.on_timeout(), Action::Done(Outcome::TimedOut));
    }

    #[test]
    fn retries_are_exhausted_then_the_transfer_times_out() {
        let mut t = Transfer::new(file(2000), &negotiated(512, 2, None), 2);
        assert_eq!(t.start(), send(1, 1));
        assert_eq!(t.on_timeout(), send(1, 1));
        // Progress resets the count.
        assert_eq!(t.on_ack(1), send(2, 3));
        assert_eq!(t.on_ack(2), send(3, 4));
        assert_eq!(t.on_timeout(), send(3, 4));
        assert_eq!(t.on_timeout(), send(3, 4));
        assert_eq!(t.on_timeout(), Action::Done(Outcome::TimedOut));
        assert_eq!(t.on_timeout(), Action::Done(Outcome::TimedOut));
        assert_eq!(t.bytes_acknowledged(), 1024);
        assert_eq!(t.blocks_resent(), 1 + 2 + 2);

        let oack = Options { tsize: Some(0), ..Options::default() };
        let mut t = Transfer::new(file(10), &negotiated(512, 1, Some(oack)), 0);
        assert_eq!(t.start(), Action::SendOack(oack));
        assert_eq!(t.on_timeout(), Action::Done(Outcome::TimedOut), "max_retries 0: none");
    }
}
