//! The `redfish` hardware type: a Redfish BMC's `ComputerSystem` over HTTP(S).
//!
//! `driver_info` (Ironic's names): `redfish_address` (URL; `https://` when no scheme is given),
//! `redfish_system_id` (path of the system; when absent the service must list exactly one),
//! `redfish_username` and `redfish_password` (HTTP basic auth), `redfish_verify_ca` (a boolean or
//! the path of a CA bundle that replaces the system roots; default true).
//!
//! Power state comes from the system's `PowerState`; actions POST `#ComputerSystem.Reset` to the
//! target the system resource names, with a `ResetType` it allows; the boot device is PATCHed as
//! `Boot.BootSourceOverrideTarget`/`BootSourceOverrideEnabled` (with `If-Match` when the BMC sends
//! an ETag). Every request is bounded by [`PowerSettings::timeout`]; errors carry the BMC's own
//! message. Every URL a BMC hands back must stay on the BMC's origin, so credentials never leave
//! for another host. Knows Redfish JSON only; nothing of SQLite, the conductor or boot scripts.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::{ETAG, IF_MATCH};
use reqwest::{Method, Url};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{
    BootDevice, PowerAction, PowerDriver, PowerError, PowerSettings, Secret, no_control_chars,
    optional_str, required_str, scrub,
};
use bootvol_core::model::{Node, PowerState};

/// How often `set_power` reads the power state while it waits.
const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The Redfish power driver. Keeps one HTTP client per TLS setting.
pub struct Redfish {
    settings: PowerSettings,
    clients: Mutex<HashMap<Tls, reqwest::Client>>,
}

impl fmt::Debug for Redfish {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redfish").field("settings", &self.settings).finish_non_exhaustive()
    }
}

/// How a client checks the BMC's certificate (the CA bundle by content, so an edited file is
/// picked up).
#[derive(Clone, PartialEq, Eq, Hash)]
enum Tls {
    SystemRoots,
    Insecure,
    Bundle(Vec<u8>),
}

/// `redfish_verify_ca`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum VerifyCa {
    Yes,
    No,
    File(PathBuf),
}

/// A node's parsed `driver_info`.
#[derive(Debug)]
struct Info {
    base: Url,
    system_id: Option<String>,
    username: Option<String>,
    password: Option<Secret>,
    verify_ca: VerifyCa,
}

fn parse_info(node: &Node) -> Result<Info, PowerError> {
    let base = parse_address(node)?;
    let system_id = parse_system_id(node)?;
    let (username, password) = parse_credentials(node)?;
    let verify_ca = parse_verify_ca(node)?;
    Ok(Info {
        base,
        system_id: system_id.map(str::to_owned),
        username: username.map(str::to_owned),
        password: password.map(|p| Secret(p.to_owned())),
        verify_ca,
    })
}

/// `redfish_address`: an http(s) URL with a host (https when no scheme is given), without
/// credentials, query or fragment.
fn parse_address(node: &Node) -> Result<Url, PowerError> {
    let address = required_str(node, "redfish_address")?;
    no_control_chars("redfish_address", address)?;
    let with_scheme =
        if address.contains("://") { address.to_owned() } else { format!("https://{address}") };
    let base = Url::parse(&with_scheme)
        .map_err(|e| PowerError::Invalid(format!("redfish_address is not a URL: {e}")))?;
    if !base.username().is_empty() || base.password().is_some() {
        return Err(PowerError::Invalid(
            "redfish_address must not contain credentials: use redfish_username and \
             redfish_password"
                .to_owned(),
        ));
    }
    if !matches!(base.scheme(), "http" | "https") || base.host_str().is_none() {
        return Err(PowerError::Invalid(format!(
            "redfish_address must be an http:// or https:// URL with a host, not {address:?}"
        )));
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err(PowerError::Invalid(format!(
            "redfish_address must not have a query or fragment: {address:?}"
        )));
    }
    Ok(base)
}

