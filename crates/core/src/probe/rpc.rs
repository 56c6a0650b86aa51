//! ONC RPC (RFC 5531) and XDR (RFC 4506) for the NFS root probe: the portmapper's GETPORT
//! (program 100000, version 2) for the MOUNT service, and MOUNT version 3's EXPORT (program
//! 100005, RFC 1813 appendix I), over TCP with record marking. Sans-io: calls are built as
//! bytes, replies parsed from bytes; no socket, no clock. Every parser is total and bounded
//! (at most [`MAX_EXPORTS`] exports, [`MAX_RECORD`] bytes in a reply).

/// The portmapper's program, version and port.
pub const PORTMAP_PROGRAM: u32 = 100_000;
pub const PORTMAP_VERSION: u32 = 2;
pub const PORTMAP_PORT: u16 = 111;
/// MOUNT's program and the version asked for.
pub const MOUNT_PROGRAM: u32 = 100_005;
pub const MOUNT_VERSION: u32 = 3;
/// The most bytes a reply may take (fragments together).
pub const MAX_RECORD: usize = 1 << 20;
/// The most exports read from a list (the rest are ignored).
pub const MAX_EXPORTS: usize = 4096;

const PMAPPROC_GETPORT: u32 = 3;
const MOUNTPROC3_EXPORT: u32 = 5;
const IPPROTO_TCP: u32 = 6;
const LAST_FRAGMENT: u32 = 0x8000_0000;
/// `dirpath` and `name` are at most 1024 bytes (MNTPATHLEN, MNTNAMLEN is 255).
const MAX_PATH: usize = 1024;

/// Why a reply was not what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    #[error("the reply is truncated or malformed")]
    Malformed,
    #[error("the reply answers another call (xid {0:#x})")]
    OtherCall(u32),
    #[error("the call was refused: {0}")]
    Denied(&'static str),
    #[error("the call was not accepted: {0}")]
    NotAccepted(&'static str),
}

/// An RPC call with no credentials (AUTH_NONE), framed as one TCP record.
fn call(xid: u32, program: u32, version: u32, procedure: u32, args: &[u32]) -> Vec<u8> {
    let words = [xid, 0, 2, program, version, procedure, 0, 0, 0, 0];
    let body: Vec<u8> = words.iter().chain(args).flat_map(|w| w.to_be_bytes()).collect();
    let mut record = (LAST_FRAGMENT | body.len() as u32).to_be_bytes().to_vec();
    record.extend_from_slice(&body);
    record
}

/// The portmapper's GETPORT for MOUNT v3 over TCP.
pub fn getport_mount(xid: u32) -> Vec<u8> {
    call(
        xid,
        PORTMAP_PROGRAM,
        PORTMAP_VERSION,
        PMAPPROC_GETPORT,
        &[MOUNT_PROGRAM, MOUNT_VERSION, IPPROTO_TCP, 0],
    )
}

/// MOUNT v3's EXPORT (no arguments).
pub fn export_call(xid: u32) -> Vec<u8> {
    call(xid, MOUNT_PROGRAM, MOUNT_VERSION, MOUNTPROC3_EXPORT, &[])
}

/// Record marking: collects fragments until the last one. Feed it what the socket gives.
#[derive(Debug, Default)]
pub struct Record {
    buffer: Vec<u8>,
}

/// What [`Record::push`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assembled {
    /// More bytes are needed.
    Incomplete,
    /// The whole record (fragment headers removed).
    Done(Vec<u8>),
    /// The record is over [`MAX_RECORD`] bytes.
    TooLarge,
}

