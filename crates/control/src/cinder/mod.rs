//! A Cinder v3 REST client written for bootvol: the only module that knows Cinder's JSON.
//!
//! Fixed endpoint or Keystone catalog; `noauth` (`X-Auth-Token: user:project`) or Keystone
//! tokens, cached and renewed before expiry. Every request is bounded by `[cinder] url_timeout`;
//! requests that are safe to repeat are retried `[cinder] retries` times with backoff. The
//! microversion comes from Cinder's version document: the attachments API (3.44+) when offered,
//! else the legacy `os-*` actions. It knows nothing about nodes or SQLite.

pub mod api;
pub mod keystone;

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;

pub use api::{Attachment, ConnectionInfo, Connector, Volume};

use bootvol_core::config::{CinderApi, CinderAuthStrategy, Config, KeystoneSection};

/// The microversion bootvol asks for with the attachments API (`os-complete` needs 3.44).
pub const ATTACHMENTS_MICROVERSION: (u32, u32) = (3, 44);

/// A failed Cinder call. `Http` carries Cinder's own message.
#[derive(Debug, thiserror::Error)]
pub enum CinderError {
    #[error("Cinder answered {status} to {action}: {message}")]
    Http { action: String, status: u16, message: String },
    #[error("Cinder did not answer {action} within {timeout:?}")]
    Timeout { action: String, timeout: Duration },
    #[error("cannot reach Cinder for {action}: {message}")]
    Unreachable { action: String, message: String },
    #[error("the answer of Cinder to {action} was lost: {message}")]
    Interrupted { action: String, message: String },
    #[error("unexpected answer from Cinder to {action}: {message}")]
    Protocol { action: String, message: String },
    #[error("Keystone: {0}")]
    Auth(String),
    #[error("Cinder client setup: {0}")]
    Setup(String),
}

impl CinderError {
    /// Whether repeating the same (idempotent) request may help.
    fn transient(&self) -> bool {
        match self {
            CinderError::Http { status, .. } => *status >= 500 || *status == 429,
            CinderError::Timeout { .. }
            | CinderError::Unreachable { .. }
            | CinderError::Interrupted { .. } => true,
            _ => false,
        }
    }

    /// Whether the request may have been carried out although no answer came back.
    pub fn answer_lost(&self) -> bool {
        matches!(self, CinderError::Timeout { .. } | CinderError::Interrupted { .. })
    }

    /// Whether Cinder said "not found".
    pub fn is_not_found(&self) -> bool {
        matches!(self, CinderError::Http { status: 404, .. })
    }
}

/// Which attach API the server is driven with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiStyle {
    Attachments,
    Legacy,
}

impl ApiStyle {
    pub fn as_str(&self) -> &'static str {
        match self {
            ApiStyle::Attachments => "attachments",
            ApiStyle::Legacy => "legacy",
        }
    }
}

enum Auth {
    NoAuth(String),
    Keystone { section: Box<KeystoneSection>, cached: Mutex<Option<keystone::Token>> },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::NoAuth(_) => f.write_str("NoAuth"),
            Auth::Keystone { .. } => f.write_str("Keystone"),
        }
    }
}

/// The client. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct CinderClient {
    http: reqwest::Client,
    fixed_url: Option<String>,
    auth: Auth,
    timeout: Duration,
    retries: u32,
    api: CinderApi,
    /// The negotiated style, once known.
    style: Mutex<Option<ApiStyle>>,
    /// First retry delay; doubled each time.
    backoff: Duration,
}

