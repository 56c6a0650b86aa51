//! `[secure_boot]`: the operator's Secure Boot signing key and certificate (the key whose
//! certificate is in the nodes' firmware `db`), with which the iPXE EFI binaries of `[tftp]
//! root` are served signed, and the signing tool. Both files or neither; absolute paths.
//!
//! It must not know how a binary is signed (`bootvol_edge::secure_boot` does): only the values.

use std::path::PathBuf;

use serde::Deserialize;

use super::{Invalid, require_absolute};

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecureBootSection {
    /// The signing key: PEM, not encrypted (the service signs without a console).
    pub key: Option<PathBuf>,
    /// Its X.509 certificate, PEM: the one enrolled in the nodes' `db`.
    pub cert: Option<PathBuf>,
    /// Debian's Authenticode signer (package `sbsigntool`).
    pub sbsign: PathBuf,
}

impl Default for SecureBootSection {
    fn default() -> Self {
        SecureBootSection { key: None, cert: None, sbsign: PathBuf::from("/usr/bin/sbsign") }
    }
}

impl SecureBootSection {
    /// The key and the certificate, when both are set.
    pub fn signing(&self) -> Option<(&PathBuf, &PathBuf)> {
        self.key.as_ref().zip(self.cert.as_ref())
    }

    pub(super) fn validate(&self) -> Result<(), Invalid> {
        match (&self.key, &self.cert) {
            (Some(_), None) => Err((
                "secure_boot.cert",
                "must be set with secure_boot.key (both or neither)".into(),
            )),
            (None, Some(_)) => Err((
                "secure_boot.key",
                "must be set with secure_boot.cert (both or neither)".into(),
            )),
            (Some(key), Some(cert)) => {
                require_absolute("secure_boot.key", key)?;
                require_absolute("secure_boot.cert", cert)?;
                require_absolute("secure_boot.sbsign", &self.sbsign)
            }
            (None, None) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn secure_boot_is_off_by_default_and_needs_both_files() {
        let config = Config::from_toml("", "t").unwrap();
        assert_eq!(config.secure_boot.signing(), None);
        let both = "[secure_boot]\nkey = \"/etc/bootvol/db.key\"\ncert = \"/etc/bootvol/db.pem\"\n";
        let config = Config::from_toml(both, "t").unwrap();
        assert!(config.secure_boot.signing().is_some());
        assert!(config.boot_settings().secure_boot);
        let err = Config::from_toml("[secure_boot]\nkey = \"/k\"\n", "t").unwrap_err();
        assert_eq!(
            err.to_string(),
            "t: secure_boot.cert: must be set with secure_boot.key (both or neither)"
        );
        let err =
            Config::from_toml("[secure_boot]\nkey = \"k\"\ncert = \"/c\"\n", "t").unwrap_err();
        assert_eq!(err.to_string(), "t: secure_boot.key: k is not an absolute path");
        let err = Config::from_toml("[secure_boot]\npassphrase = \"x\"\n", "t").unwrap_err();
        assert!(err.to_string().contains("unknown field `passphrase`"), "{err}");
    }
}
