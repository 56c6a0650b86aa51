//! What each fuzz target checks, shared by the targets (`fuzz_targets/`, under libFuzzer) and
//! `tests/it/fuzz_corpora.rs` (the committed corpora replayed on stable). Each function must not
//! panic whatever the bytes; where a parser accepts its input, it checks what must then hold.

use std::str::FromStr;

/// A TFTP datagram through the server's parser.
pub(crate) fn tftp_packet(data: &[u8]) {
    bootvol_tftp::check_datagram(data);
}

/// Every value parser, on the bytes as text. A value that parses prints back as text that
/// parses to the same value.
pub(crate) fn values(data: &[u8]) {
    use bootvol_core::model::{IscsiName, Lun, MacAddr, Portal, Wwn};
    let Ok(text) = std::str::from_utf8(data) else { return };
    fn round_trip<T: FromStr + std::fmt::Display + PartialEq + std::fmt::Debug>(text: &str) {
        if let Ok(value) = text.parse::<T>() {
            let again = value.to_string().parse::<T>().ok();
            assert_eq!(again.as_ref(), Some(&value), "{text:?} printed as {value}");
        }
    }
    round_trip::<MacAddr>(text);
    round_trip::<IscsiName>(text);
    round_trip::<Wwn>(text);
    round_trip::<Portal>(text);
    let _ = Lun::from_json(&serde_json::Value::String(text.to_owned()));
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(text) {
        let _ = Lun::from_json(&json);
    }
}

/// A JSON patch as a client sends it to `PATCH /v1/nodes/{node}`.
pub(crate) fn json_patch(data: &[u8]) {
    bootvol::api::check_node_patch(data);
}

/// An inventory file, as JSON and as TOML, under a configuration that enables every storage
/// interface.
pub(crate) fn inventory(data: &[u8]) {
    use bootvol_core::inventory::{Format, parse};
    let Ok(text) = std::str::from_utf8(data) else { return };
    let config = config();
    for format in [Format::Json, Format::Toml] {
        let _ = parse(text, format, &config);
    }
}

fn config() -> bootvol_core::config::Config {
    bootvol_core::config::Config::from_toml(
        "[DEFAULT]\nenabled_storage_interfaces = [\"noop\", \"external\", \"cinder\"]\n\
         [cinder]\nurl = \"http://127.0.0.1:8776/v3\"\n",
        "fuzz",
    )
    .expect("the fuzz configuration is valid")
}

/// A DHCP datagram through the ProxyDHCP's parser and decision. A packet that parses encodes
/// back to one that parses to the same value; a reply never gives an address.
pub(crate) fn dhcp_packet(data: &[u8]) {
    use bootvol_edge::dhcp::packet::Packet;
    use bootvol_edge::dhcp::proxy::{Decision, Facts, Port, Settings, decide};
    let Ok(packet) = Packet::parse(data) else { return };
    assert_eq!(Packet::parse(&packet.encode()).as_ref(), Ok(&packet));
    // The facts and settings vary with the last byte (usually padding or option end).
    let bit = |n: u8| data.last().is_some_and(|b| b & n != 0);
    for port in [Port::Dhcp, Port::BootServer] {
        let facts = Facts {
            server: std::net::Ipv4Addr::new(10, 0, 0, 1),
            http_base: "http://10.0.0.1:8080",
            has_arm64: bit(1),
            known: bit(2),
            port,
            // Sent by its giaddr (a relay), or by a host with no address yet.
            source: if bit(16) { packet.giaddr } else { std::net::Ipv4Addr::UNSPECIFIED },
            relays: &[],
        };
        let settings = Settings { efi_discovery_bypass: !bit(4), known_only: bit(8) };
        if let Decision::Reply(reply) = decide(&packet, settings, &facts) {
            let back = Packet::parse(&reply.packet.encode()).expect("a reply parses");
            assert!(back.yiaddr.is_unspecified());
            assert_eq!(back.xid, packet.xid);
            if let bootvol_edge::dhcp::proxy::Destination::Relay(to) = reply.to {
                assert_eq!(to, facts.source, "a reply to a giaddr that did not send it");
            }
        }
    }
}

/// What a probe reads from the network (`bootvol_core::probe`): the bytes as an AoE frame, as
/// an RPC reply to GETPORT and to EXPORT, and as TCP record fragments. A parsed export list
/// stays within its bounds.
pub(crate) fn probe_replies(data: &[u8]) {
    use bootvol_core::probe::{aoe, rpc};
    if let Some(response) = aoe::parse(data) {
        let _ = (response.tag(), response.address());
    }
    let xid = data.get(..4).map_or(0, |w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    let _ = rpc::parse_getport(data, xid);
    if let Ok(exports) = rpc::parse_exports(data, xid) {
        assert!(exports.len() <= rpc::MAX_EXPORTS);
        assert!(
            exports.iter().all(|e| e.path.len() <= 3 * 1024 && e.groups.len() <= rpc::MAX_EXPORTS)
        );
        let _ = rpc::exports_path(&exports, "/export");
    }
    let mut record = rpc::Record::default();
    for chunk in data.chunks(7) {
        if record.push(chunk) != rpc::Assembled::Incomplete {
            break;
        }
    }
}

/// Bytes as a target's answers to the iSCSI probe: PDUs (each re-encoded to itself), their
/// text, CHAP, SCSI sense, REPORT LUNS and READ CAPACITY, fed to the login machine
/// (`bootvol_iscsi::check_bytes`).
pub(crate) fn iscsi_login(data: &[u8]) {
    let _ = bootvol_iscsi::check_bytes(data);
}