/// `redfish_system_id`, when given: the system's path.
fn parse_system_id(node: &Node) -> Result<Option<&str>, PowerError> {
    let system_id = optional_str(node, "redfish_system_id")?;
    if let Some(id) = system_id
        && (!id.starts_with('/') || id.starts_with("//") || id.chars().any(char::is_whitespace))
    {
        return Err(PowerError::Invalid(format!(
            "redfish_system_id must be the system's path, like /redfish/v1/Systems/1, not {id:?}"
        )));
    }
    Ok(system_id)
}

/// `redfish_username` and `redfish_password` (a password needs a user name).
fn parse_credentials(node: &Node) -> Result<(Option<&str>, Option<&str>), PowerError> {
    let username = optional_str(node, "redfish_username")?;
    if let Some(user) = username {
        no_control_chars("redfish_username", user)?;
        if user.contains(':') {
            return Err(PowerError::Invalid(
                "redfish_username must not contain ':' (HTTP basic auth)".to_owned(),
            ));
        }
    }
    let password = optional_str(node, "redfish_password")?;
    if password.is_some() && username.is_none() {
        return Err(PowerError::Invalid(
            "redfish_password is set but redfish_username is not".to_owned(),
        ));
    }
    Ok((username, password))
}

/// `redfish_verify_ca`: a boolean (or its spelling as a string), or the path of a CA file.
fn parse_verify_ca(node: &Node) -> Result<VerifyCa, PowerError> {
    let verify_ca = match node.driver_info.get("redfish_verify_ca") {
        None | Some(Value::Null) => VerifyCa::Yes,
        Some(Value::Bool(true)) => VerifyCa::Yes,
        Some(Value::Bool(false)) => VerifyCa::No,
        Some(Value::String(text)) => match text.trim().to_ascii_lowercase().as_str() {
            "1" | "t" | "true" | "on" | "y" | "yes" => VerifyCa::Yes,
            "0" | "f" | "false" | "off" | "n" | "no" => VerifyCa::No,
            _ => {
                let path = PathBuf::from(text);
                if !path.is_file() {
                    return Err(PowerError::Invalid(format!(
                        "redfish_verify_ca is neither a boolean nor a CA file: no file at {text:?}"
                    )));
                }
                VerifyCa::File(path)
            }
        },
        Some(_) => {
            return Err(PowerError::Invalid(
                "redfish_verify_ca must be a boolean or the path of a CA file".to_owned(),
            ));
        }
    };
    Ok(verify_ca)
}

impl Redfish {
    pub fn new(settings: PowerSettings) -> Redfish {
        Redfish { settings, clients: Mutex::new(HashMap::new()) }
    }

    /// The HTTP client for a TLS setting, built on first use.
    fn client(&self, verify_ca: &VerifyCa) -> Result<reqwest::Client, PowerError> {
        let tls = match verify_ca {
            VerifyCa::Yes => Tls::SystemRoots,
            VerifyCa::No => Tls::Insecure,
            VerifyCa::File(path) => Tls::Bundle(std::fs::read(path).map_err(|e| {
                PowerError::Invalid(format!(
                    "redfish_verify_ca: cannot read {}: {e}",
                    path.display()
                ))
            })?),
        };
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = clients.get(&tls) {
            return Ok(client.clone());
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let timeout = self.settings.timeout;
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent("bootvol")
            .redirect(reqwest::redirect::Policy::limited(5));
        match &tls {
            Tls::SystemRoots => {}
            Tls::Insecure => builder = builder.tls_danger_accept_invalid_certs(true),
            Tls::Bundle(pem) => {
                let path = match verify_ca {
                    VerifyCa::File(path) => path.display().to_string(),
                    _ => String::new(),
                };
                let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| {
                    PowerError::Invalid(format!("redfish_verify_ca: {path} is not a PEM file: {e}"))
                })?;
                if certs.is_empty() {
                    return Err(PowerError::Invalid(format!(
                        "redfish_verify_ca: {path} holds no PEM certificate"
                    )));
                }
                builder = builder.tls_certs_only(certs);
            }
        }
        let client = builder
            .build()
            .map_err(|e| PowerError::Unsupported(format!("cannot build an HTTP client: {e}")))?;
        clients.insert(tls, client.clone());
        Ok(client)
    }

