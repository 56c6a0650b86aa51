//! The log: one line per event on standard error, in tracing-subscriber's "full" layout
//! (`2026-12-01T17:48:20.123456Z  INFO target: message key=value ...`), filtered by `RUST_LOG`.
//!
//! `serve` logs a line per boot request, so the line is on the boot path. Two things keep it
//! cheap: [`Line`] formats an event with a per-second cached timestamp and plain writes (the
//! stock formatter spent about a third of a script request's instructions), and the bytes go
//! through a non-blocking writer (`tracing-appender`): a request hands its line to a channel; a
//! writer thread puts lines into a 64 KiB buffer and flushes it whenever the channel runs dry.
//! So a busy appliance writes a batch of lines per system call, an idle one writes each at
//! once, and no line is dropped (when the channel's 16,384 lines are full a request waits, as nginx
//! does on a full disk). It knows nothing of what is logged.

use std::cell::RefCell;
use std::fmt;
use std::fmt::Write as _;
use std::io::BufWriter;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// What the writer thread buffers before a write: nginx's `access_log ... buffer=64k`.
const BUFFER: usize = 64 * 1024;

/// Lines the channel holds before a request waits for the writer thread: about a tenth of a
/// second of the busiest boot path measured (120,000 lines a second), in 512 KiB. The crate's
/// default, 128,000, is a 4 MiB array allocated and touched at start.
const QUEUE_LINES: usize = 16 * 1024;

/// Starts logging to standard error; `RUST_LOG` filters, else `default_filter`. Keep the guard
/// until the process ends: dropping it writes what is still queued.
pub fn init(default_filter: &str) -> Option<WorkerGuard> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    // The PostgreSQL client logs statements with their parameters (CHAP secrets among them) at
    // debug level: never below info, whatever RUST_LOG asks.
    let filter = ["tokio_postgres=info", "postgres=info"]
        .into_iter()
        .filter_map(|d| d.parse().ok())
        .fold(filter, tracing_subscriber::EnvFilter::add_directive);
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .buffered_lines_limit(QUEUE_LINES)
        .thread_name("bootvol-log")
        .finish(BufWriter::with_capacity(BUFFER, std::io::stderr()));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .event_format(Line)
        .with_writer(writer)
        .try_init()
        .ok()
        .map(|()| guard)
}

/// The "full" layout without colours or spans (bootvol opens none).
#[derive(Debug, Clone, Copy, Default)]
pub struct Line;

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        let mut head = [0u8; 27];
        let head = timestamp(std::time::SystemTime::now(), &mut head);
        writer.write_str(head)?;
        writer.write_str(level(metadata.level()))?;
        writer.write_str(metadata.target())?;
        writer.write_str(": ")?;
        let mut fields = Fields { writer: &mut writer, first: true, result: Ok(()) };
        event.record(&mut fields);
        fields.result?;
        writer.write_char('\n')
    }
}

/// ` INFO `, right-aligned to five characters between spaces, as the stock layout.
fn level(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => " ERROR ",
        Level::WARN => "  WARN ",
        Level::INFO => "  INFO ",
        Level::DEBUG => " DEBUG ",
        Level::TRACE => " TRACE ",
    }
}

thread_local! {
    /// The second last formatted on this thread and its `YYYY-MM-DDTHH:MM:SS` text.
    static SECOND: RefCell<(u64, [u8; 19])> = const { RefCell::new((u64::MAX, [0; 19])) };
}

/// `2026-12-01T17:48:20.123456Z` (UTC, microseconds) into `out`: the calendar part is worked
/// out (by `jiff`) once a second per thread, the rest is digits.
fn timestamp(now: std::time::SystemTime, out: &mut [u8; 27]) -> &str {
    let since = now.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let (secs, micros) = (since.as_secs(), since.subsec_micros());
    SECOND.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != secs {
            let text = bootvol_core::timefmt::format_unix(secs);
            // `format_unix` is `YYYY-MM-DDTHH:MM:SSZ`; years past 9999 never come from a clock.
            if let Some(calendar) = text.as_bytes().get(..19) {
                cached.1.copy_from_slice(calendar);
            }
            cached.0 = secs;
        }
        out[..19].copy_from_slice(&cached.1);
    });
    out[19] = b'.';
    let mut rest = micros;
    for i in (20..26).rev() {
        out[i] = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    out[26] = b'Z';
    // Only ASCII digits and punctuation were written.
    std::str::from_utf8(&out[..]).unwrap_or("")
}

