//! The iPXE EFI binaries as a Secure Boot node's firmware must get them: each `*.efi` file of
//! `[tftp] root`, signed (Authenticode) with the operator's key of `[secure_boot]`, whose
//! certificate is in the nodes' `db`. Signed by Debian's `sbsign` (sbsigntool, OpenSSL's
//! PKCS#7), not by code of ours: a signer is a security boundary, and sbsign is the one Debian
//! signs with and tests. Signed at start ([`SignedBinaries::sign_present`]) and again whenever
//! a file's size or time changes, into a private directory of this process that both TFTP and
//! HTTP `/ipxe/` serve from. Other files are served as they are.
//!
//! It owns the signed copies and when they are made; it must not know who asks for them
//! (TFTP or HTTP), nor the nodes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::SystemTime;

use bootvol_core::config::SecureBootSection;
use bootvol_core::files::{FileError, FileRoot};

/// The binaries signed at start when present: what the ProxyDHCP hands out.
pub const SIGNED_AT_START: [&str; 2] = ["snponly.efi", "snponly-arm64.efi"];

/// Why a binary could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("{0}")]
    File(#[from] FileError),
    #[error("{0}")]
    Config(String),
    #[error("signing {name}: {message}")]
    Sign { name: String, message: String },
}

/// The signed copies of one `[tftp] root`.
#[derive(Debug)]
pub struct SignedBinaries {
    source: FileRoot,
    key: PathBuf,
    cert: PathBuf,
    sbsign: PathBuf,
    /// Private to this process (0700), removed when it ends.
    dir: tempfile::TempDir,
    /// By source file (resolved): the version signed and where its copy is. Held while a file
    /// is signed, so that a boot storm signs a new version once.
    copies: Mutex<HashMap<PathBuf, SignedCopy>>,
}

#[derive(Debug, Clone)]
struct SignedCopy {
    modified: Option<SystemTime>,
    len: u64,
    path: PathBuf,
}

impl SignedBinaries {
    /// Checks that `[secure_boot]` names a key and a certificate that are readable PEM, the
    /// key not encrypted, and that the signer exists; signs nothing yet.
    pub fn new(config: &SecureBootSection, source: FileRoot) -> Result<SignedBinaries, SignError> {
        let (key, cert) = config
            .signing()
            .ok_or_else(|| SignError::Config("[secure_boot] key and cert are not set".into()))?;
        check_pem(key, "secure_boot.key", &["PRIVATE KEY-----"])?;
        check_pem(cert, "secure_boot.cert", &["-----BEGIN CERTIFICATE-----"])?;
        if !config.sbsign.is_file() {
            return Err(SignError::Config(format!(
                "secure_boot.sbsign: {} does not exist (apt install sbsigntool)",
                config.sbsign.display()
            )));
        }
        let dir = tempfile::Builder::new()
            .prefix("bootvol-signed-")
            .tempdir()
            .map_err(|e| SignError::Config(format!("a directory for the signed binaries: {e}")))?;
        Ok(SignedBinaries {
            source,
            key: key.clone(),
            cert: cert.clone(),
            sbsign: config.sbsign.clone(),
            dir,
            copies: Mutex::default(),
        })
    }

    /// Whether a name is served signed: an EFI binary (`*.efi`, any case).
    pub fn signs(name: &str) -> bool {
        let name = name.as_bytes();
        name.len() > 4 && name[name.len() - 4..].eq_ignore_ascii_case(b".efi")
    }

    /// [`SignedBinaries::path`] for a client (TFTP or HTTP): a file the root refuses is that
    /// refusal; a failure to sign is logged here and is `None`, a fault of the server (the file
    /// is never served unsigned in its place).
    pub fn served(&self, name: &str) -> Result<PathBuf, Option<FileError>> {
        self.path(name).map_err(|e| match e {
            SignError::File(e) => Some(e),
            other => {
                tracing::error!(file = name, error = %other, "secure boot: not served");
                None
            }
        })
    }

