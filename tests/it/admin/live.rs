//! The live stream (`/admin/stream`) over a raw HTTP connection, read with deadlines: its
//! content type, a node change made through the REST API arriving on it, one stream per session
//! (a second one replaces the first, which is told and ends), and the end of the stream with
//! its session's log-out; the script it comes with is served, and the pages load it.

use std::io::{Read, Write};
use std::net::TcpStream;

use super::*;

/// One open stream: what it sent so far.
struct Stream {
    socket: TcpStream,
    text: String,
}

impl Stream {
    /// `GET /admin/stream` with `cookie` (`Connection: close`: the end of the stream closes
    /// the connection, so its end is seen as the end of the bytes).
    fn open(admin: &Admin, cookie: &str, query: &str) -> Stream {
        let addr = admin.base.trim_start_matches("http://");
        let mut socket = TcpStream::connect(addr).unwrap();
        let request = format!(
            "GET /admin/stream{query} HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\n\
             Accept: text/event-stream\r\nConnection: close\r\n\r\n"
        );
        socket.write_all(request.as_bytes()).unwrap();
        Stream { socket, text: String::new() }
    }

    /// Reads until `needle` arrives after `from` (a byte offset of what was read), for at most
    /// `within`; where it was found.
    fn wait_for(&mut self, needle: &str, from: usize, within: Duration) -> Option<usize> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(at) = self.text[from.min(self.text.len())..].find(needle) {
                return Some(from + at);
            }
            if !self.read(deadline) {
                return None;
            }
        }
    }

    /// Reads more, until `deadline`; false when the stream ended or the deadline passed.
    fn read(&mut self, deadline: Instant) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        self.socket.set_read_timeout(Some(left)).unwrap();
        let mut buf = [0u8; 8192];
        match self.socket.read(&mut buf) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.text.push_str(&String::from_utf8_lossy(&buf[..n]));
                true
            }
        }
    }

    /// Whether the server ends the stream (closes the connection) within `within`.
    fn ends_within(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        self.socket.set_read_timeout(Some(within)).unwrap();
        let mut buf = [0u8; 8192];
        loop {
            match self.socket.read(&mut buf) {
                Ok(0) => return true,
                Ok(n) => self.text.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(_) => return false,
            }
            if Instant::now() >= deadline {
                return false;
            }
        }
    }
}

/// A REST API call as the operator (`1.38`), its status.
fn api(admin: &Admin, method: &str, path: &str, body: &str) -> u16 {
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let request = ureq::http::Request::builder()
        .method(method)
        .uri(format!("{}{path}", admin.base))
        .header("Authorization", format!("Basic {}", basic(USER, PASSWORD)))
        .header("X-OpenStack-Ironic-API-Version", "1.38")
        .header("Content-Type", "application/json")
        .body(body.to_owned())
        .unwrap();
    agent.run(request).map(|r| r.status().as_u16()).unwrap()
}

#[test]
fn the_stream_carries_changes_is_one_per_session_and_ends_with_the_session() {
    let admin = Admin::start();
    let cookie = admin.login(PASSWORD).cookie();
    assert_eq!(api(&admin, "POST", "/v1/nodes", r#"{"name": "live-1", "driver": "fake"}"#), 201);

    // Without a session: 401, not a stream (EventSource does not retry it).
    let mut anonymous = Stream::open(&admin, "bootvol_admin=nothing", "");
    assert!(anonymous.wait_for("HTTP/1.1 401", 0, Duration::from_secs(5)).is_some());

    // The pages load the script, which is served; the nodes list stays light.
    let list = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]);
    assert!(list.body.contains("<script src=\"/admin/live.js\" defer data-gen="), "the script");
    assert!(list.body.len() < 60_000, "the nodes list is {} bytes", list.body.len());
    let script = admin.call("GET", "/admin/live.js", None, &[]);
    assert!(script.header("content-type").unwrap().starts_with("text/javascript"));
    assert!(script.body.contains("new EventSource("), "{}", script.body);
    assert!(list.header("content-security-policy").unwrap().contains("script-src 'self'"));

    // The stream: its type, its hello, then a change made through the API.
    let mut first = Stream::open(&admin, &cookie, "");
    let hello = first.wait_for("event: hello", 0, Duration::from_secs(10)).expect("a hello");
    let head = first.text[..hello].to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    assert!(head.contains("x-frame-options: deny"), "framing forbidden as everywhere: {head}");
    let status = api(&admin, "PUT", "/v1/nodes/live-1/maintenance", r#"{"reason": "live test"}"#);
    assert_eq!(status, 202);
    let change = first
        .wait_for("\"maintenance\":true", hello, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("the change did not arrive: {}", first.text));
    let line_start = first.text[..change].rfind("event: ").unwrap();
    assert!(first.text[line_start..].starts_with("event: node"), "{}", &first.text[line_start..]);
    assert!(first.text[line_start..change].contains("\"name\":\"live-1\""));
    let status = api(&admin, "PUT", "/v1/nodes/live-1/states/power", r#"{"target": "power on"}"#);
    assert_eq!(status, 202);
    assert!(
        first.wait_for("\"power\":\"power on\"", change, Duration::from_secs(10)).is_some(),
        "the power change did not arrive: {}",
        first.text
    );

    // A second stream of the same session replaces the first: told so, it ends.
    let mut second = Stream::open(&admin, &cookie, "");
    assert!(second.wait_for("event: hello", 0, Duration::from_secs(10)).is_some());
    let end = first.wait_for("event: end", change, Duration::from_secs(5)).expect("the first ends");
    assert!(first.text[end..].contains("\"reason\":\"replaced\""), "{}", &first.text[end..]);
    assert!(first.ends_within(Duration::from_secs(5)), "the first stream is closed");

    // Log-out ends the session's stream within a few seconds.
    let csrf = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]).csrf();
    let out = post(&admin, &cookie, &csrf, "/admin/logout", &[]);
    assert_eq!(out.status, 303);
    let end = second.wait_for("event: end", 0, Duration::from_secs(5)).expect("the stream ends");
    assert!(second.text[end..].contains("\"reason\":\"logged out\""), "{}", &second.text[end..]);
    assert!(second.ends_within(Duration::from_secs(5)), "the stream is closed after log-out");
    // And a stream of the ended session is refused.
    let mut after = Stream::open(&admin, &cookie, "");
    assert!(after.wait_for("HTTP/1.1 401", 0, Duration::from_secs(5)).is_some());
}

/// A session that ends without a log-out (its user's password changed) ends its stream at the
/// next tick.
#[test]
fn a_stream_ends_when_its_session_ends_otherwise() {
    let admin = Admin::start();
    let cookie = admin.login(PASSWORD).cookie();
    let mut stream = Stream::open(&admin, &cookie, "");
    assert!(stream.wait_for("event: hello", 0, Duration::from_secs(10)).is_some());
    let hash = bcrypt::hash("another-password", 4).unwrap();
    rewrite_htpasswd(&admin, &format!("{USER}:{hash}\n"));
    let end = stream.wait_for("event: end", 0, Duration::from_secs(10)).expect("the stream ends");
    assert!(stream.text[end..].contains("\"reason\":\"session ended\""), "{}", stream.text);
    assert!(stream.ends_within(Duration::from_secs(5)));
}