    /// Parses the node's driver_info and prepares a client for it.
    fn session<'a>(&self, node: &'a Node) -> Result<Session<'a>, PowerError> {
        let info = parse_info(node)?;
        let client = self.client(&info.verify_ca)?;
        Ok(Session { info, client, timeout: self.settings.timeout, node })
    }
}

/// Talking to one node's BMC.
struct Session<'a> {
    info: Info,
    client: reqwest::Client,
    timeout: Duration,
    node: &'a Node,
}

impl Session<'_> {
    fn scrub(&self, text: &str) -> String {
        scrub(self.info.password.as_ref(), text)
    }

    fn bmc_error(&self, text: String) -> PowerError {
        PowerError::Bmc(self.scrub(&text))
    }

    /// A path (or URL) the BMC named, resolved against `redfish_address`; it must stay on the
    /// same scheme, host and port.
    fn url(&self, path: &str) -> Result<Url, PowerError> {
        let url = self
            .info
            .base
            .join(path)
            .map_err(|e| self.bmc_error(format!("the BMC named a bad path {path:?}: {e}")))?;
        if url.origin() != self.info.base.origin() {
            return Err(self.bmc_error(format!(
                "the BMC pointed to {url}, outside {}; refusing to send credentials there",
                self.info.base.origin().ascii_serialization()
            )));
        }
        Ok(url)
    }

    fn transport_error(&self, error: reqwest::Error, method: &Method, url: &Url) -> PowerError {
        if error.is_timeout() {
            return PowerError::Timeout(self.scrub(&format!(
                "the BMC did not answer {method} {url} within {:?}",
                self.timeout
            )));
        }
        let error = error.without_url();
        let mut text = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(inner) = source {
            let inner_text = inner.to_string();
            if !text.contains(&inner_text) {
                text = format!("{text}: {inner_text}");
            }
            source = inner.source();
        }
        self.bmc_error(format!("cannot reach the BMC for {method} {url}: {text}"))
    }

    /// Sends one request; answers the response of a 2xx status, else the BMC's message.
    async fn send(
        &self,
        method: Method,
        url: &Url,
        body: Option<&Value>,
        if_match: Option<&str>,
    ) -> Result<reqwest::Response, PowerError> {
        tracing::debug!(node = %self.node.uuid, %method, %url, "redfish request");
        let mut request = self.client.request(method.clone(), url.clone());
        if let Some(user) = &self.info.username {
            let password = self.info.password.as_ref().map_or("", Secret::expose);
            request = request.basic_auth(user, Some(password));
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(etag) = if_match {
            request = request.header(IF_MATCH, etag);
        }
        let response = request.send().await.map_err(|e| self.transport_error(e, &method, url))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let text = response.text().await.unwrap_or_default();
        let reason = status.canonical_reason().unwrap_or("");
        let message = bmc_message(&text);
        tracing::debug!(node = %self.node.uuid, %method, %url, status = status.as_u16(), "redfish error");
        Err(self.bmc_error(match message {
            Some(message) => format!("{method} {url}: {} {reason}: {message}", status.as_u16()),
            None => format!("{method} {url}: {} {reason}", status.as_u16()),
        }))
    }

    /// GETs a resource: its JSON and its ETag.
    async fn get(&self, path: &str) -> Result<(Value, Option<String>), PowerError> {
        let url = self.url(path)?;
        let response = self.send(Method::GET, &url, None, None).await?;
        let etag = response.headers().get(ETAG).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let text =
            response.text().await.map_err(|e| self.transport_error(e, &Method::GET, &url))?;
        let json = serde_json::from_str(&text)
            .map_err(|e| self.bmc_error(format!("GET {url}: the answer is not JSON: {e}")))?;
        Ok((json, etag))
    }

    /// The system's path: `redfish_system_id`, or the only member of the Systems collection.
    async fn system_path(&self) -> Result<String, PowerError> {
        if let Some(id) = &self.info.system_id {
            return Ok(id.clone());
        }
        let (root, _) = self.get("/redfish/v1/").await?;
        let systems = odata_id(&root["Systems"]).unwrap_or("/redfish/v1/Systems").to_owned();
        let (collection, _) = self.get(&systems).await?;
        let members: Vec<&str> = collection["Members"]
            .as_array()
            .map(|m| m.iter().filter_map(odata_id).collect())
            .unwrap_or_default();
        match members.as_slice() {
            [only] => Ok((*only).to_owned()),
            [] => Err(self.bmc_error(format!("the BMC lists no system in {systems}"))),
            many => Err(PowerError::Invalid(format!(
                "redfish_system_id is required: the BMC lists {} systems ({})",
                many.len(),
                many.join(", ")
            ))),
        }
    }

    /// The system resource and its ETag.
    async fn system(&self) -> Result<(String, Value, Option<String>), PowerError> {
        let path = self.system_path().await?;
        let (system, etag) = self.get(&path).await?;
        Ok((path, system, etag))
    }

    fn raw_power_state<'v>(&self, system: &'v Value) -> Result<&'v str, PowerError> {
        system["PowerState"]
            .as_str()
            .ok_or_else(|| self.bmc_error("the system resource has no PowerState".to_owned()))
    }

    /// Reads `PowerState` until it is `target` or the wait is over.
    async fn wait_for(
        &self,
        path: &str,
        target: &str,
        wait: Duration,
        reset_type: &str,
    ) -> Result<(), PowerError> {
        let deadline = Instant::now() + wait;
        let mut last = String::from("nothing read");
        loop {
            match tokio::time::timeout_at(deadline, self.get(path)).await {
                Err(_) => break,
                Ok(Ok((system, _))) => match system["PowerState"].as_str() {
                    Some(state) if state == target => return Ok(()),
                    Some(state) => last = format!("PowerState {state}"),
                    None => last = "no PowerState".to_owned(),
                },
                // A BMC may stumble while it resets; keep asking until the deadline.
                Ok(Err(error)) => last = error.to_string(),
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            tokio::time::sleep(POLL_INTERVAL.min(deadline - now)).await;
        }
        Err(PowerError::Timeout(self.scrub(&format!(
            "the system did not reach PowerState {target} within {wait:?} after {reset_type} \
             (last: {last})"
        ))))
    }
}

