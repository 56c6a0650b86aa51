//! `[cinder]` and `[keystone]`: how bootvol reaches Cinder (a fixed URL or the Keystone
//! catalog), how it authenticates there (`noauth` or Keystone v3), and their checks. Secrets are
//! masked in `Debug`.
//!
//! It must not know the Cinder or Keystone APIs: no HTTP client, no tokens.

use std::path::PathBuf;

use serde::Deserialize;

use super::Invalid;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CinderAuthStrategy {
    Noauth,
    Keystone,
}

/// Which Cinder attach API to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CinderApi {
    /// The attachments API when the server offers microversion 3.44, else the legacy actions.
    Auto,
    /// Always the attachments API (create, complete, delete).
    Attachments,
    /// Always the legacy `os-reserve` / `os-initialize_connection` / `os-attach` actions.
    Legacy,
}

#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CinderSection {
    /// A fixed Cinder endpoint; empty means "find it in the Keystone catalog".
    pub url: String,
    /// Seconds every Cinder request may take.
    pub url_timeout: u64,
    /// Retries of requests that are safe to repeat.
    pub retries: u32,
    pub auth_strategy: CinderAuthStrategy,
    pub toggle_attachments_with_power: bool,
    /// `noauth`: the user and project sent as `X-Auth-Token: <user>:<project>`.
    pub noauth_user: String,
    pub noauth_project: String,
    pub api: CinderApi,
    /// Ask Cinder for every path to a volume (`target_portals`...), not just one.
    pub multipath: bool,
    /// A PEM file of CA certificates to trust for `https://` (Cinder and Keystone).
    pub ca_file: Option<PathBuf>,
    /// Verify TLS certificates; turn off only on a lab network.
    pub verify_tls: bool,
    /// Seconds between two passes of the background sync in `bootvol serve`; 0 turns it off.
    pub sync_interval: u64,
}

impl Default for CinderSection {
    fn default() -> Self {
        CinderSection {
            url: String::new(),
            url_timeout: 30,
            retries: 3,
            auth_strategy: CinderAuthStrategy::Noauth,
            toggle_attachments_with_power: true,
            noauth_user: "bootvol".into(),
            noauth_project: "bootvol".into(),
            api: CinderApi::Auto,
            multipath: false,
            ca_file: None,
            verify_tls: true,
            sync_interval: 300,
        }
    }
}

impl std::fmt::Debug for CinderSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CinderSection")
            .field("url", &self.url)
            .field("url_timeout", &self.url_timeout)
            .field("retries", &self.retries)
            .field("auth_strategy", &self.auth_strategy)
            .field("toggle_attachments_with_power", &self.toggle_attachments_with_power)
            .field("noauth_user", &self.noauth_user)
            .field("noauth_project", &self.noauth_project)
            .field("api", &self.api)
            .field("multipath", &self.multipath)
            .field("ca_file", &self.ca_file)
            .field("verify_tls", &self.verify_tls)
            .field("sync_interval", &self.sync_interval)
            .finish()
    }
}

/// Keystone v3, for `[cinder] auth_strategy = "keystone"`: Ironic's `[cinder]` keystoneauth
/// option names. Either a user (name or id) with a password, or an application credential.
#[derive(Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeystoneSection {
    /// The identity endpoint, e.g. `https://keystone.example:5000/v3` (with or without `/v3`).
    pub auth_url: String,
    pub username: String,
    pub user_id: String,
    pub password: String,
    pub user_domain_name: String,
    pub user_domain_id: String,
    pub project_name: String,
    pub project_id: String,
    pub project_domain_name: String,
    pub project_domain_id: String,
    pub application_credential_id: String,
    pub application_credential_secret: String,
    /// Catalog service type; empty means `block-storage`, then `volumev3`, `volume`.
    pub service_type: String,
    /// Endpoint interface: `public` (default), `internal` or `admin`.
    pub interface: String,
    pub region_name: String,
}

impl std::fmt::Debug for KeystoneSection {
    /// Secrets are shown as `******`, like everywhere else.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let masked = |s: &str| if s.is_empty() { "" } else { crate::secrets::MASK };
        f.debug_struct("KeystoneSection")
            .field("auth_url", &self.auth_url)
            .field("username", &self.username)
            .field("user_id", &self.user_id)
            .field("password", &masked(&self.password))
            .field("user_domain_name", &self.user_domain_name)
            .field("user_domain_id", &self.user_domain_id)
            .field("project_name", &self.project_name)
            .field("project_id", &self.project_id)
            .field("project_domain_name", &self.project_domain_name)
            .field("project_domain_id", &self.project_domain_id)
            .field("application_credential_id", &self.application_credential_id)
            .field("application_credential_secret", &masked(&self.application_credential_secret))
            .field("service_type", &self.service_type)
            .field("interface", &self.interface)
            .field("region_name", &self.region_name)
            .finish()
    }
}

