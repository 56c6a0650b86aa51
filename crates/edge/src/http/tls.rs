//! TLS of the API listener (`[api] tls_cert` / `tls_key`): reads the PEM certificate chain and
//! private key, checks that they belong together, and builds the rustls server configuration
//! (the ring provider, TLS 1.2 and 1.3, HTTP/1.1 by ALPN); answers the certificate's SHA-256
//! fingerprint, which `check-config` reports and an operator compares with what the browser
//! shows (the appliance's console prints it). `check-config` and `serve` both call [`load`], so
//! a file that is missing, unreadable, not PEM, or a key that is not the certificate's, stops
//! both with the same message. The handshake itself is the listener's (`listener`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

use bootvol_core::config::ApiSection;

/// A loaded certificate and key, ready for the listener.
#[derive(Clone)]
pub struct Tls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// The certificate file, as configured.
    pub cert: PathBuf,
    /// SHA-256 of the server certificate's DER, `AB:CD:...` (as `openssl x509 -fingerprint
    /// -sha256` prints it).
    pub fingerprint: String,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("cert", &self.cert)
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

/// `[api]`'s TLS, or `None` when it has no `tls_cert` (the configuration's validation already
/// made sure the two keys come together). The error names the key and the file.
pub fn from_config(api: &ApiSection) -> Result<Option<Tls>, String> {
    match (&api.tls_cert, &api.tls_key) {
        (Some(cert), Some(key)) => load(cert, key).map(Some),
        (None, None) => Ok(None),
        _ => Err("api.tls_cert and api.tls_key: set both or neither".to_owned()),
    }
}

/// Reads `cert` (PEM, the server's certificate first, then any intermediates) and `key` (PEM:
/// PKCS#8, PKCS#1 or SEC1), and checks that the key is the certificate's.
pub fn load(cert: &Path, key: &Path) -> Result<Tls, String> {
    let read = |name: &str, path: &Path| {
        std::fs::read(path).map_err(|e| format!("{name}: cannot read {}: {e}", path.display()))
    };
    let cert_pem = read("api.tls_cert", cert)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("api.tls_cert: {} is not PEM: {e}", cert.display()))?;
    let Some(leaf) = chain.first() else {
        return Err(format!("api.tls_cert: {} holds no PEM certificate", cert.display()));
    };
    let fingerprint = fingerprint(leaf);
    let key_pem = read("api.tls_key", key)?;
    let private_key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("api.tls_key: {} holds no PEM private key ({e})", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        // Also checks that the key's public half is the certificate's.
        .with_single_cert(chain, private_key)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => format!(
                "api.tls_key: {} is not the private key of the certificate in {}",
                key.display(),
                cert.display()
            ),
            e => format!("api.tls_cert / api.tls_key ({}, {}): {e}", cert.display(), key.display()),
        })?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Tls {
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
        cert: cert.to_path_buf(),
        fingerprint,
    })
}

/// SHA-256 of a certificate's DER, as colon-separated upper-case hex.
pub fn fingerprint(cert: &CertificateDer<'_>) -> String {
    let digest = Sha256::digest(cert.as_ref());
    let hex: Vec<String> = digest.iter().map(|b| format!("{b:02X}")).collect();
    hex.join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_non_pem_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        let e = load(&cert, &key).unwrap_err();
        assert!(e.starts_with("api.tls_cert: cannot read ") && e.contains("cert.pem"), "{e}");
        std::fs::write(&cert, "not a certificate\n").unwrap();
        let e = load(&cert, &key).unwrap_err();
        assert!(e.contains("holds no PEM certificate"), "{e}");
    }

    #[test]
    fn the_fingerprint_is_colon_separated_hex_of_the_der() {
        let f = fingerprint(&CertificateDer::from(b"abc".to_vec()));
        assert_eq!(
            f,
            "BA:78:16:BF:8F:01:CF:EA:41:41:40:DE:5D:AE:22:23:B0:03:61:A3:96:17:7A:9C:B4:10:FF:61:F2:00:15:AD"
        );
    }
}
