//! Keystone v3: the token request, the service catalog lookup, and the token cache that renews
//! before expiry. The request body and the catalog reading are pure functions.

use std::time::Duration;

use serde_json::{Value, json};

use super::CinderError;
use bootvol_core::config::KeystoneSection;

/// Service types tried in order when none is configured: the official name, then aliases.
pub const SERVICE_TYPES: &[&str] =
    &["block-storage", "volumev3", "block-store", "volumev2", "volume"];

/// Renew a token this long before it expires (or at half its life, if that is shorter).
pub const RENEW_MARGIN: Duration = Duration::from_secs(300);

/// A token and what it was issued with.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    pub id: String,
    /// Seconds since the Unix epoch.
    pub expires_at: u64,
    pub issued_at: u64,
    /// The Cinder endpoint found in the catalog, if any.
    pub endpoint: Option<String>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("id", &bootvol_core::secrets::MASK)
            .field("expires_at", &self.expires_at)
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl Token {
    /// Whether the token should be renewed at `now` (Unix seconds).
    pub fn needs_renewal(&self, now: u64) -> bool {
        let lifetime = self.expires_at.saturating_sub(self.issued_at);
        let margin = RENEW_MARGIN.as_secs().min(lifetime / 2);
        now + margin >= self.expires_at
    }
}

/// `POST <auth_url>/auth/tokens`, with or without `/v3` in the configured URL.
pub fn tokens_url(auth_url: &str) -> String {
    let base = auth_url.trim_end_matches('/');
    if base.ends_with("/v3") {
        format!("{base}/auth/tokens")
    } else {
        format!("{base}/v3/auth/tokens")
    }
}

/// The body of the token request: an application credential, or a password with a project scope.
pub fn auth_request(k: &KeystoneSection) -> Value {
    if !k.application_credential_id.is_empty() {
        return json!({"auth": {"identity": {"methods": ["application_credential"],
            "application_credential": {"id": k.application_credential_id, "secret": k.application_credential_secret}}}});
    }
    let domain = |id: &str, name: &str| {
        if id.is_empty() { json!({"name": name}) } else { json!({"id": id}) }
    };
    let user = if k.user_id.is_empty() {
        json!({"name": k.username, "domain": domain(&k.user_domain_id, &k.user_domain_name), "password": k.password})
    } else {
        json!({"id": k.user_id, "password": k.password})
    };
    let project = if k.project_id.is_empty() {
        json!({"name": k.project_name, "domain": domain(&k.project_domain_id, &k.project_domain_name)})
    } else {
        json!({"id": k.project_id})
    };
    json!({"auth": {"identity": {"methods": ["password"], "password": {"user": user}}, "scope": {"project": project}}})
}

/// Reads a token response: expiry, and the Cinder endpoint from the catalog.
pub fn parse_token(
    subject_token: String,
    body: &Value,
    k: &KeystoneSection,
) -> Result<Token, CinderError> {
    let token = body
        .get("token")
        .ok_or_else(|| CinderError::Auth("Keystone answered without a token".into()))?;
    let time = |key: &str| {
        token
            .get(key)
            .and_then(Value::as_str)
            .and_then(parse_iso8601)
            .ok_or_else(|| CinderError::Auth(format!("token {key} missing or unreadable")))
    };
    let expires_at = time("expires_at")?;
    let issued_at = time("issued_at").unwrap_or_else(|_| now_unix());
    let interface = if k.interface.is_empty() { "public" } else { k.interface.as_str() };
    let endpoint = token
        .get("catalog")
        .and_then(|c| catalog_endpoint(c, &k.service_type, interface, &k.region_name));
    Ok(Token { id: subject_token, expires_at, issued_at, endpoint })
}

/// Finds the Cinder endpoint: the first service of the configured type (or of
/// [`SERVICE_TYPES`], in order) with an endpoint of the wanted interface (and region, if
/// given). Endpoints of the v1/v2 APIs are pointed at v3 on the same host.
pub fn catalog_endpoint(
    catalog: &Value,
    service_type: &str,
    interface: &str,
    region: &str,
) -> Option<String> {
    let services = catalog.as_array()?;
    let types: Vec<&str> =
        if service_type.is_empty() { SERVICE_TYPES.to_vec() } else { vec![service_type] };
    types.iter().find_map(|wanted| {
        services.iter().filter(|s| s.get("type").and_then(Value::as_str) == Some(wanted)).find_map(
            |service| {
                service.get("endpoints")?.as_array()?.iter().find_map(|e| {
                    let same_interface =
                        e.get("interface").and_then(Value::as_str) == Some(interface);
                    let region_of = |key: &str| e.get(key).and_then(Value::as_str).unwrap_or("");
                    let same_region = region.is_empty()
                        || region_of("region_id") == region
                        || region_of("region") == region;
                    (same_interface && same_region)
                        .then(|| e.get("url")?.as_str().map(to_v3))
                        .flatten()
                })
            },
        )
    })
}

/// `http://h:8776/v2/<project>` → `http://h:8776/v3/<project>`; a v3 URL is kept.
fn to_v3(url: &str) -> String {
    let url = url.trim_end_matches('/');
    let path_start = url.find("://").map_or(0, |i| i + 3);
    let path_start = url[path_start..].find('/').map_or(url.len(), |i| path_start + i);
    let (host, path) = url.split_at(path_start);
    let segments: Vec<&str> = path
        .split('/')
        .map(|segment| if segment == "v1" || segment == "v2" { "v3" } else { segment })
        .collect();
    format!("{host}{}", segments.join("/"))
}

pub use bootvol_core::timefmt::{now_unix, parse_iso8601};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renews_before_expiry() {
        let token = Token { id: "t".into(), issued_at: 0, expires_at: 3600, endpoint: None };
        assert!(!token.needs_renewal(3000));
        assert!(token.needs_renewal(3300));
        let short = Token { id: "t".into(), issued_at: 0, expires_at: 120, endpoint: None };
        assert!(!short.needs_renewal(59));
        assert!(short.needs_renewal(60));
    }

    #[test]
    fn v1_and_v2_endpoints_become_v3() {
        assert_eq!(to_v3("http://c:8776/v2/abc"), "http://c:8776/v3/abc");
        assert_eq!(to_v3("http://c:8776/v1"), "http://c:8776/v3");
        assert_eq!(to_v3("http://c:8776/v3/"), "http://c:8776/v3");
        assert_eq!(to_v3("http://v1host:8776/v3"), "http://v1host:8776/v3");
    }
}
