//! The probe's HTTP: an HTTP SAN volume answers HEAD with 200 and its size, and a 512-byte
//! range read with 206 (iPXE reads the volume by ranges); an NFS root's kernel and initrd URLs
//! answer HEAD with 200. Reads only; at most 4 KiB of a body is read.

use std::time::Duration;

use bootvol_core::probe::{Status, size_text};
use reqwest::{Client, StatusCode, header};

/// The probes' HTTP client (the only file of the probe that names `reqwest`): its timeout per
/// request, redirects followed as iPXE follows them.
#[derive(Debug, Clone)]
pub(super) struct Http(Client);

impl Http {
    pub(super) fn new(timeout: Duration) -> Http {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Http(
            Client::builder()
                .timeout(timeout)
                .connect_timeout(timeout)
                .user_agent("bootvol-probe")
                .build()
                .unwrap_or_default(),
        )
    }

    /// HEAD `url`: its length when it answered 200, else why not.
    pub(super) async fn head(&self, url: &str) -> Result<Option<u64>, String> {
        head(&self.0, url).await
    }

    /// The HTTP SAN probe of `url`.
    pub(super) async fn san(&self, url: &str) -> (Status, String) {
        san(&self.0, url).await
    }
}

async fn head(client: &Client, url: &str) -> Result<Option<u64>, String> {
    let response =
        client.head(url).send().await.map_err(|e| format!("HEAD {url}: {}", error_text(&e)))?;
    if response.status() != StatusCode::OK {
        return Err(format!("HEAD {url}: {}", response.status()));
    }
    Ok(response
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok()))
}

async fn san(client: &Client, url: &str) -> (Status, String) {
    let size = match head(client, url).await {
        Ok(size) => size,
        Err(e) => return (Status::Failed, e),
    };
    let mut response = match client.get(url).header(header::RANGE, "bytes=0-511").send().await {
        Ok(r) => r,
        Err(e) => return (Status::Failed, format!("range read of {url}: {}", error_text(&e))),
    };
    if response.status() != StatusCode::PARTIAL_CONTENT {
        return (
            Status::Failed,
            format!(
                "range read of {url}: {} instead of 206 Partial Content (iPXE reads HTTP SAN volumes by ranges)",
                response.status()
            ),
        );
    }
    let mut read = 0usize;
    while read < 4096 {
        match response.chunk().await {
            Ok(Some(chunk)) => read += chunk.len(),
            Ok(None) => break,
            Err(e) => return (Status::Failed, format!("range read of {url}: {}", error_text(&e))),
        }
    }
    let expected = size.map_or(512, |s| s.min(512) as usize);
    if read != expected {
        return (Status::Failed, format!("range read of {url}: {read} bytes for 512 asked"));
    }
    let size = size.map_or_else(|| "size unknown".to_owned(), size_text);
    (Status::Ok, format!("HEAD 200, {size}; 512-byte range read ok"))
}

/// reqwest's error as its innermost cause says it (a refused connection, a bad certificate),
/// or "timed out".
fn error_text(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "timed out".to_owned();
    }
    let mut last: &dyn std::error::Error = e;
    while let Some(cause) = last.source() {
        last = cause;
    }
    last.to_string()
}
