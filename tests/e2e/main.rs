//! End-to-end boots of real VMs through `bootvol serve`: QEMU (TCG) firmware and iPXE fetch
//! bootvol's scripts and boot real volumes from real targets (tgtd, vblade, nfs-ganesha). Each
//! volume prints its own marker on COM1 and stops QEMU with a known exit status, so a test passes
//! only when the right volume booted.
//!
//! The boots need root and the packages `.ci/e2e-deps.sh` installs. Without them a test is
//! skipped, saying so (`skip`), unless `BOOTVOL_REQUIRE_E2E=1` (CI) makes it fail. Boots run one at
//! a time, and every process a test starts is killed when it ends, even when it panics (and by
//! the kernel if the test process itself dies). A failing test keeps its scratch directory (the
//! serial log, QEMU's, bootvol's and every daemon's log) and names it on stderr;
//! `BOOTVOL_E2E_KEEP=1` keeps those of passing tests too.
//!
//! Layout: `support/` (processes, ports and namespaces, QEMU, tgtd, bootvol), `volumes` (disk
//! images written byte by byte), then one module per kind of boot.

mod aoe;
mod appliance;
mod deploy;
mod fallback;
mod http_san;
mod iscsi_bios;
mod neighbour;
mod nfs_root;
mod proxy_dhcp;
mod reports;
mod secure_boot;
#[path = "../lib/skip.rs"]
#[allow(dead_code)] // the kinds of tools the other test binary needs
mod skip;
mod support;
mod uefi;
mod volumes;