/// The event's fields as the stock layout writes them: the message first (events declare it
/// first), then ` name=value`, strings quoted and escaped (`Debug`), numbers plain.
struct Fields<'w, 'a> {
    writer: &'w mut Writer<'a>,
    first: bool,
    result: fmt::Result,
}

impl Fields<'_, '_> {
    fn name(&mut self, field: &Field) -> fmt::Result {
        if !std::mem::take(&mut self.first) {
            self.writer.write_char(' ')?;
        }
        let name = field.name();
        self.writer.write_str(name.strip_prefix("r#").unwrap_or(name))?;
        self.writer.write_char('=')
    }

    fn integer(&mut self, field: &Field, text: &str) {
        if self.result.is_ok() {
            self.result = self.name(field).and_then(|()| self.writer.write_str(text));
        }
    }
}

impl Visit for Fields<'_, '_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() || field.name().starts_with("log.") {
            return;
        }
        // Every value goes through `Escaped`: a `%value` (Display) or a message built from a
        // client's bytes cannot start a line of its own.
        self.result = if field.name() == "message" {
            if !std::mem::take(&mut self.first) {
                self.writer
                    .write_char(' ')
                    .and_then(|()| write!(Escaped(&mut *self.writer), "{value:?}"))
            } else {
                write!(Escaped(&mut *self.writer), "{value:?}")
            }
        } else {
            self.name(field).and_then(|()| write!(Escaped(&mut *self.writer), "{value:?}"))
        };
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        // What `Debug` writes unchanged (printable ASCII but quote and backslash) goes out as
        // is; anything else takes `Debug`'s escaping.
        let plain = value.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
        if !plain || field.name() == "message" || field.name().starts_with("log.") {
            return self.record_debug(field, &value);
        }
        if self.result.is_ok() {
            self.result = self.name(field).and_then(|()| {
                self.writer.write_char('"')?;
                self.writer.write_str(value)?;
                self.writer.write_char('"')
            });
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.integer(field, itoa::Buffer::new().format(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.integer(field, itoa::Buffer::new().format(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.integer(field, if value { "true" } else { "false" });
    }
}

/// A writer that escapes control characters (line ends, escape sequences, C1 controls) as
/// `Debug` does (`\n`, `\r`, `\t`, `\u{1b}`), and writes everything else as it is. What
/// `Debug` already escaped passes unchanged, so the stock layout's lines stay byte for byte;
/// a `Display` value or a message that carries a client's line end cannot forge a line.
struct Escaped<'w, W: fmt::Write>(&'w mut W);

impl<W: fmt::Write> fmt::Write for Escaped<'_, W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        if text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return self.0.write_str(text);
        }
        let mut rest = text;
        while let Some((at, c)) = rest.char_indices().find(|(_, c)| c.is_control()) {
            self.0.write_str(&rest[..at])?;
            for e in c.escape_debug() {
                self.0.write_char(e)?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

/// A client's address for a log line, written as `SocketAddr` writes it, without `fmt`'s
/// machinery for IPv4 (every boot request logs one).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub std::net::SocketAddr);

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let std::net::SocketAddr::V4(v4) = self.0 else { return fmt::Display::fmt(&self.0, f) };
        let mut out = [0u8; 21];
        let mut n = 0;
        let mut put = |bytes: &[u8]| {
            out[n..n + bytes.len()].copy_from_slice(bytes);
            n += bytes.len();
        };
        for (i, octet) in v4.ip().octets().iter().enumerate() {
            if i > 0 {
                put(b".");
            }
            put(itoa::Buffer::new().format(*octet).as_bytes());
        }
        put(b":");
        put(itoa::Buffer::new().format(v4.port()).as_bytes());
        // Digits, dots and a colon only.
        f.pad(std::str::from_utf8(&out[..n]).unwrap_or(""))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    /// What `format` prints for the same events: ours, and the stock "full" layout.
    fn both(events: impl Fn()) -> (String, String) {
        let run = |ours: bool| {
            let out = Captured::default();
            let builder = tracing_subscriber::fmt()
                .with_ansi(false)
                .with_max_level(Level::TRACE)
                .with_writer(out.clone());
            if ours {
                tracing::subscriber::with_default(builder.event_format(Line).finish(), &events);
            } else {
                tracing::subscriber::with_default(builder.finish(), &events);
            }
            let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
            // The time differs from run to run: compare what follows it.
            text.lines()
                .map(|l| l.get(27..).unwrap_or("").to_owned())
                .collect::<Vec<_>>()
                .join("\n")
        };
        (run(true), run(false))
    }

    #[test]
    fn lines_read_as_the_stock_layout_does() {
        let client: std::net::SocketAddr = "192.0.2.7:4011".parse().unwrap();
        let (ours, stock) = both(|| {
            tracing::info!(%client, mac = "52:54:00:00:00:01", node = "n\"1", n = 3u64, d = -2i64, ok = true, "boot script");
            tracing::warn!(error = ?std::io::ErrorKind::NotFound, "no \"quotes\" escaped in a message");
            tracing::error!(r#type = "x", "last");
            tracing::debug!("only a message");
            tracing::info!(field = 1.5f64);
        });
        assert_eq!(ours, stock);
        assert!(ours.contains("  INFO bootvol_runtime::logging::tests: boot script client=192.0.2.7:4011 mac=\"52:54:00:00:00:01\" node=\"n\\\"1\" n=3 d=-2 ok=true"), "{ours}");
        let (ours, stock) = both(|| {
            let tab = "a\tb";
            tracing::info!(
                plain = "x y",
                quote = "say \"hi\"",
                backslash = "a\\b",
                tab,
                unicode = "é",
                "strings"
            );
        });
        assert_eq!(ours, stock);
    }

    #[test]
    fn values_and_messages_from_clients_cannot_forge_a_line() {
        let forged = "zz\n2026-12-02T04:00:00.000000Z  INFO bootvol: forged\r\u{1b}[2J\u{85}";
        let (ours, _) = both(|| {
            let error = std::io::Error::other(format!("no node {forged}"));
            tracing::warn!(path = %forged, error = %error, "refused: {forged}");
            tracing::info!(node = forged, "debug-escaped");
        });
        assert_eq!(ours.lines().count(), 2, "{ours}");
        assert!(!ours.contains('\r') && !ours.contains('\u{1b}') && !ours.contains('\u{85}'));
        assert!(ours.contains("refused: zz\\n2026-12-02T04:00:00.000000Z  INFO bootvol: forged\\r\\u{1b}[2J\\u{85} path=zz\\n"), "{ours}");
    }

    #[test]
    fn peers_print_as_socket_addresses_do() {
        for text in ["192.0.2.7:4011", "0.0.0.0:0", "255.255.255.255:65535", "[fd77::1]:8080"] {
            let addr: std::net::SocketAddr = text.parse().unwrap();
            assert_eq!(Peer(addr).to_string(), addr.to_string());
        }
    }

    #[test]
    fn the_timestamp_is_rfc3339_with_microseconds() {
        let mut out = [0u8; 27];
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_764_611_300_000_042);
        assert_eq!(timestamp(at, &mut out), "2025-12-01T17:48:20.000042Z");
        let later = at + std::time::Duration::from_micros(1_999_958);
        assert_eq!(timestamp(later, &mut out), "2025-12-01T17:48:22.000000Z");
    }
}
