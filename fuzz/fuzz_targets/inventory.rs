//! Fuzz target `inventory`: see `fuzz/common.rs`.
#![no_main]

#[path = "../common.rs"]
mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| common::inventory(data));