/// The `@odata.id` of a reference object.
fn odata_id(value: &Value) -> Option<&str> {
    value.get("@odata.id")?.as_str()
}

/// The BMC's message from a Redfish error body: `error.@Message.ExtendedInfo[].Message`, else
/// `error.message`, else the start of a non-JSON body.
fn bmc_message(body: &str) -> Option<String> {
    if let Ok(json) = serde_json::from_str::<Value>(body) {
        let error = json.get("error")?;
        let extended: Vec<&str> = error["@Message.ExtendedInfo"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|info| info["Message"].as_str())
            .filter(|m| !m.trim().is_empty())
            .collect();
        if !extended.is_empty() {
            return Some(extended.join("; "));
        }
        return error["message"].as_str().map(str::to_owned);
    }
    let text: String = body.trim().chars().take(300).collect();
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!text.is_empty()).then_some(text)
}

/// Which `ResetType`s may carry out an action (the first one the BMC allows is used), and the
/// `PowerState` to wait for.
fn reset_plan(
    action: PowerAction,
    current: &str,
) -> (&'static [&'static str], Option<&'static str>) {
    match action {
        PowerAction::On => (&["On", "ForceOn"], Some("On")),
        PowerAction::Off => (&["ForceOff"], Some("Off")),
        PowerAction::SoftOff => (&["GracefulShutdown"], Some("Off")),
        PowerAction::Reboot if current == "Off" => (&["On", "ForceOn"], Some("On")),
        PowerAction::Reboot => (&["ForceRestart"], None),
    }
}