impl CinderSection {
    /// Each request's timeout and retries, and the fixed URL if there is one.
    pub(super) fn validate_requests(&self) -> Result<(), Invalid> {
        if self.url_timeout == 0 || self.url_timeout > 600 {
            return Err((
                "cinder.url_timeout",
                format!("{} is not between 1 and 600 seconds", self.url_timeout),
            ));
        }
        if self.retries > 10 {
            return Err(("cinder.retries", format!("{} is more than 10", self.retries)));
        }
        if !self.url.is_empty() {
            crate::model::check_http_url(&self.url).map_err(|m| ("cinder.url", m))?;
        }
        Ok(())
    }

    /// What the chosen `auth_strategy` needs (`keystone`: its section), then the CA file.
    /// `cinder_enabled`: whether nodes may use the `cinder` storage interface.
    pub(super) fn validate_auth(
        &self,
        keystone: &KeystoneSection,
        cinder_enabled: bool,
    ) -> Result<(), Invalid> {
        match self.auth_strategy {
            CinderAuthStrategy::Noauth => self.validate_noauth(cinder_enabled)?,
            CinderAuthStrategy::Keystone => keystone.validate()?,
        }
        if let Some(ca) = &self.ca_file
            && !ca.is_absolute()
        {
            return Err(("cinder.ca_file", format!("{} is not an absolute path", ca.display())));
        }
        Ok(())
    }

    /// `noauth` has no catalog to find Cinder in, and sends `<user>:<project>` as its token.
    fn validate_noauth(&self, cinder_enabled: bool) -> Result<(), Invalid> {
        if cinder_enabled && self.url.is_empty() {
            return Err(("cinder.url", "auth_strategy noauth needs a fixed Cinder URL".into()));
        }
        for (key, value) in [
            ("cinder.noauth_user", &self.noauth_user),
            ("cinder.noauth_project", &self.noauth_project),
        ] {
            if value.is_empty()
                || value.contains(':')
                || value.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                return Err((key, "must be a non-empty word without ':'".into()));
            }
        }
        Ok(())
    }
}

impl KeystoneSection {
    /// The identity endpoint, a complete credential, and a known endpoint interface.
    fn validate(&self) -> Result<(), Invalid> {
        if self.auth_url.is_empty() {
            return Err((
                "keystone.auth_url",
                "auth_strategy keystone needs the identity endpoint".into(),
            ));
        }
        crate::model::check_http_url(&self.auth_url).map_err(|m| ("keystone.auth_url", m))?;
        if self.application_credential_id.is_empty() {
            self.validate_password_credential()?;
        } else if self.application_credential_secret.is_empty() {
            return Err(("keystone.application_credential_secret", "missing".into()));
        }
        if !matches!(self.interface.as_str(), "" | "public" | "internal" | "admin") {
            return Err((
                "keystone.interface",
                format!("{:?} is not public, internal or admin", self.interface),
            ));
        }
        Ok(())
    }

    /// A user (by name with its domain, or by id) with a password, scoped to a project (by
    /// name with its domain, or by id).
    fn validate_password_credential(&self) -> Result<(), Invalid> {
        if self.username.is_empty() && self.user_id.is_empty() {
            return Err((
                "keystone.username",
                "give username (or user_id) and password, or an application credential".into(),
            ));
        }
        if self.password.is_empty() {
            return Err(("keystone.password", "missing".into()));
        }
        if !self.username.is_empty()
            && self.user_domain_name.is_empty()
            && self.user_domain_id.is_empty()
        {
            return Err((
                "keystone.user_domain_name",
                "a user given by name needs its domain".into(),
            ));
        }
        if self.project_name.is_empty() && self.project_id.is_empty() {
            return Err(("keystone.project_name", "give project_name (or project_id)".into()));
        }
        if !self.project_name.is_empty()
            && self.project_domain_name.is_empty()
            && self.project_domain_id.is_empty()
        {
            return Err((
                "keystone.project_domain_name",
                "a project given by name needs its domain".into(),
            ));
        }
        Ok(())
    }
}
