//! The `ipmi` hardware type: `ipmitool` over IPMI 2.0 (`-I lanplus`). The only place in bootvol
//! that starts a process (`clippy.toml` forbids it elsewhere).
//!
//! `driver_info` (Ironic's names): `ipmi_address` (IP or host name), `ipmi_port` (default 623),
//! `ipmi_username` and `ipmi_password` (both optional: anonymous login), `ipmi_cipher_suite`
//! (0-17; default: ipmitool's choice), `ipmi_protocol_version` (only `2.0`).
//!
//! Runs `ipmitool -I lanplus -H <address> -p <port> [-C <suite>] [-U <user>] [-E] <command>`
//! with the password in the environment variable `IPMI_PASSWORD` (never on the command line,
//! where `ps` would show it), standard input closed, and `LC_ALL=C`. Commands: `power
//! status|on|off|cycle|soft` and `chassis bootdev pxe|disk [options=persistent]`. Each run is
//! bounded by [`PowerSettings::timeout`]: an `ipmitool` that hangs (or whose caller went away)
//! is killed and reaped by the thread that owns it. Knows ipmitool's command line and output
//! only; nothing of SQLite, the conductor or boot scripts.

use std::io::Read;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::{
    BootDevice, PowerAction, PowerDriver, PowerError, PowerSettings, Secret, no_control_chars,
    optional_str, required_str, scrub,
};
use bootvol_core::model::{Host, Node, PowerState, parse_host};

/// How often `set_power` reads the power state while it waits.
const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The IPMI port when `ipmi_port` is absent.
pub const DEFAULT_PORT: u16 = 623;

/// The IPMI power driver.
#[derive(Debug)]
pub struct Ipmi {
    settings: PowerSettings,
}

/// A node's parsed `driver_info`.
#[derive(Debug)]
struct Info {
    /// For `-H`: IPv6 addresses without brackets.
    host: String,
    port: u16,
    cipher_suite: Option<u8>,
    username: Option<String>,
    password: Option<Secret>,
}

/// Reads an optional integer field given as a JSON number or a numeric string.
fn optional_int(
    node: &Node,
    field: &str,
    range: std::ops::RangeInclusive<u64>,
) -> Result<Option<u64>, PowerError> {
    let value = match node.driver_info.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) if s.is_empty() => return Ok(None),
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.trim().parse().ok(),
        Some(_) => None,
    };
    match value {
        Some(v) if range.contains(&v) => Ok(Some(v)),
        _ => Err(PowerError::Invalid(format!(
            "{field} must be an integer from {} to {}",
            range.start(),
            range.end()
        ))),
    }
}

fn parse_info(node: &Node) -> Result<Info, PowerError> {
    let address = required_str(node, "ipmi_address")?;
    let host =
        match parse_host(address).map_err(|e| PowerError::Invalid(format!("ipmi_address: {e}")))? {
            Host::Ip(ip) => ip.to_string(),
            Host::Name(name) => name,
        };
    let port = optional_int(node, "ipmi_port", 1..=65535)?.map_or(DEFAULT_PORT, |p| p as u16);
    let cipher_suite = optional_int(node, "ipmi_cipher_suite", 0..=17)?.map(|c| c as u8);
    match optional_str(node, "ipmi_protocol_version")? {
        None | Some("2.0") => {}
        Some(other) => {
            return Err(PowerError::Invalid(format!(
                "ipmi_protocol_version {other:?} is not supported: bootvol speaks IPMI 2.0 \
                 (lanplus) only"
            )));
        }
    }
    let username = optional_str(node, "ipmi_username")?;
    if let Some(user) = username {
        no_control_chars("ipmi_username", user)?;
    }
    let password = optional_str(node, "ipmi_password")?;
    if password.is_some_and(|p| p.contains('\0')) {
        return Err(PowerError::Invalid("ipmi_password contains a NUL character".to_owned()));
    }
    Ok(Info {
        host,
        port,
        cipher_suite,
        username: username.map(str::to_owned),
        password: password.map(|p| Secret(p.to_owned())),
    })
}

/// ipmitool's arguments for a command. The password is never among them: with one, `-E` tells
/// ipmitool to read `IPMI_PASSWORD`.
fn ipmitool_args(info: &Info, command: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["-I", "lanplus", "-H", &info.host, "-p", &info.port.to_string()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(suite) = info.cipher_suite {
        args.extend(["-C".to_owned(), suite.to_string()]);
    }
    if let Some(user) = &info.username {
        args.extend(["-U".to_owned(), user.clone()]);
    }
    if info.password.is_some() {
        args.push("-E".to_owned());
    }
    args.extend(command.iter().map(|s| s.to_string()));
    args
}

/// Sets its flag when dropped.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// How often the thread that owns a running ipmitool checks whether it exited or must be killed.
const CHILD_POLL: Duration = Duration::from_millis(10);

/// Starts `command` and collects its output (on a blocking thread). When `cancel` is set first,
/// kills the child, reaps it, and answers `TimedOut`. The child is only ever signalled through
/// its own handle, so a recycled pid is never hit.
fn run_to_end(
    mut command: std::process::Command,
    cancel: &AtomicBool,
) -> std::io::Result<std::process::Output> {
    let mut child = command.spawn()?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if cancel.load(Ordering::SeqCst) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(CHILD_POLL);
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    match status {
        Some(status) => Ok(std::process::Output { status, stdout, stderr }),
        None => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "killed")),
    }
}

