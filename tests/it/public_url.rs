//! `[http] public_url = "auto"` on a real link: `bootvol serve` in a network namespace whose
//! only link (a dummy) gets an address, then another; the generic `boot.ipxe` served must name
//! the address in force, and follow the change without a restart. `check-config` run in the
//! namespace says where the URL comes from.
//!
//! Needs root and `ip`; without them it says so and passes.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::netns::Netns;
use crate::support::Appliance;

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The body of `GET url` from inside the namespace `ns` (a thread of its own enters it).
fn get_in(ns: &Netns, url: &str) -> Option<String> {
    let url = url.to_owned();
    ns.run(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .into();
        agent.get(&url).call().ok()?.body_mut().read_to_string().ok()
    })
    .unwrap()
}

#[test]
fn the_boot_url_follows_the_address_of_the_link() {
    if !crate::support::netns_available("public_url", &[]) {
        return;
    }
    let pid = std::process::id();
    let ns = Netns::add(format!("bvpu-{pid}"));
    let prefix = format!("10.215.{}", pid % 250 + 1);
    // A veth pair inside the namespace: bv0 gets the address, bv1 none.
    ns.ip(&["link", "add", "bv0", "type", "veth", "peer", "name", "bv1"]);
    ns.ip(&["link", "set", "bv1", "up"]);
    ns.ip(&["addr", "add", &format!("{prefix}.1/24"), "dev", "bv0"]);
    ns.ip(&["link", "set", "bv0", "up"]);
    let app = Appliance::with_config(|dir| {
        format!(
            r#"[database]
{database}
[http]
listen = "0.0.0.0:8080"
public_url = "auto"
files_root = "{dir}"
[tftp]
listen = "127.0.0.1:6969"
root = "{dir}"
[api]
listen = "127.0.0.1:6385"
auth_strategy = "noauth"
"#,
            dir = dir.display(),
            database = crate::support::database(dir)
        )
    });
    let in_ns = |args: &[&str]| ns.wrap(&app.command(args));
    let checked = in_ns(&["check-config"]).output().unwrap();
    let text = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success(), "{text}{}", String::from_utf8_lossy(&checked.stderr));
    assert!(
        text.contains(&format!(
            "now: http://{prefix}.1:8080 ({prefix}.1 on bv0 (the first non-loopback link"
        )),
        "{text}"
    );

    let log_path = app.path("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let _serve = Serve(in_ns(&["serve"]).stdout(Stdio::null()).stderr(log).spawn().unwrap());
    let serve_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let boot = "http://127.0.0.1:8080/boot.ipxe";
    let wait_for = |wanted: &str, within: Duration| {
        let deadline = Instant::now() + within;
        loop {
            let script = get_in(&ns, boot).unwrap_or_default();
            if script.contains(wanted) {
                return script;
            }
            assert!(
                Instant::now() < deadline,
                "boot.ipxe never named {wanted}: {script}\nlog: {}",
                serve_log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let first = wait_for(&format!("http://{prefix}.1:8080/boot/"), Duration::from_secs(20));
    assert!(!first.contains("auto/"), "{first}");

    // The link's address changes (a new DHCP lease): within the watch interval and a rebuild.
    ns.ip(&["addr", "flush", "dev", "bv0"]);
    ns.ip(&["addr", "add", &format!("{prefix}.77/24"), "dev", "bv0"]);
    let changed = Instant::now();
    let second = wait_for(&format!("http://{prefix}.77:8080/boot/"), Duration::from_secs(15));
    assert!(!second.contains(&format!("{prefix}.1:")), "{second}");
    assert!(changed.elapsed() <= Duration::from_secs(12), "{:?}", changed.elapsed());
    assert!(serve_log().contains("public_url changed"), "{}", serve_log());
}