impl Record {
    /// Adds received bytes and says whether the record is complete.
    pub fn push(&mut self, bytes: &[u8]) -> Assembled {
        self.buffer.extend_from_slice(bytes);
        let mut body = Vec::new();
        let mut at = 0;
        loop {
            let Some(header) = self.buffer.get(at..at + 4) else { return Assembled::Incomplete };
            let header = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
            let len = (header & !LAST_FRAGMENT) as usize;
            if body.len() + len > MAX_RECORD {
                return Assembled::TooLarge;
            }
            let Some(fragment) = self.buffer.get(at + 4..at + 4 + len) else {
                return if self.buffer.len() > MAX_RECORD + 4096 {
                    Assembled::TooLarge
                } else {
                    Assembled::Incomplete
                };
            };
            body.extend_from_slice(fragment);
            at += 4 + len;
            if header & LAST_FRAGMENT != 0 {
                return Assembled::Done(body);
            }
        }
    }
}

/// An XDR reader over a reply.
struct Xdr<'a> {
    bytes: &'a [u8],
}

impl<'a> Xdr<'a> {
    fn u32(&mut self) -> Result<u32, RpcError> {
        let (word, rest) = self.bytes.split_first_chunk::<4>().ok_or(RpcError::Malformed)?;
        self.bytes = rest;
        Ok(u32::from_be_bytes(*word))
    }

    fn opaque(&mut self, max: usize) -> Result<&'a [u8], RpcError> {
        let len = self.u32()? as usize;
        if len > max {
            return Err(RpcError::Malformed);
        }
        let padded = len.checked_add(3).ok_or(RpcError::Malformed)? & !3;
        let data = self.bytes.get(..len).ok_or(RpcError::Malformed)?;
        self.bytes = self.bytes.get(padded..).ok_or(RpcError::Malformed)?;
        Ok(data)
    }

    fn string(&mut self, max: usize) -> Result<String, RpcError> {
        Ok(String::from_utf8_lossy(self.opaque(max)?).into_owned())
    }
}

/// The results of an accepted, successful reply to call `xid`.
fn results(reply: &[u8], xid: u32) -> Result<Xdr<'_>, RpcError> {
    let mut x = Xdr { bytes: reply };
    let got = x.u32()?;
    if got != xid {
        return Err(RpcError::OtherCall(got));
    }
    if x.u32()? != 1 {
        return Err(RpcError::Malformed);
    }
    match x.u32()? {
        0 => {}
        1 => {
            return Err(RpcError::Denied(match x.u32()? {
                0 => "RPC version mismatch",
                _ => "authentication error",
            }));
        }
        _ => return Err(RpcError::Malformed),
    }
    let _flavor = x.u32()?;
    x.opaque(400)?;
    match x.u32()? {
        0 => Ok(x),
        1 => Err(RpcError::NotAccepted("program unavailable")),
        2 => Err(RpcError::NotAccepted("program version mismatch")),
        3 => Err(RpcError::NotAccepted("procedure unavailable")),
        4 => Err(RpcError::NotAccepted("garbage arguments")),
        _ => Err(RpcError::NotAccepted("system error")),
    }
}

/// GETPORT's answer: the port, 0 when the program is not registered.
pub fn parse_getport(reply: &[u8], xid: u32) -> Result<u16, RpcError> {
    let port = results(reply, xid)?.u32()?;
    u16::try_from(port).map_err(|_| RpcError::Malformed)
}

/// One export: its path and the clients (groups) it is exported to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    pub path: String,
    pub groups: Vec<String>,
}

/// EXPORT's answer: the export list.
pub fn parse_exports(reply: &[u8], xid: u32) -> Result<Vec<Export>, RpcError> {
    let mut x = results(reply, xid)?;
    let mut exports = Vec::new();
    while x.u32()? == 1 {
        let path = x.string(MAX_PATH)?;
        let mut groups = Vec::new();
        while x.u32()? == 1 {
            let group = x.string(MAX_PATH)?;
            if groups.len() < MAX_EXPORTS {
                groups.push(group);
            }
        }
        if exports.len() < MAX_EXPORTS {
            exports.push(Export { path, groups });
        }
    }
    Ok(exports)
}

