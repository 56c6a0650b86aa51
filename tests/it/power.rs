//! The power drivers (`bootvol_control::power`) against real peers: sushy-tools' Redfish emulator (fake
//! driver, no libvirt) and OpenIPMI's `ipmi_sim` driven by the real `ipmitool`, started per test
//! from `tests/power/` and killed when the test ends. A test whose peer is not installed prints
//! "skipped: ..." and passes, unless `BOOTVOL_REQUIRE_POWER=1` (CI), where it fails naming what
//! is missing. `tests/power/setup.sh` installs everything.

#[path = "../power/peers.rs"]
pub(crate) mod peers;

use std::net::{TcpListener, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bootvol_control::power::fake::{FakeCall, FakePower};
use bootvol_control::power::{
    BootDevice, PowerAction, PowerDriver, PowerError, PowerSettings, driver_for,
};
use bootvol_core::model::{
    BootInterfaceName, DeployInterfaceName, Driver, Node, PowerState, ProvisionState,
};
use serde_json::{Value, json};

use peers::{IpmiSim, LogCapture, Sushy, SushyOptions};

fn node(driver: Driver, driver_info: Value) -> Node {
    Node {
        uuid: "6a3c1f0e-1d2b-4c5d-8e9f-0a1b2c3d4e5f".to_owned(),
        name: "node-1".to_owned(),
        driver,
        driver_info: driver_info.as_object().cloned().unwrap_or_default(),
        properties: Default::default(),
        instance_info: Default::default(),
        driver_internal_info: Default::default(),
        extra: Default::default(),
        storage_interface: None,
        boot_interface: BootInterfaceName::Ipxe,
        deploy_interface: DeployInterfaceName::Direct,
        interfaces: Default::default(),
        instance_uuid: None,
        resource_class: None,
        provision_updated_at: None,
        reservation: None,
        chassis_uuid: None,
        power_state: None,
        target_power_state: None,
        provision_state: ProvisionState::Available,
        target_provision_state: None,
        maintenance: false,
        maintenance_reason: None,
        console_enabled: false,
        target_raid_config: Default::default(),
        last_error: None,
        created_at: None,
        updated_at: None,
    }
}

fn settings(timeout_ms: u64, state_wait_ms: u64) -> PowerSettings {
    PowerSettings {
        timeout: Duration::from_millis(timeout_ms),
        state_wait: Duration::from_millis(state_wait_ms),
    }
}

/// Asserts that a secret appears nowhere: not in the error (Display or Debug), the driver's
/// Debug, the node's driver_info as the driver sees it, nor any captured log line.
fn assert_secret_hidden(secret: &str, error: &PowerError, driver: &dyn PowerDriver, logs: &str) {
    assert!(!error.to_string().contains(secret), "error shows the secret: {error}");
    assert!(!format!("{error:?}").contains(secret), "error Debug shows the secret: {error:?}");
    assert!(!format!("{driver:?}").contains(secret), "driver Debug shows the secret");
    assert!(!logs.contains(secret), "a log line shows the secret:\n{logs}");
}

fn redfish_node(sushy: &Sushy, system: Option<usize>, extra: Value) -> Node {
    let mut info = json!({ "redfish_address": sushy.url });
    if let Some(i) = system {
        info["redfish_system_id"] = json!(Sushy::system_path(i));
    }
    for (key, value) in extra.as_object().unwrap() {
        info[key] = value.clone();
    }
    node(Driver::Redfish, info)
}

/// The ResetTypes bootvol POSTed, in order.
fn reset_types(sushy: &Sushy) -> Vec<String> {
    sushy
        .changes()
        .iter()
        .filter(|r| r["method"] == "POST")
        .map(|r| r["json"]["ResetType"].as_str().unwrap().to_owned())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// No peer needed.

#[tokio::test]
async fn fake_driver_answers_the_recorded_state_and_records_calls() {
    let fake = FakePower::new();
    let mut n = node(Driver::Fake, json!({}));
    fake.validate(&n).unwrap();
    assert_eq!(fake.power_state(&n).await.unwrap(), PowerState::Off, "nothing recorded: off");
    n.power_state = Some(PowerState::On);
    assert_eq!(fake.power_state(&n).await.unwrap(), PowerState::On);
    fake.set_power(&n, PowerAction::Reboot).await.unwrap();
    fake.set_boot_device(&n, BootDevice::Pxe, false).await.unwrap();
    assert_eq!(
        fake.calls(),
        [
            FakeCall::SetPower { node: n.uuid.clone(), action: PowerAction::Reboot },
            FakeCall::SetBootDevice {
                node: n.uuid.clone(),
                device: BootDevice::Pxe,
                persistent: false
            },
        ]
    );
    let through_the_seam = driver_for(Driver::Fake, &PowerSettings::default());
    assert!(format!("{through_the_seam:?}").starts_with("FakePower"));
    assert!(
        format!("{:?}", driver_for(Driver::Redfish, &PowerSettings::default()))
            .starts_with("Redfish")
    );
    assert!(
        format!("{:?}", driver_for(Driver::Ipmi, &PowerSettings::default())).starts_with("Ipmi")
    );
}

#[test]
fn bad_driver_info_is_refused_naming_the_field_without_echoing_secrets() {
    let redfish = driver_for(Driver::Redfish, &PowerSettings::default());
    let ipmi = driver_for(Driver::Ipmi, &PowerSettings::default());
    let invalid = |driver: &Arc<dyn PowerDriver>, kind: Driver, info: Value| -> String {
        match driver.validate(&node(kind, info.clone())) {
            Err(PowerError::Invalid(message)) => message,
            other => panic!("{info} should be invalid, got {other:?}"),
        }
    };
    let r = |info| invalid(&redfish, Driver::Redfish, info);
    assert!(r(json!({})).contains("redfish_address is required"));
    assert!(r(json!({"redfish_address": 5})).contains("redfish_address must be a string"));
    assert!(r(json!({"redfish_address": "ftp://bmc"})).contains("redfish_address must be an http"));
    assert!(r(json!({"redfish_address": "http://"})).contains("redfish_address"));
    let with_credentials = r(json!({"redfish_address": "https://admin:Url-Pw-99@bmc"}));
    assert!(with_credentials.contains("must not contain credentials"), "{with_credentials}");
    assert!(!with_credentials.contains("Url-Pw-99"));
    assert!(
        r(json!({"redfish_address": "https://bmc", "redfish_system_id": "Systems/1"}))
            .contains("redfish_system_id must be the system's path")
    );
    let lone_password =
        r(json!({"redfish_address": "https://bmc", "redfish_password": "Lone-Pw-1"}));
    assert!(lone_password.contains("redfish_username is not"), "{lone_password}");
    assert!(!lone_password.contains("Lone-Pw-1"));
    assert!(
        r(json!({"redfish_address": "https://bmc", "redfish_verify_ca": "/nonexistent/ca.pem"}))
            .contains("redfish_verify_ca")
    );
    assert!(
        r(json!({"redfish_address": "https://bmc", "redfish_verify_ca": 1}))
            .contains("redfish_verify_ca must be a boolean")
    );
    for good in [
        json!({"redfish_address": "bmc.example"}),
        json!({"redfish_address": "https://[fd00::1]:8443", "redfish_system_id": "/redfish/v1/Systems/1",
               "redfish_username": "admin", "redfish_password": "pw", "redfish_verify_ca": "False"}),
        json!({"redfish_address": "http://127.0.0.1:8000", "redfish_verify_ca": false}),
    ] {
        redfish
            .validate(&node(Driver::Redfish, good.clone()))
            .unwrap_or_else(|e| panic!("{good}: {e}"));
    }

    let i = |info| invalid(&ipmi, Driver::Ipmi, info);
    assert!(i(json!({})).contains("ipmi_address is required"));
    assert!(i(json!({"ipmi_address": "-oProxyCommand=x"})).contains("ipmi_address"));
    assert!(
        i(json!({"ipmi_address": "bmc", "ipmi_port": 70000}))
            .contains("ipmi_port must be an integer")
    );
    assert!(i(json!({"ipmi_address": "bmc", "ipmi_port": "six"})).contains("ipmi_port"));
    assert!(
        i(json!({"ipmi_address": "bmc", "ipmi_cipher_suite": 18})).contains("ipmi_cipher_suite")
    );
    assert!(i(json!({"ipmi_address": "bmc", "ipmi_protocol_version": "1.5"})).contains("2.0"));
    assert!(i(json!({"ipmi_address": "bmc", "ipmi_username": "a\nb"})).contains("ipmi_username"));
    let nul = i(json!({"ipmi_address": "bmc", "ipmi_password": "Nul\u{0}Pw"}));
    assert!(nul.contains("ipmi_password") && !nul.contains("Nul"), "{nul}");
    for good in [
        json!({"ipmi_address": "192.0.2.7"}),
        json!({"ipmi_address": "fd00::7", "ipmi_port": "6230", "ipmi_username": "admin",
               "ipmi_password": "pw", "ipmi_cipher_suite": 17, "ipmi_protocol_version": "2.0"}),
    ] {
        ipmi.validate(&node(Driver::Ipmi, good.clone())).unwrap_or_else(|e| panic!("{good}: {e}"));
    }
}

#[tokio::test]
async fn redfish_bmc_that_does_not_answer_times_out_within_the_bound() {
    // Accepts connections (the kernel does) but never reads or answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", silent.local_addr().unwrap());
    let driver = driver_for(Driver::Redfish, &settings(1000, 5000));
    let n = node(Driver::Redfish, json!({"redfish_address": address}));
    for call in 0..2 {
        let start = Instant::now();
        let result = if call == 0 {
            driver.power_state(&n).await.map(|_| ())
        } else {
            driver.set_power(&n, PowerAction::On).await
        };
        let elapsed = start.elapsed();
        match result {
            Err(PowerError::Timeout(message)) => {
                assert!(message.contains("did not answer GET"), "{message}")
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(
            elapsed >= Duration::from_millis(900) && elapsed < Duration::from_millis(2500),
            "{elapsed:?}"
        );
    }

    // Nothing listening: an error at once, not a wait.
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let n = node(Driver::Redfish, json!({"redfish_address": format!("http://{closed}")}));
    let start = Instant::now();
    match driver.power_state(&n).await {
        Err(PowerError::Bmc(message)) => {
            assert!(message.contains("cannot reach the BMC"), "{message}")
        }
        other => panic!("expected a connection error, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());
}

#[tokio::test]
async fn ipmitool_that_hangs_is_killed_at_the_timeout_and_never_shows_the_password() {
    if peers::on_path("ipmitool").is_none() {
        peers::missing::<()>("ipmitool is not installed");
        return;
    }
    let logs = LogCapture::start();
    // A "BMC" that receives and never answers.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    const PASSWORD: &str = "Hung-Pw-4e2d";
    let n = node(
        Driver::Ipmi,
        json!({"ipmi_address": "127.0.0.1", "ipmi_port": port, "ipmi_username": "admin",
               "ipmi_password": PASSWORD, "ipmi_cipher_suite": 3}),
    );
    let driver = driver_for(Driver::Ipmi, &settings(2000, 5000));
    let start = Instant::now();
    let task = {
        let (driver, n) = (Arc::clone(&driver), n.clone());
        tokio::spawn(async move { driver.power_state(&n).await })
    };

    // While it runs: the child's command line lacks the password, its environment has it.
    let mut seen = None;
    while seen.is_none() && start.elapsed() < Duration::from_millis(1500) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        seen = ipmitool_children(port).into_iter().next();
    }
    let (pid, cmdline, environ) = seen.expect("an ipmitool child while the call runs");
    assert!(cmdline.contains(" -E "), "{cmdline}");
    assert!(!cmdline.contains(PASSWORD), "the password is on the command line: {cmdline}");
    assert!(environ.contains(&format!("IPMI_PASSWORD={PASSWORD}")));

    let result = task.await.unwrap();
    let elapsed = start.elapsed();
    let error = match result {
        Err(error @ PowerError::Timeout(_)) => error,
        other => panic!("expected a timeout, got {other:?}"),
    };
    assert!(error.to_string().contains("killed"), "{error}");
    assert!(
        elapsed >= Duration::from_millis(1900) && elapsed < Duration::from_millis(3500),
        "{elapsed:?}"
    );
    // Killed and reaped: the pid is gone (not even a zombie).
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "ipmitool {pid} still exists");
    assert_secret_hidden(PASSWORD, &error, driver.as_ref(), &logs.text());
}

/// ipmitool processes this test process started for `port` (other tests run ipmitool too):
/// (pid, command line, environment).
fn ipmitool_children(port: u16) -> Vec<(u32, String, String)> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let dir = entry.path();
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else { continue };
        // pid (comm) state ppid ...
        let Some((_, rest)) = stat.rsplit_once(") ") else { continue };
        let ppid = rest.split_whitespace().nth(1).unwrap_or("");
        if ppid != me || !stat.contains("(ipmitool)") {
            continue;
        }
        let read = |name: &str| {
            String::from_utf8_lossy(&std::fs::read(dir.join(name)).unwrap_or_default())
                .replace('\0', " ")
        };
        let cmdline = read("cmdline");
        if !cmdline.contains(&format!(" -p {port} ")) {
            continue;
        }
        let pid = entry.file_name().to_string_lossy().parse().unwrap();
        found.push((pid, cmdline, read("environ")));
    }
    found
}

// ---------------------------------------------------------------------------------------------
// Redfish against sushy-tools.

#[tokio::test]
async fn redfish_power_actions_against_sushy() {
    let Some(mut sushy) = Sushy::start(SushyOptions::default()) else { return };
    let logs = LogCapture::start();
    let driver = driver_for(Driver::Redfish, &settings(5000, 10_000));
    let n = redfish_node(&sushy, Some(1), json!({}));
    driver.validate(&n).unwrap();
    assert_eq!(driver.power_state(&n).await.unwrap(), PowerState::Off);

    driver.set_power(&n, PowerAction::On).await.unwrap();
    assert_eq!(driver.power_state(&n).await.unwrap(), PowerState::On);
    let (system, _) = sushy.get(&Sushy::system_path(1));
    assert_eq!(system["PowerState"], "On");
    // The POST went to the target the system resource names.
    let post = sushy.changes().pop().unwrap();
    assert_eq!(post["path"], system["Actions"]["#ComputerSystem.Reset"]["target"]);

    // Already on: nothing is sent.
    driver.set_power(&n, PowerAction::On).await.unwrap();
    assert_eq!(reset_types(&sushy), ["On"]);

    driver.set_power(&n, PowerAction::Reboot).await.unwrap();
    driver.set_power(&n, PowerAction::SoftOff).await.unwrap();
    assert_eq!(driver.power_state(&n).await.unwrap(), PowerState::Off);
    // Rebooting a node that is off powers it on.
    driver.set_power(&n, PowerAction::Reboot).await.unwrap();
    assert_eq!(driver.power_state(&n).await.unwrap(), PowerState::On);
    driver.set_power(&n, PowerAction::Off).await.unwrap();
    assert_eq!(driver.power_state(&n).await.unwrap(), PowerState::Off);
    assert_eq!(reset_types(&sushy), ["On", "ForceRestart", "GracefulShutdown", "On", "ForceOff"]);

    let text = logs.text();
    assert!(text.contains("redfish: reset") && text.contains("ForceRestart"), "{text}");
    sushy.assert_running();
}

#[tokio::test]
async fn redfish_boot_device_against_sushy_once_and_continuous_with_if_match() {
    let Some(mut sushy) = Sushy::start(SushyOptions { etag: true, ..Default::default() }) else {
        return;
    };
    let driver = driver_for(Driver::Redfish, &settings(5000, 10_000));
    let n = redfish_node(&sushy, Some(1), json!({}));
    let path = Sushy::system_path(1);
    for (device, persistent, target, enabled) in [
        (BootDevice::Pxe, false, "Pxe", "Once"),
        (BootDevice::Disk, true, "Hdd", "Continuous"),
        (BootDevice::Pxe, true, "Pxe", "Continuous"),
        (BootDevice::Disk, false, "Hdd", "Once"),
    ] {
        let (_, etag_before) = sushy.get(&path);
        driver.set_boot_device(&n, device, persistent).await.unwrap();
        let patch = sushy.changes().pop().unwrap();
        assert_eq!(patch["method"], "PATCH");
        assert_eq!(patch["path"], path.as_str());
        assert_eq!(patch["if_match"], json!(etag_before), "If-Match carries the ETag");
        let (system, _) = sushy.get(&path);
        assert_eq!(system["Boot"]["BootSourceOverrideTarget"], target, "{device:?} {persistent}");
        assert_eq!(system["Boot"]["BootSourceOverrideEnabled"], enabled, "{device:?} {persistent}");
    }
    sushy.assert_running();
}

#[tokio::test]
async fn redfish_finds_the_only_system_and_asks_for_an_id_among_several() {
    let Some(one) = Sushy::start(SushyOptions::default()) else { return };
    let Some(two) = Sushy::start(SushyOptions { systems: 2, ..Default::default() }) else {
        return;
    };
    let driver = driver_for(Driver::Redfish, &settings(5000, 10_000));

    let n = redfish_node(&one, None, json!({}));
    driver.set_power(&n, PowerAction::On).await.unwrap();
    assert_eq!(driver.power_state(&n).await.unwrap(), PowerState::On);
    assert_eq!(
        one.changes().pop().unwrap()["path"],
        format!("{}/Actions/ComputerSystem.Reset", Sushy::system_path(1))
    );

    let n = redfish_node(&two, None, json!({}));
    match driver.power_state(&n).await {
        Err(PowerError::Invalid(message)) => {
            assert!(message.contains("redfish_system_id is required"), "{message}");
            assert!(message.contains("2 systems"), "{message}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    let n = redfish_node(&two, Some(2), json!({}));
    driver.set_power(&n, PowerAction::On).await.unwrap();
    assert_eq!(two.get(&Sushy::system_path(2)).0["PowerState"], "On");
    assert_eq!(two.get(&Sushy::system_path(1)).0["PowerState"], "Off");
}

#[tokio::test]
async fn redfish_uses_the_reset_target_and_types_the_system_offers() {
    let options = SushyOptions {
        alt_reset_target: true,
        reset_types: Some("ForceOn,ForceOff".to_owned()),
        ..Default::default()
    };
    let Some(sushy) = Sushy::start(options) else { return };
    let driver = driver_for(Driver::Redfish, &settings(5000, 10_000));
    let n = redfish_node(&sushy, Some(1), json!({}));

    // "On" is not offered: "ForceOn" is; and the action lives at another URL.
    driver.set_power(&n, PowerAction::On).await.unwrap();
    let post = sushy.changes().pop().unwrap();
    assert_eq!(post["json"]["ResetType"], "ForceOn");
    assert!(post["path"].as_str().unwrap().starts_with("/bootvol-test/"), "{post}");
    assert_eq!(driver.power_state(&n).await.unwrap(), PowerState::On);

    for (action, missing) in
        [(PowerAction::SoftOff, "GracefulShutdown"), (PowerAction::Reboot, "ForceRestart")]
    {
        match driver.set_power(&n, action).await {
            Err(PowerError::Unsupported(message)) => {
                assert!(
                    message.contains(missing) && message.contains("ForceOn, ForceOff"),
                    "{message}"
                )
            }
            other => panic!("{action:?}: expected Unsupported, got {other:?}"),
        }
    }
    assert_eq!(sushy.changes().len(), 1, "nothing more was sent");
}

#[tokio::test]
async fn redfish_basic_auth_against_sushy_and_a_wrong_password() {
    const PASSWORD: &str = "Redfish-Pw-93c1";
    let auth = Some(("admin".to_owned(), PASSWORD.to_owned()));
    let Some(sushy) = Sushy::start(SushyOptions { auth, ..Default::default() }) else { return };
    let logs = LogCapture::start();
    let driver = driver_for(Driver::Redfish, &settings(5000, 10_000));

    let good = redfish_node(
        &sushy,
        None,
        json!({"redfish_username": "admin", "redfish_password": PASSWORD}),
    );
    assert_eq!(driver.power_state(&good).await.unwrap(), PowerState::Off);
    driver.set_power(&good, PowerAction::On).await.unwrap();
    driver.set_boot_device(&good, BootDevice::Pxe, false).await.unwrap();
    assert!(sushy.changes().iter().all(|r| r["user"] == "admin"));

    let anonymous = redfish_node(&sushy, None, json!({}));
    match driver.power_state(&anonymous).await {
        Err(PowerError::Bmc(message)) => assert!(message.contains("401"), "{message}"),
        other => panic!("expected 401, got {other:?}"),
    }

    const WRONG: &str = "Wrong-Pw-58aa";
    let wrong = redfish_node(
        &sushy,
        Some(1),
        json!({"redfish_username": "admin", "redfish_password": WRONG}),
    );
    let error = driver.set_power(&wrong, PowerAction::Off).await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, PowerError::Bmc(_)), "{error:?}");
    assert!(message.contains("401 Unauthorized"), "{message}");
    assert!(message.contains("Incorrect username or password"), "the BMC's message: {message}");
    assert_eq!(reset_types(&sushy), ["On"], "the wrong password changed nothing");

    let logs = logs.text();
    assert_secret_hidden(WRONG, &error, driver.as_ref(), &logs);
    assert!(!logs.contains(PASSWORD), "{logs}");
    assert!(!format!("{driver:?}").contains(PASSWORD));
}

#[tokio::test]
async fn redfish_waits_for_a_slow_power_change_and_times_out_past_the_wait() {
    let Some(sushy) = Sushy::start(SushyOptions { power_delay: 2, ..Default::default() }) else {
        return;
    };
    let n = redfish_node(&sushy, Some(1), json!({}));

    let patient = driver_for(Driver::Redfish, &settings(5000, 10_000));
    let start = Instant::now();
    patient.set_power(&n, PowerAction::On).await.unwrap();
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(900), "returned before the change landed: {took:?}");
    assert_eq!(sushy.get(&Sushy::system_path(1)).0["PowerState"], "On", "right when it returned");

    let hasty = driver_for(Driver::Redfish, &settings(5000, 500));
    let start = Instant::now();
    match hasty.set_power(&n, PowerAction::SoftOff).await {
        Err(PowerError::Timeout(message)) => {
            assert!(
                message.contains("PowerState Off") && message.contains("GracefulShutdown"),
                "{message}"
            );
            // What it last saw (the first read may not have landed in time on a loaded machine).
            assert!(message.contains("(last: "), "{message}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
    // The BMC still carries it out.
    let start = Instant::now();
    while patient.power_state(&n).await.unwrap() != PowerState::Off {
        assert!(start.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn redfish_over_https_verifies_the_bmc_certificate_as_told() {
    let Some(sushy) = Sushy::start(SushyOptions { tls: true, ..Default::default() }) else {
        return;
    };
    let driver = driver_for(Driver::Redfish, &settings(5000, 10_000));
    let ca = sushy.ca_file.clone().unwrap();

    // Default (verify against the system roots): the test CA is unknown.
    let n = redfish_node(&sushy, Some(1), json!({}));
    match driver.power_state(&n).await {
        Err(PowerError::Bmc(message)) => assert!(message.contains("certificate"), "{message}"),
        other => panic!("expected a certificate error, got {other:?}"),
    }
    // The CA file: trusted.
    let n = redfish_node(&sushy, Some(1), json!({"redfish_verify_ca": ca.display().to_string()}));
    driver.validate(&n).unwrap();
    assert_eq!(driver.power_state(&n).await.unwrap(), PowerState::Off);
    driver.set_power(&n, PowerAction::On).await.unwrap();
    // Verification off.
    for off in [json!(false), json!("false")] {
        let n = redfish_node(&sushy, Some(1), json!({ "redfish_verify_ca": off }));
        assert_eq!(driver.power_state(&n).await.unwrap(), PowerState::On);
    }
}

// ---------------------------------------------------------------------------------------------
// IPMI against ipmi_sim, with ipmitool.

fn ipmi_node(sim: &IpmiSim, password: &str) -> Node {
    node(
        Driver::Ipmi,
        json!({"ipmi_address": "127.0.0.1", "ipmi_port": sim.port, "ipmi_username": IpmiSim::USER,
               "ipmi_password": password,
               // ipmi_sim does not answer ipmitool's cipher-suite probe: without this, every
               // call waits 10 s for it.
               "ipmi_cipher_suite": 3}),
    )
}

#[tokio::test]
async fn ipmi_power_and_boot_device_against_ipmi_sim() {
    let Some(mut sim) = IpmiSim::start() else { return };
    let logs = LogCapture::start();
    let driver = driver_for(Driver::Ipmi, &settings(10_000, 15_000));
    let n = ipmi_node(&sim, IpmiSim::PASSWORD);
    driver.validate(&n).unwrap();
    assert_eq!(driver.power_state(&n).await.unwrap(), PowerState::Off);

    driver.set_power(&n, PowerAction::On).await.unwrap();
    assert_eq!(sim.chassis("power"), "1");
    assert_eq!(driver.power_state(&n).await.unwrap(), PowerState::On);
    let sets = |sim: &IpmiSim| sim.calls().lines().filter(|l| l.starts_with("set ")).count();
    let before = sets(&sim);
    driver.set_power(&n, PowerAction::On).await.unwrap();
    assert_eq!(sets(&sim), before, "already on: nothing sent");

    driver.set_power(&n, PowerAction::SoftOff).await.unwrap();
    assert!(sim.calls().contains("set shutdown 1"), "{}", sim.calls());
    assert_eq!(driver.power_state(&n).await.unwrap(), PowerState::Off);

    // Rebooting a node that is off powers it on.
    driver.set_power(&n, PowerAction::Reboot).await.unwrap();
    assert_eq!(driver.power_state(&n).await.unwrap(), PowerState::On);
    // A node that is on is power-cycled: off, then on again.
    let calls_before = sim.calls().len();
    driver.set_power(&n, PowerAction::Reboot).await.unwrap();
    let start = Instant::now();
    loop {
        let cycle = sim.calls()[calls_before..].to_owned();
        if cycle.contains("set power 0") && cycle.contains("set power 1") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no cycle: {cycle}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(driver.power_state(&n).await.unwrap(), PowerState::On);

    driver.set_power(&n, PowerAction::Off).await.unwrap();
    assert_eq!(sim.chassis("power"), "0");
    assert_eq!(driver.power_state(&n).await.unwrap(), PowerState::Off);

    for (device, persistent, boot) in [
        (BootDevice::Pxe, false, "pxe"),
        (BootDevice::Disk, true, "default"),
        (BootDevice::Pxe, true, "pxe"),
        (BootDevice::Disk, false, "default"),
    ] {
        driver.set_boot_device(&n, device, persistent).await.unwrap();
        assert_eq!(sim.chassis("boot"), boot, "{device:?} persistent={persistent}");
    }
    let text = logs.text();
    assert!(text.contains("ipmi: power") && !text.contains(IpmiSim::PASSWORD), "{text}");
    sim.assert_running();
}

#[tokio::test]
async fn ipmi_wrong_password_is_refused_without_showing_it() {
    let Some(mut sim) = IpmiSim::start() else { return };
    let logs = LogCapture::start();
    let driver = driver_for(Driver::Ipmi, &settings(10_000, 15_000));
    const WRONG: &str = "Wrong-Ipmi-3b7";
    let n = ipmi_node(&sim, WRONG);
    let start = Instant::now();
    let error = driver.set_power(&n, PowerAction::On).await.unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
    let message = error.to_string();
    assert!(matches!(error, PowerError::Bmc(_)), "{error:?}");
    assert!(
        message.contains("Unable to establish IPMI v2 / RMCP+ session"),
        "ipmitool's message: {message}"
    );
    assert!(message.contains("power status"), "which command failed: {message}");
    assert_eq!(sim.chassis("power"), "", "nothing was done");
    assert_secret_hidden(WRONG, &error, driver.as_ref(), &logs.text());
    assert!(!logs.text().contains(IpmiSim::PASSWORD));
    sim.assert_running();
}
