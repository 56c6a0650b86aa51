//! bootvol's single integration-test binary: goldens for every scenario, hostile values, and the
//! `bootvol` commands run as a user runs them.

mod admin;
mod api;
mod appliance_scripts;
mod cinder;
mod cinder_support;
mod cli;
mod cluster;
mod conductor;
mod dhcp;
mod flood;
mod fuzz_corpora;
mod hostile;
mod iscsi_probe;
mod keystone;
mod listener;
mod logs;
mod metrics;
mod neighbour;
mod netns;
mod postgres;
mod power;
mod probe;
mod public_url;
mod race;
mod reports;
mod scenarios;
mod sdnotify;
mod serve;
#[path = "../lib/skip.rs"]
#[allow(dead_code)] // the kinds of tools the other test binary needs
mod skip;
mod support;
mod tftp;
mod tidy;
mod tls;
mod validation;