impl CinderClient {
    pub fn new(config: &Config) -> Result<CinderClient, CinderError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let timeout = Duration::from_secs(config.cinder.url_timeout);
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent("bootvol");
        if let Some(ca) = &config.cinder.ca_file {
            let pem = std::fs::read(ca)
                .map_err(|e| CinderError::Setup(format!("cinder.ca_file {}: {e}", ca.display())))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| CinderError::Setup(format!("cinder.ca_file {}: {e}", ca.display())))?;
            builder = builder.tls_certs_only(certs);
        }
        if !config.cinder.verify_tls {
            builder = builder.tls_danger_accept_invalid_certs(true);
        }
        let http = builder.build().map_err(|e| CinderError::Setup(e.to_string()))?;
        let auth = match config.cinder.auth_strategy {
            CinderAuthStrategy::Noauth => Auth::NoAuth(format!(
                "{}:{}",
                config.cinder.noauth_user, config.cinder.noauth_project
            )),
            CinderAuthStrategy::Keystone => Auth::Keystone {
                section: Box::new(config.keystone.clone()),
                cached: Mutex::new(None),
            },
        };
        let fixed_url =
            Some(config.cinder.url.trim_end_matches('/').to_owned()).filter(|u| !u.is_empty());
        Ok(CinderClient {
            http,
            fixed_url,
            auth,
            timeout,
            retries: config.cinder.retries,
            api: config.cinder.api,
            style: Mutex::new(None),
            backoff: Duration::from_millis(500),
        })
    }

    /// The bound on every request.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The token and the endpoint to use now.
    async fn credentials(&self, force_renew: bool) -> Result<(String, String), CinderError> {
        match &self.auth {
            Auth::NoAuth(token) => {
                let url = self
                    .fixed_url
                    .clone()
                    .ok_or_else(|| CinderError::Setup("no [cinder] url".into()))?;
                Ok((token.clone(), url))
            }
            Auth::Keystone { section, cached } => {
                let mut cached = cached.lock().await;
                let now = keystone::now_unix();
                let fresh =
                    cached.as_ref().filter(|t| !force_renew && !t.needs_renewal(now)).cloned();
                let token = match fresh {
                    Some(token) => token,
                    None => {
                        let token = self.authenticate(section).await?;
                        *cached = Some(token.clone());
                        token
                    }
                };
                let url = self.fixed_url.clone().or(token.endpoint.clone()).ok_or_else(|| {
                    CinderError::Auth("no block-storage endpoint in the Keystone catalog".into())
                })?;
                Ok((token.id, url))
            }
        }
    }

    async fn authenticate(
        &self,
        section: &KeystoneSection,
    ) -> Result<keystone::Token, CinderError> {
        let url = keystone::tokens_url(&section.auth_url);
        let action = "the Keystone token request".to_owned();
        let response = self
            .http
            .post(&url)
            .json(&keystone::auth_request(section))
            .send()
            .await
            .map_err(|e| self.transport_error(&action, e))?;
        let status = response.status();
        let subject = response
            .headers()
            .get("X-Subject-Token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let message = body
                .get("error")
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .unwrap_or("no message");
            return Err(CinderError::Auth(format!("token request refused ({status}): {message}")));
        }
        let subject = subject
            .ok_or_else(|| CinderError::Auth("no X-Subject-Token header in the answer".into()))?;
        let token = keystone::parse_token(subject, &body, section)?;
        tracing::info!(
            expires_at = token.expires_at,
            endpoint = token.endpoint.as_deref().unwrap_or("-"),
            "Keystone token issued"
        );
        Ok(token)
    }

    fn transport_error(&self, action: &str, e: reqwest::Error) -> CinderError {
        let connect = e.is_connect();
        if e.is_timeout() && !connect {
            CinderError::Timeout { action: action.to_owned(), timeout: self.timeout }
        } else {
            // The error's source chain names the cause (refused, DNS...); no secret is in a URL.
            let mut message = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                message = format!("{message}: {cause}");
                source = cause.source();
            }
            if connect {
                CinderError::Unreachable { action: action.to_owned(), message }
            } else {
                CinderError::Interrupted { action: action.to_owned(), message }
            }
        }
    }

    /// One request, retried when `idempotent` and the failure is transient. Returns the status
    /// and the JSON body (`Null` when empty).
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        microversion: Option<(u32, u32)>,
        idempotent: bool,
        action: &str,
    ) -> Result<(StatusCode, Value), CinderError> {
        let mut attempt = 0;
        let mut renewed = false;
        loop {
            let result = self.call_once(&method, path, body, microversion, action, false).await;
            let result = match result {
                Err(CinderError::Http { status: 401, .. })
                    if !renewed && matches!(self.auth, Auth::Keystone { .. }) =>
                {
                    renewed = true;
                    self.call_once(&method, path, body, microversion, action, true).await
                }
                other => other,
            };
            match result {
                Err(e) if idempotent && e.transient() && attempt < self.retries => {
                    attempt += 1;
                    let delay = self.backoff * 2u32.saturating_pow(attempt - 1);
                    tracing::warn!(action, attempt, error = %e, "Cinder request failed; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                }
                other => return other,
            }
        }
    }

    async fn call_once(
        &self,
        method: &Method,
        path: &str,
        body: Option<&Value>,
        microversion: Option<(u32, u32)>,
        action: &str,
        renew: bool,
    ) -> Result<(StatusCode, Value), CinderError> {
        let (token, base) = self.credentials(renew).await?;
        let mut request = self
            .http
            .request(method.clone(), format!("{base}{path}"))
            .header("X-Auth-Token", token)
            .header("Accept", "application/json");
        if let Some((major, minor)) = microversion {
            request = request.header("OpenStack-API-Version", format!("volume {major}.{minor}"));
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| self.transport_error(action, e))?;
        let status = response.status();
        let request_id = response
            .headers()
            .get("x-openstack-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let text = response.text().await.map_err(|e| self.transport_error(action, e))?;
        let value: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::Null)
        };
        tracing::debug!(action, status = status.as_u16(), request_id, "Cinder call");
        if status.is_success() {
            Ok((status, value))
        } else {
            let message = api::fault_message(&value)
                .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_owned());
            Err(CinderError::Http { action: action.to_owned(), status: status.as_u16(), message })
        }
    }

    /// The attach API to use, from the configuration and (for `auto`) the version document.
    pub async fn api_style(&self) -> Result<ApiStyle, CinderError> {
        if let Some(style) = *self.style.lock().await {
            return Ok(style);
        }
        let style = match self.api {
            CinderApi::Attachments => ApiStyle::Attachments,
            CinderApi::Legacy => ApiStyle::Legacy,
            CinderApi::Auto => {
                let max = self.max_microversion().await?;
                if max >= ATTACHMENTS_MICROVERSION {
                    ApiStyle::Attachments
                } else {
                    ApiStyle::Legacy
                }
            }
        };
        tracing::info!(api = style.as_str(), "Cinder attach API chosen");
        *self.style.lock().await = Some(style);
        Ok(style)
    }

    /// The highest v3 microversion the server offers (3.0 when it offers none).
    pub async fn max_microversion(&self) -> Result<(u32, u32), CinderError> {
        let (_, base) = self.credentials(false).await?;
        let root = version_root(&base);
        let action = "the version document";
        let response =
            self.http.get(&root).send().await.map_err(|e| self.transport_error(action, e))?;
        // The root answers 300 Multiple Choices with the document.
        let doc: api::VersionsDoc = response.json().await.map_err(|e| CinderError::Protocol {
            action: action.into(),
            message: format!("not a version document: {e}"),
        })?;
        let v3 = doc.versions.iter().find(|v| v.id.starts_with("v3")).ok_or_else(|| {
            CinderError::Protocol { action: action.into(), message: "no v3 API".into() }
        })?;
        tracing::debug!(
            id = v3.id,
            min = v3.min_version,
            max = v3.version,
            status = v3.status,
            "Cinder versions"
        );
        Ok(parse_microversion(&v3.version).unwrap_or((3, 0)))
    }

    pub async fn volume(&self, volume_id: &str) -> Result<Volume, CinderError> {
        let (_, body) = self
            .call(
                Method::GET,
                &format!("/volumes/{volume_id}"),
                None,
                None,
                true,
                &format!("showing volume {volume_id}"),
            )
            .await?;
        let body: api::VolumeBody = decode(body, "volume show")?;
        Ok(body.volume)
    }

    /// Attachments API: create with a connector (reserve + initialize in one call).
    pub async fn attachment_create(
        &self,
        volume_id: &str,
        connector: &Connector,
    ) -> Result<Attachment, CinderError> {
        let body = json!({"attachment": {"volume_uuid": volume_id, "connector": connector}});
        let action = format!("creating an attachment of volume {volume_id}");
        let (_, body) = self
            .call(
                Method::POST,
                "/attachments",
                Some(&body),
                Some(ATTACHMENTS_MICROVERSION),
                false,
                &action,
            )
            .await?;
        let body: api::AttachmentBody = decode(body, "attachment create")?;
        Ok(body.attachment)
    }

    pub async fn attachment_complete(&self, attachment_id: &str) -> Result<(), CinderError> {
        let path = format!("/attachments/{attachment_id}/action");
        let action = format!("completing attachment {attachment_id}");
        self.call(
            Method::POST,
            &path,
            Some(&json!({"os-complete": null})),
            Some(ATTACHMENTS_MICROVERSION),
            true,
            &action,
        )
        .await?;
        Ok(())
    }

    /// Deletes an attachment; one that is already gone counts as deleted.
    pub async fn attachment_delete(&self, attachment_id: &str) -> Result<(), CinderError> {
        let path = format!("/attachments/{attachment_id}");
        let action = format!("deleting attachment {attachment_id}");
        match self
            .call(Method::DELETE, &path, None, Some(ATTACHMENTS_MICROVERSION), true, &action)
            .await
        {
            Err(e) if e.is_not_found() => Ok(()),
            other => other.map(|_| ()),
        }
    }

    pub async fn attachment(&self, attachment_id: &str) -> Result<Attachment, CinderError> {
        let path = format!("/attachments/{attachment_id}");
        let action = format!("showing attachment {attachment_id}");
        let (_, body) = self
            .call(Method::GET, &path, None, Some(ATTACHMENTS_MICROVERSION), true, &action)
            .await?;
        let body: api::AttachmentBody = decode(body, "attachment show")?;
        Ok(body.attachment)
    }

    async fn volume_action(
        &self,
        volume_id: &str,
        name: &str,
        args: Value,
        idempotent: bool,
    ) -> Result<Value, CinderError> {
        let body = json!({ name: args });
        let action = format!("{name} on volume {volume_id}");
        let (_, body) = self
            .call(
                Method::POST,
                &format!("/volumes/{volume_id}/action"),
                Some(&body),
                None,
                idempotent,
                &action,
            )
            .await?;
        Ok(body)
    }

    pub async fn reserve(&self, volume_id: &str) -> Result<(), CinderError> {
        self.volume_action(volume_id, "os-reserve", json!({}), false).await.map(|_| ())
    }

    pub async fn unreserve(&self, volume_id: &str) -> Result<(), CinderError> {
        self.volume_action(volume_id, "os-unreserve", json!({}), true).await.map(|_| ())
    }

    pub async fn initialize_connection(
        &self,
        volume_id: &str,
        connector: &Connector,
    ) -> Result<ConnectionInfo, CinderError> {
        self.initialize(volume_id, json!(connector), false).await
    }

    /// Legacy attach, by host name (no instance UUID: detaching then never asks Nova).
    pub async fn attach(
        &self,
        volume_id: &str,
        host_name: &str,
        mountpoint: &str,
    ) -> Result<(), CinderError> {
        let args = json!({"host_name": host_name, "mountpoint": mountpoint, "mode": "rw"});
        self.volume_action(volume_id, "os-attach", args, false).await.map(|_| ())
    }

    pub async fn begin_detaching(&self, volume_id: &str) -> Result<(), CinderError> {
        self.volume_action(volume_id, "os-begin_detaching", json!({}), false).await.map(|_| ())
    }

    pub async fn roll_detaching(&self, volume_id: &str) -> Result<(), CinderError> {
        self.volume_action(volume_id, "os-roll_detaching", json!({}), true).await.map(|_| ())
    }

    pub async fn detach(
        &self,
        volume_id: &str,
        attachment_id: Option<&str>,
    ) -> Result<(), CinderError> {
        self.volume_action(volume_id, "os-detach", json!({"attachment_id": attachment_id}), true)
            .await
            .map(|_| ())
    }

    /// `os-initialize_connection` with a connector kept as JSON (sync and recovery read it
    /// back from the database).
    pub async fn initialize_connection_raw(
        &self,
        volume_id: &str,
        connector: &Value,
    ) -> Result<ConnectionInfo, CinderError> {
        self.initialize(volume_id, connector.clone(), true).await
    }

    /// `os-initialize_connection` with `connector`; `retried`: whether the call may be repeated.
    async fn initialize(
        &self,
        volume_id: &str,
        connector: Value,
        retried: bool,
    ) -> Result<ConnectionInfo, CinderError> {
        let args = json!({"connector": connector});
        let body = self.volume_action(volume_id, "os-initialize_connection", args, retried).await?;
        let body: api::InitializeBody = decode(body, "os-initialize_connection")?;
        Ok(ConnectionInfo::from_legacy(body.connection_info))
    }

    pub async fn terminate_connection_raw(
        &self,
        volume_id: &str,
        connector: &Value,
    ) -> Result<(), CinderError> {
        self.volume_action(
            volume_id,
            "os-terminate_connection",
            json!({"connector": connector}),
            true,
        )
        .await
        .map(|_| ())
    }

    /// The ids of a volume's attachments (attachments API). Attachments belong to the volume's
    /// project, which need not be bootvol's: `all_tenants` (honoured for admins) finds them.
    pub async fn attachments_of_volume(&self, volume_id: &str) -> Result<Vec<String>, CinderError> {
        let action = format!("listing attachments of volume {volume_id}");
        let path = format!("/attachments?all_tenants=1&volume_id={volume_id}");
        let (_, body) = self
            .call(Method::GET, &path, None, Some(ATTACHMENTS_MICROVERSION), true, &action)
            .await?;
        Ok(body
            .get("attachments")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter().filter_map(|a| a.get("id")?.as_str().map(str::to_owned)).collect()
            })
            .unwrap_or_default())
    }

    /// Merges keys into the volume's metadata.
    pub async fn set_metadata(
        &self,
        volume_id: &str,
        metadata: &Map<String, Value>,
    ) -> Result<(), CinderError> {
        let action = format!("tagging volume {volume_id}");
        let body = json!({"metadata": metadata});
        self.call(
            Method::POST,
            &format!("/volumes/{volume_id}/metadata"),
            Some(&body),
            None,
            true,
            &action,
        )
        .await?;
        Ok(())
    }
}

