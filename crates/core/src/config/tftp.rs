//! `[tftp]`: the TFTP listener's root, the options it grants, its caps, and their checks.
//!
//! It must not know the TFTP protocol itself (crates/tftp owns that): only the values.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::Invalid;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TftpSection {
    pub listen: SocketAddr,
    /// iPXE binaries and other files served by name.
    pub root: PathBuf,
    /// The largest `blksize` granted (RFC 2348); 1468 fits a 1500-byte Ethernet frame.
    pub max_block_size: u16,
    /// The largest `windowsize` granted (RFC 7440).
    pub max_window_size: u16,
    /// Seconds before a block is sent again.
    pub timeout: u64,
    /// Retransmissions before a silent client is given up.
    pub retries: u32,
    /// Transfers open at once (each holds a thread and a socket until it ends); past it,
    /// "server busy".
    pub max_transfers: usize,
    /// Transfers open at once for one client address; past it, "server busy" to that address.
    pub max_transfers_per_client: usize,
}

impl Default for TftpSection {
    fn default() -> Self {
        TftpSection {
            listen: SocketAddr::from(([0, 0, 0, 0], 69)),
            root: PathBuf::from("/usr/lib/ipxe"),
            max_block_size: 1468,
            max_window_size: 16,
            timeout: 1,
            retries: 5,
            max_transfers: 200,
            max_transfers_per_client: 32,
        }
    }
}

impl TftpSection {
    /// What a transfer may negotiate and how it retransmits: block and window sizes, the
    /// timeout and the retries.
    pub(super) fn validate_transfer_options(&self) -> Result<(), Invalid> {
        if !(512..=65464).contains(&self.max_block_size) {
            return Err((
                "tftp.max_block_size",
                format!("{} is not between 512 and 65464", self.max_block_size),
            ));
        }
        if self.max_window_size == 0 {
            return Err(("tftp.max_window_size", "must be at least 1".into()));
        }
        if !(1..=255).contains(&self.timeout) {
            return Err((
                "tftp.timeout",
                format!("{} is not between 1 and 255 seconds", self.timeout),
            ));
        }
        if self.retries > 50 {
            return Err(("tftp.retries", format!("{} is more than 50", self.retries)));
        }
        Ok(())
    }

    /// At least one transfer at once, and a per-client cap within the overall one.
    pub(super) fn validate_caps(&self) -> Result<(), Invalid> {
        if self.max_transfers == 0 {
            return Err(("tftp.max_transfers", "must be at least 1".into()));
        }
        if !(1..=self.max_transfers).contains(&self.max_transfers_per_client) {
            return Err((
                "tftp.max_transfers_per_client",
                format!(
                    "{} is not between 1 and max_transfers ({})",
                    self.max_transfers_per_client, self.max_transfers
                ),
            ));
        }
        Ok(())
    }
}
