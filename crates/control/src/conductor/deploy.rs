//! Scenario 4: an image deployment onto the HBA volume. The node boots bootvol's deploy
//! ramdisk (`image/`), which finds the volume by the root-device hints, writes and verifies the
//! image, adds a `config-2` partition when a config drive is given, and calls back with a
//! one-time token. bootvol then removes `force_deployment`, sets the boot device to disk and
//! reboots the node into its volume.
//!
//! The token is in no script: the ramdisk asks for it once ([`token`]; the first caller that is
//! the node wins, later ones are refused, as Ironic's agent token), and the config drive and the
//! call-back want it and a caller that is the node ([`Caller`]: the neighbour check of
//! `[boot] script_secrets`, made by the HTTP listener).

use std::io::Read;

use base64::Engine;
use serde_json::{Map, Value, json};

use super::{Conductor, ConductorError, PROVISION};
use crate::power::{BootDevice, PowerAction};
use bootvol_core::model::{Driver, NodeRecord, PowerState, ProvisionState};
use bootvol_core::timefmt::now_unix;

pub use bootvol_core::deploy::{CallbackReport, Caller};

/// A recorded claimant, as [`Caller::describe`] says it.
fn describe_claimant(claimant: Option<&Value>) -> String {
    let field = |key: &str| claimant.and_then(|c| c.get(key)).and_then(Value::as_str);
    match (field("address"), field("mac")) {
        (Some(address), Some(mac)) => format!("{address} ({mac})"),
        (Some(address), None) => address.to_owned(),
        _ => "an unknown client".to_owned(),
    }
}

/// The image to write: where the ramdisk fetches it and its SHA-256.
struct Image {
    url: String,
    sha256: String,
}

/// What `validate` checks for scenario 4 (the deploy interface's part).
pub(super) fn check(conductor: &Conductor, record: &NodeRecord) -> Result<(), String> {
    image(conductor, record)?;
    hints(record)?;
    let deploy = &conductor.config.deploy;
    conductor
        .check_files(&[deploy.kernel.clone(), deploy.ramdisk.clone()])
        .map_err(|e| format!("deploy ramdisk: {e}"))?;
    if let Some(drive) = record.node.instance_info.get("configdrive") {
        configdrive_bytes(drive).map_err(|e| format!("instance_info.configdrive: {e}"))?;
    }
    Ok(())
}

fn image(conductor: &Conductor, record: &NodeRecord) -> Result<Image, String> {
    let info = &record.node.instance_info;
    let source = info.get("image_source").and_then(Value::as_str).ok_or(
        "instance_info.image_source is missing (a file under files_root, or an http(s) URL)",
    )?;
    let url = if source.starts_with("http://") || source.starts_with("https://") {
        bootvol_core::boot::check_script_value(source)
            .map_err(|e| format!("instance_info.image_source: {e}"))?;
        source.to_owned()
    } else {
        conductor
            .check_files(&[source.to_owned()])
            .map_err(|e| format!("instance_info.image_source: {e}"))?;
        format!("{}/files/{source}", conductor.public_url())
    };
    let checksum = info
        .get("image_checksum")
        .and_then(Value::as_str)
        .ok_or("instance_info.image_checksum is missing")?;
    let sha256 = checksum.strip_prefix("sha256:").unwrap_or(checksum).to_ascii_lowercase();
    if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("instance_info.image_checksum must be a SHA-256 (64 hex digits, optionally prefixed sha256:)".into());
    }
    Ok(Image { url, sha256 })
}