/// Reads a pipe to its end on its own thread.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut buf);
        }
        buf
    })
}

/// What ipmitool said on failure: its error lines (standard error, else standard output),
/// without the cipher-suite probe's harmless warning when there is anything else.
fn failure_message(stdout: &str, stderr: &str) -> String {
    let mut lines = lines_of(stderr);
    if lines.is_empty() {
        lines = lines_of(stdout);
    }
    let useful: Vec<String> = lines
        .iter()
        .filter(|l| !l.contains("Unable to Get Channel Cipher Suites"))
        .cloned()
        .collect();
    let chosen = if useful.is_empty() { lines } else { useful };
    chosen.join("; ")
}

/// The `ipmitool` process for one command: the password in its environment only (never on
/// its command line), the C locale, no standard input.
fn ipmitool_command(info: &Info, command: &[&str]) -> std::process::Command {
    #[allow(clippy::disallowed_methods)] // with edge's secure_boot, where processes start
    let mut ipmitool = std::process::Command::new("ipmitool");
    ipmitool
        .args(ipmitool_args(info, command))
        .env_remove("IPMI_PASSWORD")
        .env_remove("IPMITOOL_PASSWORD")
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(password) = &info.password {
        ipmitool.env("IPMI_PASSWORD", password.expose());
    }
    ipmitool
}

