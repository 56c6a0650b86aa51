//! Fuzz target `tftp_packet`: see `fuzz/common.rs`.
#![no_main]

#[path = "../common.rs"]
mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| common::tftp_packet(data));