/// Root-device hints from the boot volume: its target's `wwn`/`serial` (properties, then
/// extra), else the node's `properties.root_device`.
fn hints(record: &NodeRecord) -> Result<Vec<(&'static str, String)>, String> {
    let boot = crate::storage::boot_volume(record).ok_or("no boot volume")?;
    let node_hints = record.node.properties.get("root_device").and_then(Value::as_object);
    let find = |key: &str| {
        boot.properties
            .get(key)
            .or_else(|| boot.extra.get(key))
            .or_else(|| node_hints.and_then(|h| h.get(key)))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let mut hints = Vec::new();
    for (key, arg) in [("wwn", "bootvol.root_wwn"), ("serial", "bootvol.root_serial")] {
        if let Some(value) = find(key) {
            bootvol_core::boot::check_script_value(&value)
                .map_err(|e| format!("root device hint {key}: {e}"))?;
            hints.push((arg, value));
        }
    }
    if hints.is_empty() {
        return Err("no root-device hint: give the boot volume's wwn or serial (its properties or extra), or properties.root_device".into());
    }
    Ok(hints)
}

/// Starts the deployment: records the deploy ramdisk's command line and a one-time token,
/// moves the node to `wait call-back`, then network-boots it.
pub(super) async fn start(conductor: &Conductor, record: &mut NodeRecord) -> Result<(), String> {
    let image = image(conductor, record)?;
    let deploy = &conductor.config.deploy;
    let mut args: Vec<String> =
        deploy.kernel_append_params.split_whitespace().map(str::to_owned).collect();
    args.push(format!("bootvol.image_url={}", image.url));
    args.push(format!("bootvol.image_sha256={}", image.sha256));
    for (arg, value) in hints(record)? {
        args.push(format!("{arg}={value}"));
    }
    // A fake power driver cannot reboot the node into its volume: the ramdisk does it itself.
    if record.node.driver == Driver::Fake {
        args.push("bootvol.reboot=1".into());
    }
    let token = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    let mut state = Map::new();
    state.insert("kernel".into(), json!(deploy.kernel));
    state.insert("ramdisk".into(), json!(deploy.ramdisk));
    state.insert("args".into(), json!(args));
    state.insert("callback_token".into(), json!(token));
    state.insert("image_sha256".into(), json!(image.sha256));
    state.insert("started_at".into(), json!(now_unix()));
    if let Some(drive) = record.node.instance_info.get("configdrive") {
        let (_, format) = configdrive_bytes(drive)?;
        state.insert("configdrive_format".into(), json!(format));
    }
    record.node.driver_internal_info.insert("deploy".into(), Value::Object(state));
    record.node.provision_state = ProvisionState::WaitCallBack;
    conductor.save(record).await.map_err(|e| e.to_string())?;
    conductor.changed();
    conductor
        .set_boot_device(&record.node, BootDevice::Pxe, false)
        .await
        .map_err(|e| format!("setting the boot device: {e}"))?;
    let driver = conductor.driver(record.node.driver);
    let action =
        if driver.power_state(&record.node).await.map_err(|e| e.to_string())? == PowerState::On {
            PowerAction::Reboot
        } else {
            PowerAction::On
        };
    conductor.power_action(record, action).await
}

/// The deploy token, handed out to one claimant per deployment: the first caller that is the
/// node, while its deployment waits for the call-back (again to that same caller, if it asks
/// again). A second claimant means two hosts claim the node: the deployment fails at once,
/// naming the first (the thief, when the second is the real ramdisk); so does a node left
/// `active` by a call-back from a claimant the real ramdisk then contradicts.
pub(super) async fn token(
    conductor: &Conductor,
    node_uuid: &str,
    caller: Caller,
) -> Result<String, ConductorError> {
    let record = conductor.load(node_uuid).await?;
    if !caller.is(&record) {
        return Err(not_the_node());
    }
    if record.node.provision_state == ProvisionState::Active {
        return second_claim_after_active(conductor, record, caller).await;
    }
    if record.node.provision_state != ProvisionState::WaitCallBack {
        return Err(no_token());
    }
    let lock = conductor.lock(&record, "deploy token").await?;
    // Under the lock: of two callers, only the first finds the token not yet handed out.
    let mut record = match conductor.load(node_uuid).await {
        Ok(record) => record,
        Err(e) => {
            lock.release().await;
            return Err(e);
        }
    };
    let outcome = match claim(&record, &caller) {
        Claim::NoToken => Err(no_token()),
        Claim::Again(token) => Ok(token),
        Claim::Taken(claimant) => {
            let message = claimed_twice(&claimant, &caller);
            return Err(fail_two_claimants(
                conductor,
                &mut record,
                lock,
                message,
                &claimant,
                &caller,
            )
            .await);
        }
        Claim::First(token) => hand_out(conductor, &mut record, &caller, token).await,
    };
    lock.release().await;
    outcome
}

/// The token to its first claimant, recorded (when, and who) on the deployment.
async fn hand_out(
    conductor: &Conductor,
    record: &mut NodeRecord,
    caller: &Caller,
    token: String,
) -> Result<String, ConductorError> {
    if let Some(Value::Object(deploy)) = record.node.driver_internal_info.get_mut("deploy") {
        deploy.insert("handed_out_at".into(), json!(now_unix()));
        deploy.insert("claimant".into(), caller.as_claimant());
    }
    conductor.save(record).await.map(|()| token)
}

/// Why the deployment fails when a second client asks for the token `claimant` took.
fn claimed_twice(claimant: &Value, caller: &Caller) -> String {
    format!(
        "the deploy token was taken by {} and claimed again by {}: two hosts claim this node, one of them is not its deploy ramdisk (the first is the likely thief); the deployment is failed and no call-back is accepted",
        describe_claimant(Some(claimant)),
        caller.describe()
    )
}

/// What a token request finds, the node's lock held.
enum Claim {
    /// No deployment waits for a call-back with a token.
    NoToken,
    /// The token is not handed out yet: to this caller.
    First(String),
    /// The claimant asks again (its first answer was lost): the same token.
    Again(String),
    /// Another client (this one) took the token: two hosts claim the node.
    Taken(Value),
}

fn claim(record: &NodeRecord, caller: &Caller) -> Claim {
    let claimant = deploy_state(record, "claimant").cloned();
    let token = deploy_state(record, "callback_token").and_then(Value::as_str).map(str::to_owned);
    match (token, claimant) {
        (None, _) => Claim::NoToken,
        (Some(_), _) if record.node.provision_state != ProvisionState::WaitCallBack => {
            Claim::NoToken
        }
        (Some(token), Some(claimant)) if caller.is_claimant(Some(&claimant)) => Claim::Again(token),
        (Some(_), Some(claimant)) => Claim::Taken(claimant),
        (Some(token), None) => Claim::First(token),
    }
}

/// A token asked for by a node that a call-back made `active` just now: if the caller is not
/// the client whose call-back did it, that call-back was not the real ramdisk's (or this is not
/// the node): the node is not left `active` on its word. The deployment fails, naming both.
async fn second_claim_after_active(
    conductor: &Conductor,
    record: NodeRecord,
    caller: Caller,
) -> Result<String, ConductorError> {
    let deployed = record.node.driver_internal_info.get("deployed_by");
    let claimant = deployed.and_then(|d| d.get("claimant")).cloned();
    let at = deployed.and_then(|d| d.get("at")).and_then(Value::as_u64).unwrap_or(0);
    let recent = now_unix().saturating_sub(at) <= conductor.config.deploy.callback_timeout;
    let Some(claimant) = claimant.filter(|c| recent && !caller.is_claimant(Some(c))) else {
        return Err(no_token());
    };
    // The call-back's BMC steps may still hold the node's lock: wait for them.
    let mut waited = 0;
    let lock = loop {
        match conductor.lock(&record, "deploy token").await {
            Ok(lock) => break lock,
            Err(ConductorError::Locked(_)) if waited < 60 => {
                waited += 1;
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e),
        }
    };
    let mut record = match conductor.load(&record.node.uuid).await {
        Ok(record) if record.node.provision_state == ProvisionState::Active => record,
        Ok(_) => {
            lock.release().await;
            return Err(no_token());
        }
        Err(e) => {
            lock.release().await;
            return Err(e);
        }
    };
    let message = format!(
        "the node went active on a call-back from {}, and then {} asked for the deploy token: two hosts claim this node, and the call-back was likely forged (no image may have been written); the deployment is failed",
        describe_claimant(Some(&claimant)),
        caller.describe()
    );
    Err(fail_two_claimants(conductor, &mut record, lock, message, &claimant, &caller).await)
}

/// Two hosts claim the node's deploy token: the conflict is reported and the deployment fails
/// (`message` says why); `lock` is released. The error the second claimant gets.
async fn fail_two_claimants(
    conductor: &Conductor,
    record: &mut NodeRecord,
    lock: bootvol_db::NodeLock,
    message: String,
    first: &Value,
    second: &Caller,
) -> ConductorError {
    conductor.secret_conflict(record, &message, Some(first), second).await;
    let failed = conductor.fail_deployment(record, message.clone()).await;
    conductor.changed();
    lock.release().await;
    match failed {
        Ok(()) => ConductorError::Refused(message),
        Err(e) => e,
    }
}

fn no_token() -> ConductorError {
    ConductorError::Refused("no deploy token to hand out for this node".into())
}

fn not_the_node() -> ConductorError {
    ConductorError::Refused(
        "the caller is not this node (its address maps to none of the node's ports)".into(),
    )
}

/// The call-back: checks the caller and the token, then finishes or fails the deployment.
pub(super) async fn callback(
    conductor: &Conductor,
    node_uuid: &str,
    token: &str,
    caller: Caller,
    report: CallbackReport,
) -> Result<(), ConductorError> {
    let record = conductor.load(node_uuid).await?;
    admit_ramdisk(&record, token, &caller)?;
    let lock = conductor.begin(&record, "deploy call-back", super::Shown::NOTHING).await?;
    // Checked again under the lock: the deployment may have expired meanwhile.
    let mut record = match conductor.load(node_uuid).await {
        Ok(record) if waits_for(&record, token) => record,
        other => {
            lock.release().await;
            return other.and_then(|_| Err(not_waiting()));
        }
    };
    let expected_sha = record.node.driver_internal_info["deploy"]["image_sha256"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let claimant = deploy_state(&record, "claimant").cloned();
    let outcome = judge(&report, &expected_sha);
    record.node.driver_internal_info.remove("deploy");
    match outcome {
        Ok(()) => deployed(conductor, record, &report, expected_sha, claimant, lock).await,
        Err(message) => {
            conductor.fail_deployment(&mut record, message.clone()).await?;
            lock.release().await;
            Ok(())
        }
    }
}

/// Whether a deploy endpoint answers `caller`: the node, for the deployment waiting for
/// `token`, and the client that took the token.
fn admit_ramdisk(record: &NodeRecord, token: &str, caller: &Caller) -> Result<(), ConductorError> {
    if !caller.is(record) {
        return Err(not_the_node());
    }
    if !waits_for(record, token) {
        return Err(not_waiting());
    }
    if !caller.is_claimant(deploy_state(record, "claimant")) {
        return Err(not_the_claimant(record, caller));
    }
    Ok(())
}

/// Whether the call-back reports the image written (with the expected SHA-256); why not.
fn judge(report: &CallbackReport, expected_sha: &str) -> Result<(), String> {
    match report.status.as_str() {
        "done"
            if report.sha256.as_deref().is_some_and(|s| s.eq_ignore_ascii_case(expected_sha)) =>
        {
            Ok(())
        }
        "done" => Err(format!(
            "the deploy ramdisk wrote an image whose SHA-256 is {:?}, not {expected_sha}",
            report.sha256
        )),
        _ => Err(format!(
            "the deploy ramdisk failed: {}",
            report.message.as_deref().unwrap_or("no message").chars().take(500).collect::<String>()
        )),
    }
}

/// The image is written: the node is `active` at once, then the BMC steps run after the
/// answer (the ramdisk is waiting for it), on a tracked task that holds `lock` until they are
/// done.
async fn deployed(
    conductor: &Conductor,
    mut record: NodeRecord,
    report: &CallbackReport,
    expected_sha: String,
    claimant: Option<Value>,
    lock: bootvol_db::NodeLock,
) -> Result<(), ConductorError> {
    // `force_deployment` goes before the node is active: the next boot is the volume's.
    record.node.instance_info.remove("force_deployment");
    record.node.driver_internal_info.insert(
        "deployed_image".into(),
        json!({"sha256": expected_sha, "disk": report.disk, "bytes": report.bytes}),
    );
    // Who made the call-back, for a later claimant to be checked against.
    record
        .node
        .driver_internal_info
        .insert("deployed_by".into(), json!({"claimant": claimant, "at": now_unix()}));
    record.node.provision_state = ProvisionState::Active;
    record.node.target_provision_state = None;
    record.node.last_error = None;
    conductor.save(&record).await?;
    conductor.changed();
    conductor
        .event(
            &record,
            format!("{PROVISION}.end"),
            "info",
            json!({"action": "deploy", "disk": report.disk}),
        )
        .await;
    let conductor = conductor.clone();
    conductor.tasks.clone().spawn(reboot_into_volume(conductor, record, lock));
    Ok(())
}

/// The BMC steps after a call-back: the disk (the volume) becomes the boot device, then the
/// node is powered off and on into it; a failure is the node's `last_error`. Releases `lock`.
async fn reboot_into_volume(
    conductor: Conductor,
    mut record: NodeRecord,
    lock: bootvol_db::NodeLock,
) {
    let mut result =
        conductor.set_boot_device(&record.node, BootDevice::Disk, true).await.map(|_| ());
    // The ramdisk powers itself off once its call-back is answered, and some BMCs refuse a
    // reset of a machine that is off: power off (idempotent), then on.
    if result.is_ok() && record.node.driver != Driver::Fake {
        result = conductor.power_action(&mut record, PowerAction::Off).await;
        if result.is_ok() {
            result = conductor.power_action(&mut record, PowerAction::On).await;
        }
    }
    if let Err(e) = result {
        record.node.last_error =
            Some(format!("deployed, but rebooting into the volume failed: {e}"));
        let _ = conductor.save(&record).await;
    }
    lock.release().await;
    conductor.changed();
}

impl Conductor {
    /// A failed image deployment: detach the volumes, power off, `deploy failed`.
    pub(super) async fn fail_deployment(
        &self,
        record: &mut NodeRecord,
        message: String,
    ) -> Result<(), ConductorError> {
        record.node.driver_internal_info.remove("deploy");
        let mut message = message;
        if let Ok(storage) = self.storage.for_node(record)
            && let Err(e) = storage.detach_volumes(record).await
        {
            message = format!("{message}; detaching the volumes also failed: {e}");
        }
        self.reload(record).await?;
        if let Err(e) =
            self.driver(record.node.driver).set_power(&record.node, PowerAction::Off).await
        {
            message = format!("{message}; powering off also failed: {e}");
        } else {
            record.node.power_state = Some(PowerState::Off);
        }
        record.node.driver_internal_info.remove("deploy");
        // What a forged call-back may have recorded is not a deployed image.
        record.node.driver_internal_info.remove("deployed_image");
        record.node.driver_internal_info.remove("deployed_by");
        record.node.provision_state = ProvisionState::DeployFailed;
        record.node.target_provision_state = None;
        record.node.last_error = Some(message.clone());
        self.save(record).await?;
        self.event(
            record,
            format!("{PROVISION}.error"),
            "error",
            json!({"action": "deploy", "error": message}),
        )
        .await;
        Ok(())
    }
}

fn not_the_claimant(record: &NodeRecord, caller: &Caller) -> ConductorError {
    ConductorError::Refused(format!(
        "the deploy token was taken by {}, not by {}: only that client's requests are accepted",
        describe_claimant(deploy_state(record, "claimant")),
        caller.describe()
    ))
}

fn not_waiting() -> ConductorError {
    ConductorError::Refused("no deployment of this node waits for this token".into())
}

/// Whether the node's deployment waits for the call-back with `token`.
fn waits_for(record: &NodeRecord, token: &str) -> bool {
    let expected = deploy_state(record, "callback_token").and_then(Value::as_str);
    record.node.provision_state == ProvisionState::WaitCallBack
        && expected.is_some_and(|e| constant_time_eq(e.as_bytes(), token.as_bytes()))
}

/// The config drive for the ramdisk, if the caller is the node and the token the deployment's.
pub(super) async fn configdrive(
    conductor: &Conductor,
    node_uuid: &str,
    token: &str,
    caller: Caller,
) -> Result<Vec<u8>, ConductorError> {
    let record = conductor.load(node_uuid).await?;
    admit_ramdisk(&record, token, &caller)?;
    let drive = record
        .node
        .instance_info
        .get("configdrive")
        .ok_or_else(|| ConductorError::NotFound("config drive".into()))?;
    configdrive_bytes(drive).map(|(bytes, _)| bytes).map_err(ConductorError::Refused)
}

/// Ironic's `configdrive`: a gzipped, base64-encoded image (served as is, `image`), or a JSON
/// object with `meta_data`, `user_data`, `network_data`, `vendor_data` (served as a tar of
/// `openstack/latest/...`, `tar`).
fn configdrive_bytes(drive: &Value) -> Result<(Vec<u8>, &'static str), String> {
    match drive {
        Value::String(encoded) => Ok((image_bytes(encoded)?, "image")),
        Value::Object(parts) => Ok((tar_bytes(parts)?, "tar")),
        _ => {
            Err("must be a base64 string (gzipped image) or an object (meta_data, user_data...)"
                .into())
        }
    }
}

/// A config drive image: base64, gzipped or not.
fn image_bytes(encoded: &str) -> Result<Vec<u8>, String> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(raw.as_slice())
            .read_to_end(&mut out)
            .map_err(|e| format!("not gzip: {e}"))?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

/// A config drive's parts as a tar of `openstack/latest/...` (an empty `meta_data.json` when
/// none is given).
fn tar_bytes(parts: &Map<String, Value>) -> Result<Vec<u8>, String> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut add = |path: &str, data: &[u8]| -> Result<(), String> {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append_data(&mut header, path, data).map_err(|e| e.to_string())
    };
    for (key, file) in [
        ("meta_data", "meta_data.json"),
        ("network_data", "network_data.json"),
        ("vendor_data", "vendor_data.json"),
    ] {
        if let Some(value) = parts.get(key) {
            add(&format!("openstack/latest/{file}"), value.to_string().as_bytes())?;
        }
    }
    if let Some(user_data) = parts.get("user_data") {
        let text = match user_data {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        add("openstack/latest/user_data", text.as_bytes())?;
    }
    if !parts.contains_key("meta_data") {
        add("openstack/latest/meta_data.json", b"{}")?;
    }
    builder.into_inner().map_err(|e| e.to_string())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether a deployment waits for its call-back since longer than `timeout` seconds.
fn overdue(record: &NodeRecord, now: u64, timeout: u64) -> bool {
    let started = deploy_state(record, "started_at").and_then(Value::as_u64);
    started.is_none_or(|s| s + timeout <= now)
}

/// A field of the deployment in progress (`driver_internal_info.deploy`).
fn deploy_state<'a>(record: &'a NodeRecord, key: &str) -> Option<&'a Value> {
    record.node.driver_internal_info.get("deploy").and_then(|d| d.get(key))
}

/// Fails deployments whose ramdisk never called back.
pub(super) async fn expire(conductor: &Conductor) -> Result<Vec<String>, ConductorError> {
    let records =
        conductor.db.run(|db| db.node_records_in_state(ProvisionState::WaitCallBack)).await?;
    let now = now_unix();
    let timeout = conductor.config.deploy.callback_timeout;
    let mut expired = Vec::new();
    for listed in
        records.into_iter().filter(|r| r.node.provision_state == ProvisionState::WaitCallBack)
    {
        if !overdue(&listed, now, timeout) {
            continue;
        }
        let Ok(lock) = conductor.lock(&listed, "deploy timeout").await else { continue };
        // Read again under the lock: the call-back may have come since the list was read.
        let mut record = match conductor.load(&listed.node.uuid).await {
            Ok(r)
                if r.node.provision_state == ProvisionState::WaitCallBack
                    && overdue(&r, now, timeout) =>
            {
                r
            }
            _ => {
                lock.release().await;
                continue;
            }
        };
        let message = format!("the deploy ramdisk did not call back within {timeout} s");
        conductor.fail_deployment(&mut record, message.clone()).await?;
        lock.release().await;
        expired.push(format!("{}: {message}", record.node.name));
    }
    Ok(expired)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_drives_from_json_become_tar_archives() {
        let (bytes, format) =
            configdrive_bytes(&json!({"meta_data": {"uuid": "u"}, "user_data": "#cloud-config\n"}))
                .unwrap();
        assert_eq!(format, "tar");
        let mut archive = tar::Archive::new(bytes.as_slice());
        let names: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["openstack/latest/meta_data.json", "openstack/latest/user_data"]);
    }

    #[test]
    fn config_drive_images_are_unpacked() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(b"ISO image bytes").unwrap();
        let encoded = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap());
        assert_eq!(
            configdrive_bytes(&json!(encoded)).unwrap(),
            (b"ISO image bytes".to_vec(), "image")
        );
        assert!(configdrive_bytes(&json!("%%%")).is_err());
        assert!(configdrive_bytes(&json!(3)).is_err());
    }

    #[test]
    fn tokens_compare_in_constant_time_and_exactly() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