fn lines_of(text: &str) -> Vec<String> {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

impl Ipmi {
    pub fn new(settings: PowerSettings) -> Ipmi {
        Ipmi { settings }
    }

    /// Runs one ipmitool command; answers its standard output.
    async fn run(&self, node: &Node, info: &Info, command: &[&str]) -> Result<String, PowerError> {
        let what = format!("ipmitool {} against {}:{}", command.join(" "), info.host, info.port);
        tracing::debug!(
            node = %node.uuid, command = %command.join(" "), host = %info.host, port = info.port,
            "ipmitool"
        );
        let ipmitool = ipmitool_command(info, command);
        // Set when the run is over for the caller (deadline, or the caller went away): the
        // thread that owns the child then kills and reaps it.
        let cancel = CancelOnDrop(Arc::new(AtomicBool::new(false)));
        let flag = Arc::clone(&cancel.0);
        let mut task = tokio::task::spawn_blocking(move || run_to_end(ipmitool, &flag));
        let timeout = self.settings.timeout;
        let finished = match tokio::time::timeout(timeout, &mut task).await {
            Ok(joined) => joined,
            Err(_) => {
                cancel.0.store(true, Ordering::SeqCst);
                let _ = task.await;
                tracing::warn!(node = %node.uuid, "{what}: no answer within {timeout:?}, killed");
                return Err(PowerError::Timeout(format!(
                    "{what} did not finish within {timeout:?} (killed)"
                )));
            }
        };
        let output = match finished {
            Ok(Ok(output)) => output,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(PowerError::Unsupported(
                    "ipmitool is not installed (no ipmitool on PATH)".to_owned(),
                ));
            }
            Ok(Err(e)) => return Err(PowerError::Bmc(format!("{what}: {e}"))),
            Err(e) => return Err(PowerError::Bmc(format!("{what}: {e}"))),
        };
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        if output.status.success() {
            return Ok(scrub(info.password.as_ref(), &stdout));
        }
        let message = failure_message(&stdout, &stderr);
        let message = if message.is_empty() { output.status.to_string() } else { message };
        Err(PowerError::Bmc(scrub(info.password.as_ref(), &format!("{what}: {message}"))))
    }

    async fn status(&self, node: &Node, info: &Info) -> Result<PowerState, PowerError> {
        let out = self.run(node, info, &["power", "status"]).await?;
        let out = out.to_ascii_lowercase();
        if out.contains("chassis power is on") {
            Ok(PowerState::On)
        } else if out.contains("chassis power is off") {
            Ok(PowerState::Off)
        } else {
            Err(PowerError::Bmc(format!(
                "unexpected answer to ipmitool power status: {:?}",
                out.trim()
            )))
        }
    }

    /// Reads the power state until it is `target` or the wait is over.
    async fn wait_for(
        &self,
        node: &Node,
        info: &Info,
        target: PowerState,
        command: &str,
    ) -> Result<(), PowerError> {
        let wait = self.settings.state_wait;
        let deadline = Instant::now() + wait;
        let mut last = String::from("nothing read");
        loop {
            match tokio::time::timeout_at(deadline, self.status(node, info)).await {
                Err(_) => break,
                Ok(Ok(state)) if state == target => return Ok(()),
                Ok(Ok(state)) => last = state.to_string(),
                // A BMC may stumble while it acts; keep asking until the deadline.
                Ok(Err(error)) => last = error.to_string(),
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            tokio::time::sleep(POLL_INTERVAL.min(deadline - now)).await;
        }
        Err(PowerError::Timeout(format!(
            "the node did not reach {target} within {wait:?} after ipmitool power {command} \
             (last: {last})"
        )))
    }
}

#[async_trait::async_trait]
impl PowerDriver for Ipmi {
    fn validate(&self, node: &Node) -> Result<(), PowerError> {
        parse_info(node).map(|_| ())
    }

    async fn power_state(&self, node: &Node) -> Result<PowerState, PowerError> {
        let info = parse_info(node)?;
        self.status(node, &info).await
    }

    async fn set_power(&self, node: &Node, action: PowerAction) -> Result<(), PowerError> {
        let info = parse_info(node)?;
        let current = self.status(node, &info).await?;
        let (command, target) = match (action, current) {
            (PowerAction::On, _) => ("on", Some(PowerState::On)),
            (PowerAction::Off, _) => ("off", Some(PowerState::Off)),
            (PowerAction::SoftOff, _) => ("soft", Some(PowerState::Off)),
            // As Ironic: rebooting a node that is off powers it on.
            (PowerAction::Reboot, PowerState::Off) => ("on", Some(PowerState::On)),
            (PowerAction::Reboot, PowerState::On) => ("cycle", None),
        };
        if target == Some(current) {
            tracing::info!(node = %node.uuid, ?action, state = %current, "ipmi: already there");
            return Ok(());
        }
        tracing::info!(node = %node.uuid, ?action, command, from = %current, "ipmi: power");
        self.run(node, &info, &["power", command]).await?;
        if let Some(target) = target {
            self.wait_for(node, &info, target, command).await?;
            tracing::info!(node = %node.uuid, ?action, state = %target, "ipmi: state reached");
        }
        Ok(())
    }

    async fn set_boot_device(
        &self,
        node: &Node,
        device: BootDevice,
        persistent: bool,
    ) -> Result<(), PowerError> {
        let info = parse_info(node)?;
        let device = match device {
            BootDevice::Pxe => "pxe",
            BootDevice::Disk => "disk",
        };
        let mut command = vec!["chassis", "bootdev", device];
        if persistent {
            command.push("options=persistent");
        }
        tracing::info!(node = %node.uuid, device, persistent, "ipmi: set boot device");
        self.run(node, &info, &command).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::power::test_node;

    #[test]
    fn the_password_goes_to_the_environment_never_to_the_arguments() {
        let node = test_node(
            bootvol_core::model::Driver::Ipmi,
            json!({"ipmi_address": "fd00::5", "ipmi_username": "admin",
                   "ipmi_password": "pw-on-no-command-line", "ipmi_cipher_suite": "3"}),
        );
        let info = parse_info(&node).unwrap();
        let args = ipmitool_args(&info, &["chassis", "bootdev", "disk", "options=persistent"]);
        assert_eq!(
            args,
            [
                "-I",
                "lanplus",
                "-H",
                "fd00::5",
                "-p",
                "623",
                "-C",
                "3",
                "-U",
                "admin",
                "-E",
                "chassis",
                "bootdev",
                "disk",
                "options=persistent"
            ]
        );
        assert!(!format!("{info:?}").contains("pw-on-no-command-line"));
    }

    #[test]
    fn anonymous_login_passes_neither_user_nor_password() {
        let node = test_node(
            bootvol_core::model::Driver::Ipmi,
            json!({"ipmi_address": "bmc-1", "ipmi_port": 6230}),
        );
        let args = ipmitool_args(&parse_info(&node).unwrap(), &["power", "status"]);
        assert_eq!(args, ["-I", "lanplus", "-H", "bmc-1", "-p", "6230", "power", "status"]);
    }

    #[test]
    fn failure_messages_drop_the_cipher_suite_warning() {
        assert_eq!(
            failure_message(
                "",
                "Unable to Get Channel Cipher Suites\nError: Unable to establish IPMI v2 / RMCP+ session\n"
            ),
            "Error: Unable to establish IPMI v2 / RMCP+ session"
        );
        assert_eq!(
            failure_message("Set Chassis Power Control to Soft failed: Unspecified error\n", ""),
            "Set Chassis Power Control to Soft failed: Unspecified error"
        );
    }
}