/// Whether `path` is exported: listed as it is, or under a listed export (a mount of a
/// sub-folder of an export works), trailing slashes aside.
pub fn exports_path(exports: &[Export], path: &str) -> bool {
    let path = path.trim_end_matches('/');
    exports.iter().any(|e| {
        let export = e.path.trim_end_matches('/');
        path == export
            || export.is_empty()
            || path.strip_prefix(export).is_some_and(|rest| rest.starts_with('/'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    fn string(s: &str) -> Vec<u8> {
        let mut out = (s.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(s.as_bytes());
        out.resize(out.len().next_multiple_of(4), 0);
        out
    }

    /// xid, REPLY, MSG_ACCEPTED, verifier AUTH_NONE (empty), SUCCESS.
    fn accepted(xid: u32) -> Vec<u8> {
        words(&[xid, 1, 0, 0, 0, 0])
    }

    #[test]
    fn calls_are_one_record_with_auth_none() {
        let c = getport_mount(7);
        assert_eq!(&c[0..4], &(0x8000_0000u32 | 56).to_be_bytes());
        assert_eq!(&c[4..], &words(&[7, 0, 2, 100_000, 2, 3, 0, 0, 0, 0, 100_005, 3, 6, 0]));
        let e = export_call(9);
        assert_eq!(&e[4..], &words(&[9, 0, 2, 100_005, 3, 5, 0, 0, 0, 0]));
    }

    #[test]
    fn replies_parse() {
        let mut reply = accepted(7);
        reply.extend(words(&[20048]));
        assert_eq!(parse_getport(&reply, 7), Ok(20048));
        assert_eq!(parse_getport(&reply, 8), Err(RpcError::OtherCall(7)));
        let mut list = accepted(9);
        list.extend(words(&[1]));
        list.extend(string("/export"));
        list.extend(words(&[1]));
        list.extend(string("*"));
        list.extend(words(&[0, 1]));
        list.extend(string("/srv/roots/"));
        list.extend(words(&[0, 0]));
        let exports = parse_exports(&list, 9).unwrap();
        assert_eq!(exports.len(), 2);
        assert_eq!(exports[0], Export { path: "/export".into(), groups: vec!["*".into()] });
        assert!(exports_path(&exports, "/export"));
        assert!(exports_path(&exports, "/srv/roots/n1"));
        assert!(!exports_path(&exports, "/exported"));
        assert!(!exports_path(&exports, "/srv"));
        let mut unavailable = words(&[9, 1, 0, 0, 0, 1]);
        unavailable.extend(words(&[0]));
        assert_eq!(
            parse_exports(&unavailable, 9),
            Err(RpcError::NotAccepted("program unavailable"))
        );
        assert_eq!(
            parse_exports(&words(&[9, 1, 1, 1, 1]), 9).unwrap_err().to_string(),
            "the call was refused: authentication error"
        );
    }

    #[test]
    fn records_assemble_across_fragments_and_reads() {
        let mut r = Record::default();
        assert_eq!(r.push(&[0, 0, 0, 2, b'a']), Assembled::Incomplete);
        assert_eq!(r.push(&[b'b', 0x80, 0, 0, 1]), Assembled::Incomplete);
        assert_eq!(r.push(b"c"), Assembled::Done(b"abc".to_vec()));
        let mut big = Record::default();
        assert_eq!(big.push(&[0x80, 0x20, 0, 0]), Assembled::TooLarge);
    }

    #[test]
    fn parsers_are_total() {
        let mut seed = 99u32;
        for len in 0..300 {
            let mut bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (seed >> 24) as u8 & 0x03
                })
                .collect();
            let _ = parse_exports(&bytes, 0);
            let _ = parse_getport(&bytes, 0);
            let _ = Record::default().push(&bytes);
            if len > 24 {
                bytes[..24].copy_from_slice(&accepted(0));
                let _ = parse_exports(&bytes, 0);
            }
        }
        // A length that claims more than the reply has.
        let mut huge = accepted(0);
        huge.extend(words(&[1, 0xffff_fff0]));
        assert_eq!(parse_exports(&huge, 0), Err(RpcError::Malformed));
    }
}
