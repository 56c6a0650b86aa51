//! The fuzz targets' committed corpora (`fuzz/corpus/<target>/`), replayed on stable by every
//! `cargo test` through the same checks libFuzzer runs (`fuzz/common.rs`): a crash the fuzzer
//! found once, saved in a corpus, stays fixed.

#[path = "../../fuzz/common.rs"]
mod common;

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut inputs = 0;
    for entry in std::fs::read_dir(&folder).unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
    {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(outcome.is_ok(), "{target}: {} panics", path.display());
        inputs += 1;
    }
    assert!(inputs >= 5, "{target}: only {inputs} inputs in {}", folder.display());
}

#[test]
fn tftp_packet_corpus() {
    replay("tftp_packet", common::tftp_packet);
}

#[test]
fn dhcp_packet_corpus() {
    replay("dhcp_packet", common::dhcp_packet);
}

#[test]
fn values_corpus() {
    replay("values", common::values);
}

#[test]
fn inventory_corpus() {
    replay("inventory", common::inventory);
}

#[test]
fn json_patch_corpus() {
    replay("json_patch", common::json_patch);
}

#[test]
fn probe_replies_corpus() {
    replay("probe_replies", common::probe_replies);
}

#[test]
fn iscsi_login_corpus() {
    replay("iscsi_login", common::iscsi_login);
    // The seeds are PDUs the machine reads, not noise: a whole login, LUN check and logout.
    let stream = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/iscsi_login/stream");
    assert_eq!(bootvol_iscsi::check_bytes(&std::fs::read(stream).unwrap()), 7);
}
