//! Fuzz target `iscsi_login`: see `fuzz/common.rs`.
#![no_main]

// Each target uses one of the shared checks.
#[allow(dead_code)]
#[path = "../common.rs"]
mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| common::iscsi_login(data));