    /// Signs those of [`SIGNED_AT_START`] the root holds; the names signed.
    pub fn sign_present(&self) -> Result<Vec<&'static str>, SignError> {
        let mut signed = Vec::new();
        for name in SIGNED_AT_START {
            match self.path(name) {
                Ok(_) => signed.push(name),
                Err(SignError::File(FileError::NotFound)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(signed)
    }

    /// The signed copy of `name` (confined to the root like any served file), signed now if
    /// the file is new or changed since. Blocking: run it off the async threads.
    pub fn path(&self, name: &str) -> Result<PathBuf, SignError> {
        let source = self.source.resolve(name)?;
        let (_, meta) = bootvol_core::files::open_regular(&source)
            .map_err(|_| SignError::File(FileError::Denied("not a regular file")))?;
        let (modified, len) = (meta.modified().ok(), meta.len());
        let mut copies = self.copies.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(copy) = copies.get(&source).filter(|c| c.modified == modified && c.len == len) {
            return Ok(copy.path.clone());
        }
        let index = copies.get(&source).map_or(copies.len(), |c| {
            c.path.file_stem().and_then(|s| s.to_str()?.parse().ok()).unwrap_or(copies.len())
        });
        let path = self.dir.path().join(format!("{index}.efi"));
        self.sign(name, &source, &path)?;
        tracing::info!(file = name, bytes = len, "secure boot: signed with [secure_boot] key");
        copies.insert(source, SignedCopy { modified, len, path: path.clone() });
        Ok(path)
    }

    /// Signs `source` into `out`, through a file beside it renamed at the end: a copy being
    /// served is never half written.
    fn sign(&self, name: &str, source: &Path, out: &Path) -> Result<(), SignError> {
        let partial = out.with_extension("partial");
        #[allow(clippy::disallowed_methods)] // the signer (see the module's header)
        let output = Command::new(&self.sbsign)
            .arg("--key")
            .arg(&self.key)
            .arg("--cert")
            .arg(&self.cert)
            .arg("--output")
            .arg(&partial)
            .arg(source)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| SignError::Sign {
                name: name.into(),
                message: format!("{}: {e}", self.sbsign.display()),
            })?;
        if !output.status.success() {
            let said = String::from_utf8_lossy(&output.stderr);
            let said: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty()).take(4).collect();
            let _ = std::fs::remove_file(&partial);
            return Err(SignError::Sign {
                name: name.into(),
                message: format!("sbsign {}: {}", output.status, said.join(" / ")),
            });
        }
        std::fs::rename(&partial, out)
            .map_err(|e| SignError::Sign { name: name.into(), message: e.to_string() })
    }
}

/// A PEM file the signer reads: readable, holding `markers`, and not encrypted (nobody is at
/// a console to give its passphrase; sbsign would wait for it).
fn check_pem(path: &Path, key: &str, markers: &[&str]) -> Result<(), SignError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SignError::Config(format!("{key}: {}: {e}", path.display())))?;
    if !markers.iter().all(|m| text.contains(m)) {
        return Err(SignError::Config(format!(
            "{key}: {} is not the PEM expected",
            path.display()
        )));
    }
    if text.contains("ENCRYPTED") {
        return Err(SignError::Config(format!(
            "{key}: {} is encrypted, and the service cannot type its passphrase: decrypt it \
             into a file only bootvol reads (openssl pkey -in {} -out /etc/bootvol/secure-boot.key) \
             and name that file",
            path.display(),
            path.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efi_names_are_signed_and_nothing_else() {
        assert!(SignedBinaries::signs("snponly.efi"));
        assert!(SignedBinaries::signs("arm64/SNPONLY.EFI"));
        assert!(!SignedBinaries::signs("undionly.kpxe"));
        assert!(!SignedBinaries::signs(".efi"));
        assert!(!SignedBinaries::signs("boot.ipxe"));
    }

    #[test]
    fn an_encrypted_or_wrong_key_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("db.key");
        std::fs::write(&key, "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAA==\n").unwrap();
        let err = check_pem(&key, "secure_boot.key", &["PRIVATE KEY-----"]).unwrap_err();
        assert!(err.to_string().contains("is encrypted"), "{err}");
        std::fs::write(&key, "-----BEGIN CERTIFICATE-----\nAA==\n").unwrap();
        let err = check_pem(&key, "secure_boot.key", &["PRIVATE KEY-----"]).unwrap_err();
        assert!(err.to_string().contains("not the PEM expected"), "{err}");
        let err = check_pem(&dir.path().join("none"), "secure_boot.key", &[]).unwrap_err();
        assert!(err.to_string().starts_with("secure_boot.key: "), "{err}");
    }
}