fn decode<T: serde::de::DeserializeOwned>(body: Value, action: &str) -> Result<T, CinderError> {
    serde_json::from_value(body)
        .map_err(|e| CinderError::Protocol { action: action.into(), message: e.to_string() })
}

/// `http://h:8776/v3[/project]` → `http://h:8776/`: where the version document lives.
fn version_root(base: &str) -> String {
    let after_scheme = base.find("://").map_or(0, |i| i + 3);
    match base[after_scheme..].find('/') {
        Some(slash) => format!("{}/", &base[..after_scheme + slash]),
        None => format!("{base}/"),
    }
}

/// `"3.71"` → `(3, 71)`.
pub fn parse_microversion(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_root_is_the_host() {
        assert_eq!(version_root("http://c:8776/v3"), "http://c:8776/");
        assert_eq!(version_root("https://c.example/volume/v3/abc"), "https://c.example/");
        assert_eq!(version_root("http://c:8776"), "http://c:8776/");
    }

    #[test]
    fn microversions() {
        assert_eq!(parse_microversion("3.71"), Some((3, 71)));
        assert_eq!(parse_microversion(""), None);
        assert!((3, 71) >= ATTACHMENTS_MICROVERSION && (3, 27) < ATTACHMENTS_MICROVERSION);
    }
}