#[async_trait::async_trait]
impl PowerDriver for Redfish {
    fn validate(&self, node: &Node) -> Result<(), PowerError> {
        parse_info(node).map(|_| ())
    }

    async fn power_state(&self, node: &Node) -> Result<PowerState, PowerError> {
        let session = self.session(node)?;
        let (_, system, _) = session.system().await?;
        match session.raw_power_state(&system)? {
            "On" | "PoweringOn" => Ok(PowerState::On),
            "Off" | "PoweringOff" => Ok(PowerState::Off),
            other => Err(session
                .bmc_error(format!("the BMC reports PowerState {other:?}, neither on nor off"))),
        }
    }

    async fn set_power(&self, node: &Node, action: PowerAction) -> Result<(), PowerError> {
        let session = self.session(node)?;
        let (path, system, _) = session.system().await?;
        let current = session.raw_power_state(&system)?;
        let (candidates, target) = reset_plan(action, current);
        if target == Some(current) {
            tracing::info!(node = %node.uuid, ?action, state = current, "redfish: already there");
            return Ok(());
        }
        let reset = &system["Actions"]["#ComputerSystem.Reset"];
        let Some(action_target) = reset["target"].as_str() else {
            return Err(PowerError::Unsupported(
                "the system resource offers no #ComputerSystem.Reset action".to_owned(),
            ));
        };
        let allowed: Option<Vec<&str>> = reset["ResetType@Redfish.AllowableValues"]
            .as_array()
            .map(|values| values.iter().filter_map(Value::as_str).collect());
        let Some(reset_type) =
            candidates.iter().copied().find(|c| allowed.as_ref().is_none_or(|a| a.contains(c)))
        else {
            return Err(PowerError::Unsupported(format!(
                "the BMC does not allow ResetType {} (it allows {})",
                candidates.join(" or "),
                allowed.unwrap_or_default().join(", ")
            )));
        };
        let url = session.url(action_target)?;
        tracing::info!(node = %node.uuid, ?action, reset_type, from = current, "redfish: reset");
        session.send(Method::POST, &url, Some(&json!({ "ResetType": reset_type })), None).await?;
        if let Some(target) = target {
            session.wait_for(&path, target, self.settings.state_wait, reset_type).await?;
            tracing::info!(node = %node.uuid, ?action, state = target, "redfish: state reached");
        }
        Ok(())
    }

    async fn set_boot_device(
        &self,
        node: &Node,
        device: BootDevice,
        persistent: bool,
    ) -> Result<(), PowerError> {
        let session = self.session(node)?;
        let (path, system, etag) = session.system().await?;
        let target = match device {
            BootDevice::Pxe => "Pxe",
            BootDevice::Disk => "Hdd",
        };
        let allowed = system["Boot"]["BootSourceOverrideTarget@Redfish.AllowableValues"].as_array();
        if let Some(allowed) = allowed
            && !allowed.iter().any(|v| v.as_str() == Some(target))
        {
            let allowed: Vec<&str> = allowed.iter().filter_map(Value::as_str).collect();
            return Err(PowerError::Unsupported(format!(
                "the BMC does not allow BootSourceOverrideTarget {target} (it allows {})",
                allowed.join(", ")
            )));
        }
        let enabled = if persistent { "Continuous" } else { "Once" };
        let url = session.url(&path)?;
        tracing::info!(node = %node.uuid, target, enabled, "redfish: set boot device");
        let body = json!({
            "Boot": { "BootSourceOverrideTarget": target, "BootSourceOverrideEnabled": enabled }
        });
        session.send(Method::PATCH, &url, Some(&body), etag.as_deref()).await?;
        Ok(())
    }
}
