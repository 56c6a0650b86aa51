//! The admin web page (`/admin/` on the API listener) of `app::serve` on 127.0.0.1:0, driven by
//! a real HTTP client: log-in with the htpasswd file, the session cookie's flags, CSRF refusal
//! on every POST, the per-(address, user) log-in limit, sessions bound to the user's htpasswd
//! entry, the nodes list, log-out.

use std::time::{Duration, Instant};

use bootvol_core::config::Config;

use crate::support::config_text;

const USER: &str = "operator";
const PASSWORD: &str = "s3cret-pass";

struct Admin {
    base: String,
    /// The boot HTTP listener of the same `serve`.
    boot: String,
    shutdown: crate::support::ServeGuard,
    _dir: tempfile::TempDir,
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The `name=value` of the admin cookie this reply sets.
    fn cookie(&self) -> String {
        let set = self.header("set-cookie").expect("a Set-Cookie header");
        set.split(';').next().unwrap().trim().to_owned()
    }

    /// The CSRF token of the first form in the page.
    fn csrf(&self) -> String {
        let marker = "name=\"csrf\" value=\"";
        let start = self.body.find(marker).expect("a csrf field") + marker.len();
        let end = start + self.body[start..].find('"').unwrap();
        self.body[start..end].to_owned()
    }
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn form(fields: &[(&str, &str)]) -> String {
    fields.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect::<Vec<_>>().join("&")
}

impl Admin {
    fn start() -> Admin {
        Admin::start_with("http_basic")
    }

    /// `serve` with `[api] auth_strategy = <auth>` (the htpasswd file is written either way).
    fn start_with(auth: &str) -> Admin {
        Admin::start_secrets(auth, "any")
    }

    /// Same, with `[boot] script_secrets = <secrets>`.
    fn start_secrets(auth: &str, secrets: &str) -> Admin {
        let dir = tempfile::tempdir().unwrap();
        let htpasswd = dir.path().join("htpasswd");
        let hash = bcrypt::hash(PASSWORD, 4).unwrap();
        std::fs::write(&htpasswd, format!("{USER}:{hash}\n")).unwrap();
        Admin::start_in(dir, auth, secrets)
    }

    /// `serve` stopped, then started again on the same folder (database, htpasswd).
    fn restart(mut self) -> Admin {
        let serve = std::mem::replace(&mut self.shutdown, crate::support::ServeGuard::unstarted());
        serve.stop().expect("the first serve stops cleanly");
        let dir = std::mem::replace(&mut self._dir, tempfile::tempdir().unwrap());
        Admin::start_in(dir, "http_basic", "any")
    }

    fn start_in(dir: tempfile::TempDir, auth: &str, secrets: &str) -> Admin {
        let htpasswd = dir.path().join("htpasswd");
        let text = format!(
            "{}[api]\nauth_strategy = \"{auth}\"\nhttp_basic_auth_user_file = \"{}\"\n",
            config_text(dir.path())
                .replace("script_secrets = \"any\"", &format!("script_secrets = \"{secrets}\"")),
            htpasswd.display()
        );
        let config = Config::from_toml(&text, "test").unwrap();
        let (addr, boot, shutdown) = crate::support::start_serve(config);
        Admin {
            base: format!("http://{addr}"),
            boot: format!("http://{boot}"),
            shutdown,
            _dir: dir,
        }
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .into();
        let mut request =
            ureq::http::Request::builder().method(method).uri(format!("{}{path}", self.base));
        if body.is_some() {
            request = request.header("Content-Type", "application/x-www-form-urlencoded");
        }
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let mut response =
            agent.run(request.body(body.unwrap_or("").to_owned()).unwrap()).expect("HTTP exchange");
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        let body = response.body_mut().read_to_string().unwrap_or_default();
        assert!(status < 500, "{method} {path} answered {status}: {body}");
        Reply { status, headers, body }
    }

    /// The login form: its anonymous session cookie and CSRF token.
    fn login_form(&self) -> (String, String) {
        let page = self.call("GET", "/admin/login", None, &[]);
        assert_eq!(page.status, 200);
        (page.cookie(), page.csrf())
    }

    fn login(&self, password: &str) -> Reply {
        let (cookie, csrf) = self.login_form();
        self.call(
            "POST",
            "/admin/login",
            Some(&form(&[("csrf", &csrf), ("username", USER), ("password", password)])),
            &[("Cookie", &cookie)],
        )
    }
}

#[test]
fn login_session_cookie_nodes_list_and_logout() {
    let admin = Admin::start();
    let first = admin.call("GET", "/admin/", None, &[]);
    assert_eq!(first.status, 303);
    assert_eq!(first.header("location"), Some("/admin/login"));

    let page = admin.call("GET", "/admin/login", None, &[]);
    let set = page.header("set-cookie").unwrap().to_owned();
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"), "{set}");
    assert!(!set.contains("Secure"), "plain HTTP gets no Secure flag: {set}");
    assert!(page.header("content-type").unwrap().starts_with("text/html"));

    let anonymous = page.cookie();
    let logged = admin.call(
        "POST",
        "/admin/login",
        Some(&form(&[("csrf", &page.csrf()), ("username", USER), ("password", PASSWORD)])),
        &[("Cookie", &anonymous)],
    );
    assert_eq!(logged.status, 303, "{}", logged.body);
    assert_eq!(logged.header("location"), Some("/admin/"));
    let cookie = logged.cookie();
    assert_ne!(cookie, anonymous, "log-in issues a new session id");
    // The anonymous session is gone: its cookie no longer opens the page.
    assert_eq!(admin.call("GET", "/admin/", None, &[("Cookie", &anonymous)]).status, 303);

    // A node made through the REST API shows in the list, with its states and scenario.
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let status = agent
        .post(format!("{}/v1/nodes", admin.base))
        .header("Authorization", &format!("Basic {}", basic(USER, PASSWORD)))
        .header("X-OpenStack-Ironic-API-Version", "1.38")
        .header("Content-Type", "application/json")
        .send(r#"{"name": "node-1", "driver": "fake"}"#)
        .map(|r| r.status().as_u16())
        .unwrap();
    assert_eq!(status, 201);
    let nodes = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]);
    assert_eq!(nodes.status, 200);
    assert!(nodes.body.contains(">Nodes</h2>"), "{}", nodes.body);
    assert!(nodes.body.contains(USER));
    assert!(nodes.body.contains(">node-1</a>"), "{}", nodes.body);
    assert!(nodes.body.contains("enroll"), "{}", nodes.body);
    // The scenario is the one the boot snapshot serves (rebuilt at once after the change).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let list = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]);
        if list.body.contains("<td class=\"scenario\">not-deployed</td>") {
            break;
        }
        assert!(Instant::now() < deadline, "the snapshot's scenario: {}", list.body);
        std::thread::sleep(Duration::from_millis(50));
    }
    let csrf = nodes.csrf();

    // Log-out needs the CSRF token too.
    let refused = admin.call("POST", "/admin/logout", Some(""), &[("Cookie", &cookie)]);
    assert_eq!(refused.status, 403);
    assert!(refused.body.contains("CSRF"));
    assert_eq!(admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]).status, 200);
    let out = admin.call(
        "POST",
        "/admin/logout",
        Some(&form(&[("csrf", &csrf)])),
        &[("Cookie", &cookie)],
    );
    assert_eq!(out.status, 303);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    assert_eq!(admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]).status, 303);
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

#[test]
fn forms_without_the_csrf_token_are_refused() {
    let admin = Admin::start();
    let (cookie, csrf) = admin.login_form();
    let creds = [("username", USER), ("password", PASSWORD)];
    // No token, a wrong token, a token without its session: all refused, nothing logged in.
    for (body, cookie) in [
        (form(&creds), Some(cookie.as_str())),
        (form(&[("csrf", "0123"), creds[0], creds[1]]), Some(cookie.as_str())),
        (form(&[("csrf", &csrf), creds[0], creds[1]]), None),
    ] {
        let headers: Vec<(&str, &str)> = cookie.map(|c| ("Cookie", c)).into_iter().collect();
        let reply = admin.call("POST", "/admin/login", Some(&body), &headers);
        assert_eq!(reply.status, 403, "{}", reply.body);
        assert!(reply.header("set-cookie").is_none());
    }
    // A forged cookie (right shape, wrong signature) is no session either.
    let (id, _) = cookie.split_once('.').unwrap();
    let forged = format!("{id}.{}", "0".repeat(64));
    let reply = admin.call(
        "POST",
        "/admin/login",
        Some(&form(&[("csrf", &csrf), creds[0], creds[1]])),
        &[("Cookie", &forged)],
    );
    assert_eq!(reply.status, 403);
    // Logged in, a POST with another session's token is refused.
    let logged = admin.login(PASSWORD);
    assert_eq!(logged.status, 303);
    let reply = admin.call(
        "POST",
        "/admin/logout",
        Some(&form(&[("csrf", &csrf)])),
        &[("Cookie", &logged.cookie())],
    );
    assert_eq!(reply.status, 403);
}

#[test]
fn login_failures_lock_the_user_for_the_address() {
    let admin = Admin::start();
    for _ in 0..5 {
        let reply = admin.login("wrong");
        assert_eq!(reply.status, 401, "{}", reply.body);
        assert!(reply.body.contains("Wrong user or password"));
    }
    // Over the limit even the right password is refused for that user, without a session.
    let reply = admin.login(PASSWORD);
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert!(reply.body.contains("Too many failed log-ins for this user"), "{}", reply.body);
    assert_eq!(reply.header("retry-after"), Some("60"));
    assert!(reply.header("set-cookie").is_none());
}

#[test]
fn secure_cookie_behind_tls() {
    let admin = Admin::start();
    let page = admin.call("GET", "/admin/login", None, &[("X-Forwarded-Proto", "https")]);
    let set = page.header("set-cookie").unwrap();
    assert!(set.contains("; Secure") && set.contains("HttpOnly"), "{set}");
}

impl Admin {
    /// A REST API call with the operator's credentials; the status and JSON answer.
    fn api(&self, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        let agent: ureq::Agent =
            ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let mut response = agent
            .post(format!("{}{path}", self.base))
            .header("Authorization", &format!("Basic {}", basic(USER, PASSWORD)))
            .header("X-OpenStack-Ironic-API-Version", "1.38")
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .unwrap();
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(serde_json::Value::Null))
    }

    /// A REST API `GET` with the operator's credentials; the JSON answer.
    fn api_get(&self, path: &str) -> serde_json::Value {
        let agent: ureq::Agent =
            ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let mut response = agent
            .get(format!("{}{path}", self.base))
            .header("Authorization", &format!("Basic {}", basic(USER, PASSWORD)))
            .header("X-OpenStack-Ironic-API-Version", "1.38")
            .call()
            .unwrap();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
    }
}

#[test]
fn node_page_shows_children_and_the_script_with_secrets_masked() {
    use serde_json::json;
    let admin = Admin::start();
    let (status, node) = admin.api(
        "/v1/nodes",
        json!({"name": "node-1", "driver": "fake", "storage_interface": "external",
               "driver_info": {"fake_password": "bmc-secret"},
               "properties": {"capabilities": "iscsi_boot:true"}}),
    );
    assert_eq!(status, 201, "{node}");
    let uuid = node["uuid"].as_str().unwrap().to_owned();
    let (status, _) =
        admin.api("/v1/ports", json!({"node_uuid": uuid, "address": "52:54:00:12:34:56"}));
    assert_eq!(status, 201);
    let (status, _) = admin.api(
        "/v1/volume/connectors",
        json!({"node_uuid": uuid, "type": "iqn", "connector_id": "iqn.2024-01.org.example.node:node-1"}),
    );
    assert_eq!(status, 201);
    let (status, _) = admin.api(
        "/v1/volume/targets",
        json!({"node_uuid": uuid, "volume_type": "iscsi", "boot_index": 0, "volume_id": "vol-1",
               "properties": {"target_iqn": "iqn.2024-01.org.example.san:v1",
                              "target_portal": "192.0.2.5:3260", "target_lun": 1,
                              "auth_method": "CHAP", "auth_username": "u",
                              "auth_password": "chap-secret"}}),
    );
    assert_eq!(status, 201);

    // The script the boot edge serves node-1 (not deployed: the script that says so), once
    // the snapshot knows it.
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let served = || {
        let mut reply =
            agent.get(format!("{}/boot/52-54-00-12-34-56.ipxe", admin.boot)).call().unwrap();
        reply.body_mut().read_to_string().unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut script = served();
    while !script.contains("# bootvol: node-1 (") {
        assert!(Instant::now() < deadline, "the snapshot never served node-1's script: {script}");
        std::thread::sleep(Duration::from_millis(50));
        script = served();
    }

    let cookie = admin.login(PASSWORD).cookie();
    assert_eq!(admin.call("GET", "/admin/nodes/node-1", None, &[]).status, 303);
    let page = admin.call("GET", "/admin/nodes/node-1", None, &[("Cookie", &cookie)]);
    assert_eq!(page.status, 200, "{}", page.body);
    // Exactly the served bytes, the secret masked (and HTML-escaped as the template does).
    let shown = script
        .replace("chap-secret", "******")
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#x27;")
        .replace('/', "&#x2f;");
    assert!(
        page.body.contains(&format!("<pre id=\"script\">{shown}</pre>")),
        "the page does not show the served script\n{shown}\n{}",
        page.body
    );
    for expected in [
        "52:54:00:12:34:56",
        "iqn.2024-01.org.example.node:node-1",
        "iqn.2024-01.org.example.san:v1",
        "<td>iscsi</td>",
        "******",
        "#!ipxe",
    ] {
        assert!(page.body.contains(expected), "{expected} missing: {}", page.body);
    }
    assert!(!page.body.contains("chap-secret"), "{}", page.body);
    assert!(!page.body.contains("bmc-secret"));
    assert!(page.body.contains("<td>none</td>"), "no Cinder attachment yet");
    // The target's Cinder attachment, as the storage interface records it, is shown.
    let db = crate::support::open_db_ok(admin._dir.path()).unwrap();
    let target = db.node_record(&uuid).unwrap().unwrap().volume_targets[0].uuid.clone();
    db.save_attachment_record(&bootvol_db::AttachmentRecord {
        node_uuid: uuid.clone(),
        target_uuid: target,
        volume_id: "vol-1".into(),
        api: "attachments".into(),
        attachment_id: Some("att-1234".into()),
        state: bootvol_db::AttachmentState::Attached,
        step: "completed".into(),
        connector: serde_json::json!({}),
        last_error: None,
        updated_at: None,
    })
    .unwrap();
    let page = admin.call("GET", "/admin/nodes/node-1", None, &[("Cookie", &cookie)]);
    assert!(
        page.body.contains("attached (step completed, attachments API, <code>att-1234</code>)"),
        "{}",
        page.body
    );
    // By uuid too; an unknown node is a 404 page.
    assert_eq!(
        admin.call("GET", &format!("/admin/nodes/{uuid}"), None, &[("Cookie", &cookie)]).status,
        200
    );
    assert_eq!(admin.call("GET", "/admin/nodes/nope", None, &[("Cookie", &cookie)]).status, 404);
}

#[test]
fn forms_create_a_node_power_it_and_refuse_missing_tokens() {
    let admin = Admin::start();
    let logged = admin.login(PASSWORD);
    let cookie = logged.cookie();
    let list = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]);
    let csrf = list.csrf();
    let fields = [
        ("csrf", csrf.as_str()),
        ("name", "node-9"),
        ("driver", "fake"),
        ("storage_interface", "external"),
        ("capabilities", "iscsi_boot:true"),
        ("mac", "52:54:00:00:00:09"),
        ("connector_iqn", "iqn.2024-01.org.example.node:node-9"),
        ("volume_id", "vol-9"),
        ("target_iqn", "iqn.2024-01.org.example.san:v9"),
        ("target_portal", "192.0.2.9:3260"),
        ("target_lun", "0"),
        ("auth_username", "u9"),
        ("auth_password", "chap-secret-9"),
    ];
    // Without the token: refused, nothing created.
    let refused =
        admin.call("POST", "/admin/nodes", Some(&form(&fields[1..])), &[("Cookie", &cookie)]);
    assert_eq!(refused.status, 403);
    assert_eq!(admin.call("GET", "/admin/nodes/node-9", None, &[("Cookie", &cookie)]).status, 404);
    // A bad child refuses the whole node.
    let mut bad = fields.to_vec();
    bad[6] = ("connector_iqn", "not an iqn");
    let reply = admin.call("POST", "/admin/nodes", Some(&form(&bad)), &[("Cookie", &cookie)]);
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(reply.body.contains("connector"), "{}", reply.body);
    assert_eq!(admin.call("GET", "/admin/nodes/node-9", None, &[("Cookie", &cookie)]).status, 404);

    let created = admin.call("POST", "/admin/nodes", Some(&form(&fields)), &[("Cookie", &cookie)]);
    assert_eq!(created.status, 303, "{}", created.body);
    let location = created.header("location").unwrap().to_owned();
    let page = admin.call("GET", &location, None, &[("Cookie", &cookie)]);
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("52:54:00:00:00:09")
            && page.body.contains("iqn.2024-01.org.example.san:v9")
    );
    assert!(page.body.contains("#!ipxe") && !page.body.contains("chap-secret-9"), "{}", page.body);

    let power = format!("{location}/power");
    let refused =
        admin.call("POST", &power, Some(&form(&[("target", "power on")])), &[("Cookie", &cookie)]);
    assert_eq!(refused.status, 403);
    let on = admin.call(
        "POST",
        &power,
        Some(&form(&[("csrf", &csrf), ("target", "power on")])),
        &[("Cookie", &cookie)],
    );
    // Redirect-after-POST: back to the node page, which shows the outcome once.
    assert_eq!(on.status, 303, "{}", on.body);
    assert_eq!(on.header("location"), Some(location.as_str()));
    let shown = admin.call("GET", &location, None, &[("Cookie", &cookie)]);
    assert!(shown.body.contains("Power on started."), "{}", shown.body);
    let again = admin.call("GET", &location, None, &[("Cookie", &cookie)]);
    assert!(!again.body.contains("Power on started."), "the message is shown once");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let page = admin.call("GET", &location, None, &[("Cookie", &cookie)]);
        if page.body.contains("<th>Power</th><td>power on</td>") {
            break;
        }
        assert!(Instant::now() < deadline, "never powered on: {}", page.body);
        std::thread::sleep(Duration::from_millis(50));
    }
    let checked = admin.call(
        "POST",
        &format!("{location}/validate"),
        Some(&form(&[("csrf", &csrf)])),
        &[("Cookie", &cookie)],
    );
    assert_eq!(checked.status, 303);
    let shown = admin.call("GET", &location, None, &[("Cookie", &cookie)]);
    assert!(shown.body.contains("Validation: boot:"), "{}", shown.body);
    let bad = admin.call(
        "POST",
        &format!("{location}/provision"),
        Some(&form(&[("csrf", &csrf), ("target", "explode")])),
        &[("Cookie", &cookie)],
    );
    assert_eq!(bad.status, 400);
}

/// The admin page in headless Chromium: `tests/admin/browser.js` with Debian's `chromium` and
/// `playwright-core` installed under `target/admin-e2e` (both by `tests/admin/setup.sh`).
/// Skipped, saying so, when either is missing, unless `BOOTVOL_REQUIRE_BROWSER=1` (CI), where it
/// fails. With 500 nodes seeded (seven of them unbootable): the attention counts, search by
/// MAC and by problem, the confirmation step, boot requests' results, refused forms, the BMC
/// fields following the driver, the skip links, an action on all the nodes a filter matches
/// across pages, page sizes and the list's weight, at 1366×900 and at 390×844. Saves its
/// screenshots ([`SCREENSHOTS`]) in `target/admin-shots`, and in `docs/` with
/// `BOOTVOL_UPDATE_SCREENSHOTS=1`.
#[test]
#[allow(clippy::disallowed_methods)] // tests read their own switch and start the real browser
fn headless_chromium_login_create_power_screenshot_logout() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let e2e = root.join("target/admin-e2e");
    let missing: Vec<String> =
        [std::path::PathBuf::from("/usr/bin/chromium"), e2e.join("node_modules/playwright-core")]
            .iter()
            .filter(|p| !p.exists())
            .map(|p| p.display().to_string())
            .collect();
    if !missing.is_empty() {
        crate::skip::skip(crate::skip::BROWSER, &format!("{} missing", missing.join(" and ")));
        return;
    }
    let admin = Admin::start();
    seed_rack(&admin);
    let shots = root.join("target/admin-shots");
    std::fs::create_dir_all(&shots).unwrap();
    for shot in SCREENSHOTS {
        let _ = std::fs::remove_file(shots.join(shot));
    }
    let output = std::process::Command::new("node")
        .arg(root.join("tests/admin/browser.js"))
        .args([&admin.base, USER, PASSWORD])
        .arg(&shots)
        .arg(&admin.boot)
        .env("NODE_PATH", e2e.join("node_modules"))
        .output()
        .expect("node runs");
    assert!(
        output.status.success(),
        "browser flow failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprint!("{}", String::from_utf8_lossy(&output.stdout));
    for shot in SCREENSHOTS {
        let path = shots.join(shot);
        assert!(std::fs::metadata(&path).map(|m| m.len() > 1000).unwrap_or(false), "{shot}");
    }
    // The screenshots of README and docs/operating.md (the admin page), refreshed on demand.
    if std::env::var("BOOTVOL_UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1") {
        for shot in SCREENSHOTS {
            std::fs::copy(shots.join(shot), root.join("docs").join(shot)).unwrap();
        }
    }
}

/// The screenshots `browser.js` takes, at 1366×900 and at 390×844 (`-phone`).
const SCREENSHOTS: [&str; 12] = [
    "admin-nodes-500.png",
    "admin-node.png",
    "admin-confirm.png",
    "admin-bulk-confirm.png",
    "admin-events.png",
    "admin-form-error.png",
    "admin-nodes-500-phone.png",
    "admin-node-phone.png",
    "admin-confirm-phone.png",
    "admin-bulk-confirm-phone.png",
    "admin-events-phone.png",
    "admin-form-error-phone.png",
];

#[test]
fn recent_boot_requests_and_unknown_macs() {
    let admin = Admin::start();
    let cookie = admin.login(PASSWORD).cookie();
    let list = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]);
    let csrf = list.csrf();
    let fields = [("csrf", csrf.as_str()), ("name", "node-7"), ("mac", "52:54:00:00:00:07")];
    let created = admin.call("POST", "/admin/nodes", Some(&form(&fields)), &[("Cookie", &cookie)]);
    assert_eq!(created.status, 303, "{}", created.body);
    let location = created.header("location").unwrap().to_owned();
    // Wait for the snapshot to know the node, then boot a known and an unknown MAC.
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let deadline = Instant::now() + Duration::from_secs(10);
    while agent.get(format!("{}/boot/52-54-00-00-00-07.ipxe", admin.boot)).call().unwrap().status()
        != 200
    {
        assert!(Instant::now() < deadline, "snapshot never knew node-7");
        std::thread::sleep(Duration::from_millis(50));
    }
    let unknown = agent.get(format!("{}/boot/52:54:00:99:99:99.ipxe", admin.boot)).call().unwrap();
    assert_eq!(unknown.status(), 404);

    let page = admin.call("GET", &location, None, &[("Cookie", &cookie)]);
    assert!(page.body.contains("<h3>Recent boot requests</h3>"));
    assert!(
        page.body.contains("<td>http</td><td>127.0.0.1</td><td><code>52:54:00:00:00:07</code></td><td class=\"result\">default script: not-deployed</td>"),
        "the result of the request: {}",
        page.body
    );
    let list = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]);
    assert!(list.body.contains("<code>52:54:00:99:99:99</code>"), "{}", list.body);
    let unknown = &list.body[list.body.find("id=\"unknown-macs\"").unwrap()..];
    assert!(!unknown.contains("<code>52:54:00:00:00:07</code>"), "a known MAC is not unknown");
    // "Enroll" goes to the create form itself (its anchor), open and filled in.
    assert!(
        list.body.contains("href=\"/admin/?enroll=52:54:00:99:99:99#create\""),
        "{}",
        list.body
    );
    assert!(list.body.contains("unknown MAC(s) booting"), "counted at the top: {}", list.body);
    let enroll =
        admin.call("GET", "/admin/?enroll=52:54:00:99:99:99", None, &[("Cookie", &cookie)]);
    assert!(enroll.body.contains("<details id=\"create\" open>"), "{}", enroll.body);
    assert!(
        enroll
            .body
            .contains("name=\"mac\" placeholder=\"52:54:00:12:34:56\" value=\"52:54:00:99:99:99\""),
        "{}",
        enroll.body
    );
}

/// The node page shows the node's last boot report: a failure with its error in words and a
/// banner, marked when it did not come from the node's neighbour; a later success replaces it.
#[test]
fn the_last_boot_report_is_on_the_node_page() {
    let admin = Admin::start();
    let cookie = admin.login(PASSWORD).cookie();
    let list = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]);
    let csrf = list.csrf();
    let fields = [("csrf", csrf.as_str()), ("name", "node-8"), ("mac", "52:54:00:00:00:08")];
    let created = admin.call("POST", "/admin/nodes", Some(&form(&fields)), &[("Cookie", &cookie)]);
    assert_eq!(created.status, 303, "{}", created.body);
    let location = created.header("location").unwrap().to_owned();
    let page = admin.call("GET", &location, None, &[("Cookie", &cookie)]);
    assert!(page.body.contains("<td id=\"boot-report\">none yet</td>"), "{}", page.body);
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let report = |query: &str| {
        let url = format!("{}/report/52-54-00-00-00-08?{query}", admin.boot);
        agent.get(url).call().unwrap().status().as_u16()
    };
    // Until the snapshot knows the node, its MAC is unknown (404).
    let deadline = Instant::now() + Duration::from_secs(10);
    while report("stage=sanhook-failed&err=0x410d613c") != 200 {
        assert!(Instant::now() < deadline, "the snapshot never knew node-8");
        std::thread::sleep(Duration::from_millis(50));
    }
    let shown = |text: &str| {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let page = admin.call("GET", &location, None, &[("Cookie", &cookie)]);
            if page.body.contains(text) || Instant::now() > deadline {
                return page.body;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let body = shown("sanhook failed: 0x410d613c Operation not permitted");
    let row = &body[body.find("id=\"boot-report\"").expect("the report's row")..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.starts_with("id=\"boot-report\" class=\"bad\">"), "{row}");
    assert!(row.contains("sanhook failed: 0x410d613c Operation not permitted"), "{row}");
    assert!(row.contains("(not from the node's neighbour)"), "{row}");
    assert!(row.contains("ipxe.org"), "{row}");
    assert!(body.contains("id=\"boot-failure\""), "no banner: {body}");
    // The list counts it in "needs attention", shows it on the row, and finds it by its words.
    let list = |path: &str| admin.call("GET", path, None, &[("Cookie", &cookie)]).body;
    let body = list("/admin/");
    assert!(body.contains("<span class=\"n\">1</span> whose last boot failed</a>"), "{body}");
    assert!(
        body.contains("last boot failed: sanhook failed: 0x410d613c Operation not permitted"),
        "{body}"
    );
    for path in ["/admin/?q=last%20boot%20failed", "/admin/?problem=1", "/admin/?q=not%20permitted"]
    {
        assert!(list(path).contains("node-8"), "{path} does not find node-8");
    }
    assert_eq!(report("stage=script"), 200);
    let body = shown("script received");
    let row = &body[body.find("id=\"boot-report\"").unwrap()..];
    assert!(row.starts_with("id=\"boot-report\">"), "{row}");
    assert!(!body.contains("id=\"boot-failure\""), "a success still shows the failure's banner");
    // The success replaces the failure: the list no longer counts it.
    let body = list("/admin/");
    assert!(!body.contains("whose last boot failed"), "{body}");
    assert!(!list("/admin/?q=last%20boot%20failed").contains("node-8"));
}

#[test]
fn boot_activity_shows_boots_and_failures_of_the_last_hour() {
    // Neighbour checks on: a script with a CHAP secret asked for over loopback is refused.
    let admin = Admin::start_secrets("http_basic", "neighbour");
    let cookie = admin.call("GET", "/admin/activity", None, &[]);
    assert_eq!(cookie.status, 303, "the activity page needs a session");
    let cookie = admin.login(PASSWORD).cookie();
    // Two deployed nodes, one with a CHAP secret, written as `bootvol apply` would.
    let node = |n: &str, mac: &str, chap: bool| {
        let mut properties = serde_json::json!({"target_iqn": format!("iqn.2024-01.org.example.san:act-{n}"),
            "target_portal": "192.0.2.21:3260", "target_lun": 0});
        if chap {
            properties["auth_method"] = "CHAP".into();
            properties["auth_username"] = "u".into();
            properties["auth_password"] = "chap-secret-ac".into();
        }
        serde_json::json!({"name": format!("act-{n}"), "driver": "fake", "storage_interface": "external",
            "provision_state": "active", "properties": {"capabilities": "iscsi_boot:true"},
            "ports": [{"address": mac}],
            "volume_connectors": [{"type": "iqn", "connector_id": format!("iqn.2024-01.org.example.node:act-{n}")}],
            "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": format!("vol-act-{n}"),
                "properties": properties}]})
    };
    let inventory = serde_json::json!({"nodes": [node("plain", "52:54:00:ac:00:01", false),
        node("chap", "52:54:00:ac:00:02", true)]});
    let config = Config::from_toml(&config_text(admin._dir.path()), "test").unwrap();
    let specs = bootvol_core::inventory::parse(
        &inventory.to_string(),
        bootvol_core::inventory::Format::Json,
        &config,
    )
    .unwrap();
    let mut db = crate::support::open_db_ok(admin._dir.path()).unwrap();
    db.apply_inventory(&specs, false).unwrap();
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let fetch = |mac: &str| {
        agent.get(format!("{}/boot/{mac}.ipxe", admin.boot)).call().unwrap().status().as_u16()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while fetch("52-54-00-ac-00-01") != 200 {
        assert!(Instant::now() < deadline, "snapshot never knew act-plain and act-chap");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(fetch("52-54-00-ac-00-01"), 200);
    assert_eq!(fetch("52-54-00-ac-00-01"), 200);
    assert_eq!(fetch("52-54-00-ac-00-02"), 404, "a CHAP script is refused to loopback");
    // The node page shows the script the node itself gets, its CHAP secret masked.
    let page = admin.call("GET", "/admin/nodes/act-chap", None, &[("Cookie", &cookie)]);
    assert!(page.body.contains("set password ******"), "{}", page.body);
    // A refusal is not a boot: the node's requests say why it was refused.
    assert!(
        page.body.contains("<td class=\"result\">refused: outside a boot window</td>"),
        "{}",
        page.body
    );
    let plain = admin.call("GET", "/admin/nodes/act-plain", None, &[("Cookie", &cookie)]);
    assert!(plain.body.contains("<td class=\"result\">served: iscsi</td>"), "{}", plain.body);
    assert!(!page.body.contains("chap-secret-ac"), "{}", page.body);

    // The unauthenticated `/metrics` counts the refusal as an unknown MAC (its answer looked
    // so); the logged-in `/admin/metrics` keeps it apart. (404s while the snapshot did not yet
    // know the nodes are unknown MACs in both.)
    let sample = |text: &str, kind: &str| -> u64 {
        let name = format!("bootvol_boot_scripts_total{{kind=\"{kind}\",transport=\"http\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(name.as_str()))
            .unwrap_or_else(|| panic!("{name} missing from\n{text}"))
            .parse()
            .unwrap()
    };
    let public =
        agent.get(format!("{}/metrics", admin.base)).call().unwrap().body_mut().read_to_string();
    let public = public.unwrap();
    assert!(!public.contains("kind=\"refused\""), "{public}");
    assert_eq!(admin.call("GET", "/admin/metrics", None, &[]).status, 303, "needs a session");
    let full = admin.call("GET", "/admin/metrics", None, &[("Cookie", &cookie)]);
    assert_eq!(full.status, 200);
    assert_eq!(sample(&full.body, "refused"), 1, "{}", full.body);
    assert_eq!(sample(&public, "unknown"), sample(&full.body, "unknown") + 1, "{public}");

    let page = admin.call("GET", "/admin/activity", None, &[("Cookie", &cookie)]);
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("3 boots and 1 failure in the last hour"),
        "the activity page counts 3 boots and the refusal:\n{}",
        page.body
    );
    assert_eq!(page.body.matches("<g class=\"minute").count(), 60);
    assert_eq!(page.body.matches("class=\"minute failed\"").count(), 1, "{}", page.body);
    // The latest requests with their results, as on the node pages.
    assert!(
        page.body.contains("<td>act-chap</td><td>refused: outside a boot window</td>"),
        "{}",
        page.body
    );
    assert!(page.body.contains("<td>act-plain</td><td>served: iscsi</td>"), "{}", page.body);
    assert!(page.body.contains("<meta http-equiv=\"refresh\""));
    assert_eq!(page.header("x-frame-options"), Some("SAMEORIGIN"));
    assert!(page.header("content-security-policy").unwrap().contains("frame-ancestors 'self'"));
    let list = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]);
    assert!(list.body.contains("<iframe src=\"/admin/activity\""), "{}", list.body);
    assert_eq!(list.header("x-frame-options"), Some("DENY"), "only the activity page is framed");
}

/// The stored (unmasked) node record, read from the appliance's database.
fn stored(admin: &Admin, node: &str) -> bootvol_core::model::NodeRecord {
    let db = crate::support::open_db_ok(admin._dir.path()).unwrap();
    db.node_record(node).unwrap().expect("node stored")
}

/// A form posted with the session's cookie and CSRF token.
fn post(admin: &Admin, cookie: &str, csrf: &str, path: &str, fields: &[(&str, &str)]) -> Reply {
    let mut all = vec![("csrf", csrf)];
    all.extend_from_slice(fields);
    admin.call("POST", path, Some(&form(&all)), &[("Cookie", cookie)])
}

#[test]
fn forms_edit_and_delete_nodes_ports_connectors_and_targets() {
    use serde_json::json;
    let admin = Admin::start();
    let cookie = admin.login(PASSWORD).cookie();
    let csrf = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]).csrf();
    let created = post(
        &admin,
        &cookie,
        &csrf,
        "/admin/nodes",
        &[
            ("name", "edit-me"),
            ("storage_interface", "external"),
            ("capabilities", "iscsi_boot:true"),
            ("mac", "52:54:00:00:00:21"),
            ("connector_iqn", "iqn.2024-01.org.example.node:edit-me"),
            ("volume_id", "vol-21"),
            ("target_iqn", "iqn.2024-01.org.example.san:v21"),
            ("target_portal", "192.0.2.21:3260"),
            ("target_lun", "0"),
            ("auth_username", "u21"),
            ("auth_password", "chap-secret-21"),
        ],
    );
    assert_eq!(created.status, 303, "{}", created.body);
    let node = created.header("location").unwrap().to_owned();
    let uuid = node.rsplit('/').next().unwrap().to_owned();
    let record = stored(&admin, &uuid);
    let (port, connector, target) = (
        record.ports[0].uuid.clone(),
        record.volume_connectors[0].uuid.clone(),
        record.volume_targets[0].uuid.clone(),
    );
    let page = |admin: &Admin| admin.call("GET", &node, None, &[("Cookie", &cookie)]).body;
    let shown = page(&admin);
    assert!(shown.contains("Node created."), "{shown}");
    for form_action in [
        format!("/admin/nodes/{uuid}/edit"),
        format!("/admin/nodes/{uuid}/ports/{port}"),
        format!("/admin/nodes/{uuid}/connectors/{connector}/delete"),
        format!("/admin/nodes/{uuid}/targets/{target}"),
    ] {
        assert!(shown.contains(&format!("action=\"{form_action}\"")), "{form_action}: {shown}");
    }

    // The node: renamed, a BMC secret set, then saved again with the secret masked: kept.
    let edit = format!("{node}/edit");
    let fields = [
        ("name", "edited"),
        ("driver", "fake"),
        ("storage_interface", "external"),
        ("capabilities", "iscsi_boot:true"),
        ("driver_info", r#"{"fake_password": "bmc-secret-21", "fake_address": "10.0.0.21"}"#),
        ("instance_info", ""),
    ];
    let saved = post(&admin, &cookie, &csrf, &edit, &fields);
    assert_eq!(saved.status, 303, "{}", saved.body);
    let shown = page(&admin);
    assert!(shown.contains("Node saved.") && shown.contains("<h2>edited</h2>"), "{shown}");
    assert!(!shown.contains("bmc-secret-21"), "the BMC secret is masked on the page");
    let mut masked = fields;
    masked[4].1 = r#"{"fake_password": "******", "fake_address": "10.0.0.22"}"#;
    assert_eq!(post(&admin, &cookie, &csrf, &edit, &masked).status, 303);
    let info = stored(&admin, &uuid).node.driver_info;
    assert_eq!(info["fake_password"], json!("bmc-secret-21"));
    assert_eq!(info["fake_address"], json!("10.0.0.22"));
    // Nothing changed: no write, said so. Bad JSON: refused with the reason, nothing written.
    assert_eq!(post(&admin, &cookie, &csrf, &edit, &masked).status, 303);
    assert!(page(&admin).contains("Nothing changed."));
    let mut bad = masked;
    bad[4].1 = "{not json";
    let refused = post(&admin, &cookie, &csrf, &edit, &bad);
    assert_eq!(refused.status, 400);
    assert!(refused.body.contains("driver_info: not valid JSON"), "{}", refused.body);
    bad[4].1 = "{}";
    bad[1].1 = "warp-drive";
    let refused = post(&admin, &cookie, &csrf, &edit, &bad);
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(stored(&admin, &uuid).node.driver_info["fake_address"], json!("10.0.0.22"));

    // The port: a new MAC (in another notation), a refused one, a second port, deleted.
    let port_path = format!("{node}/ports/{port}");
    assert_eq!(
        post(&admin, &cookie, &csrf, &port_path, &[("address", "52-54-00-00-00-22")]).status,
        303
    );
    assert!(page(&admin).contains("value=\"52:54:00:00:00:22\""));
    let refused = post(&admin, &cookie, &csrf, &port_path, &[("address", "52:54:00:zz")]);
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("port:"), "{}", refused.body);
    let added =
        post(&admin, &cookie, &csrf, &format!("{node}/ports"), &[("address", "52:54:00:00:00:23")]);
    assert_eq!(added.status, 303);
    let second = stored(&admin, &uuid)
        .ports
        .iter()
        .find(|p| p.address.to_string() == "52:54:00:00:00:23")
        .unwrap()
        .uuid
        .clone();
    assert_eq!(
        post(&admin, &cookie, &csrf, &format!("{node}/ports/{second}/delete"), &[]).status,
        303
    );
    assert_eq!(stored(&admin, &uuid).ports.len(), 1);

    // Maintenance, with a reason (as the API checks it), then ended.
    let maintenance = format!("{node}/maintenance");
    let refused = post(
        &admin,
        &cookie,
        &csrf,
        &maintenance,
        &[("maintenance", "on"), ("reason", &"x".repeat(300))],
    );
    assert_eq!(refused.status, 400, "{}", refused.body);
    let set = post(
        &admin,
        &cookie,
        &csrf,
        &maintenance,
        &[("maintenance", "on"), ("reason", "swap NIC")],
    );
    assert_eq!(set.status, 303);
    let shown = page(&admin);
    assert!(
        shown.contains("Maintenance set.") && shown.contains("<td>yes: swap NIC</td>"),
        "{shown}"
    );
    assert!(stored(&admin, &uuid).node.maintenance);
    assert_eq!(post(&admin, &cookie, &csrf, &maintenance, &[("maintenance", "off")]).status, 303);
    assert!(page(&admin).contains("<td>no</td>"));
    assert!(!stored(&admin, &uuid).node.maintenance);

    // The target: a new portal, the CHAP secret sent back masked (kept), bad JSON refused.
    let target_path = format!("{node}/targets/{target}");
    let properties = json!({"target_iqn": "iqn.2024-01.org.example.san:v21",
        "target_portal": "192.0.2.99:3260", "target_lun": 0, "auth_method": "CHAP",
        "auth_username": "u21", "auth_password": "******"});
    let saved = post(
        &admin,
        &cookie,
        &csrf,
        &target_path,
        &[
            ("volume_type", "iscsi"),
            ("boot_index", "0"),
            ("volume_id", "vol-21"),
            ("properties", &properties.to_string()),
        ],
    );
    assert_eq!(saved.status, 303, "{}", saved.body);
    let shown = page(&admin);
    assert!(shown.contains("192.0.2.99:3260") && !shown.contains("chap-secret-21"), "{shown}");
    let stored_target = stored(&admin, &uuid).volume_targets[0].properties.clone();
    assert_eq!(stored_target["auth_password"], json!("chap-secret-21"));
    assert_eq!(stored_target["target_portal"], json!("192.0.2.99:3260"));
    let refused = post(
        &admin,
        &cookie,
        &csrf,
        &format!("{node}/targets"),
        &[("volume_type", "iscsi"), ("boot_index", "1"), ("volume_id", "v"), ("properties", "[]")],
    );
    assert_eq!(refused.status, 400);
    assert!(refused.body.contains("must be a JSON object"), "{}", refused.body);
    // A second target on the same boot index: Ironic's rule, with the API's message.
    let refused = post(
        &admin,
        &cookie,
        &csrf,
        &format!("{node}/targets"),
        &[("volume_type", "iscsi"), ("boot_index", "0"), ("volume_id", "v2"), ("properties", "{}")],
    );
    assert!(refused.status == 409 || refused.status == 400, "{}", refused.status);
    assert_eq!(stored(&admin, &uuid).volume_targets.len(), 1);

    // The connector: another id, then deleted; an unknown child or another node's is a 404.
    let connector_path = format!("{node}/connectors/{connector}");
    let saved = post(
        &admin,
        &cookie,
        &csrf,
        &connector_path,
        &[("type", "iqn"), ("connector_id", "iqn.2024-01.org.example.node:renamed")],
    );
    assert_eq!(saved.status, 303, "{}", saved.body);
    assert_eq!(
        stored(&admin, &uuid).volume_connectors[0].connector_id,
        "iqn.2024-01.org.example.node:renamed"
    );
    assert_eq!(post(&admin, &cookie, &csrf, &format!("{connector_path}/delete"), &[]).status, 303);
    assert!(stored(&admin, &uuid).volume_connectors.is_empty());
    assert_eq!(post(&admin, &cookie, &csrf, &format!("{connector_path}/delete"), &[]).status, 404);
    let other = post(&admin, &cookie, &csrf, "/admin/nodes", &[("name", "other")]);
    let other = other.header("location").unwrap().to_owned();
    assert_eq!(
        post(&admin, &cookie, &csrf, &format!("{other}/targets/{target}/delete"), &[]).status,
        404
    );
    assert_eq!(stored(&admin, &uuid).volume_targets.len(), 1);
    assert_eq!(post(&admin, &cookie, &csrf, &format!("{node}/widgets"), &[]).status, 404);
    // Without the token, nothing changes.
    let refused =
        admin.call("POST", &format!("{target_path}/delete"), Some(""), &[("Cookie", &cookie)]);
    assert_eq!(refused.status, 403);
    assert_eq!(stored(&admin, &uuid).volume_targets.len(), 1);

    // The target, then the node, deleted.
    assert_eq!(post(&admin, &cookie, &csrf, &format!("{target_path}/delete"), &[]).status, 303);
    // Deleting asks first (the server's rule): without the node's name nothing is deleted.
    let asked = post(&admin, &cookie, &csrf, &format!("{node}/delete"), &[]);
    assert_eq!(asked.status, 200, "{}", asked.body);
    assert!(asked.body.contains("Delete edited?"), "{}", asked.body);
    assert!(asked.body.contains("name=\"confirm\" value=\"edited\""), "{}", asked.body);
    assert_eq!(admin.call("GET", &node, None, &[("Cookie", &cookie)]).status, 200);
    let wrong = post(&admin, &cookie, &csrf, &format!("{node}/delete"), &[("confirm", "other")]);
    assert_eq!(wrong.status, 200, "another name is no confirmation");
    assert_eq!(admin.call("GET", &node, None, &[("Cookie", &cookie)]).status, 200);
    let deleted = post(&admin, &cookie, &csrf, &format!("{node}/delete"), &[("confirm", "edited")]);
    assert_eq!(deleted.status, 303);
    assert_eq!(deleted.header("location"), Some("/admin/"));
    let list = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]);
    assert!(list.body.contains("Node edited deleted."), "{}", list.body);
    assert_eq!(admin.call("GET", &node, None, &[("Cookie", &cookie)]).status, 404);
}

#[test]
fn noauth_opens_the_page_without_a_login_and_says_so() {
    let admin = Admin::start_with("noauth");
    let first = admin.call("GET", "/admin/", None, &[]);
    assert_eq!(first.status, 303);
    assert_eq!(first.header("location"), Some("/admin/login"));
    let login = admin.call("GET", "/admin/login", None, &[]);
    assert_eq!(login.status, 303);
    assert_eq!(login.header("location"), Some("/admin/"));
    let cookie = login.cookie();
    let list = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]);
    assert_eq!(list.status, 200);
    assert!(list.body.contains("Authentication is off"), "{}", list.body);
    // The tests' configuration has `[boot] script_secrets = "any"` (loopback clients): said too.
    assert!(list.body.contains("Scripts with secrets go to anyone"), "{}", list.body);
    assert!(!list.body.contains("Log out"));
    // Still no form without its token.
    let refused = admin.call(
        "POST",
        "/admin/nodes",
        Some(&form(&[("name", "sneaky")])),
        &[("Cookie", &cookie)],
    );
    assert_eq!(refused.status, 403);
    let made = post(&admin, &cookie, &list.csrf(), "/admin/nodes", &[("name", "open-node")]);
    assert_eq!(made.status, 303, "{}", made.body);
    // With http_basic (the default), the same page needs a log-in and says nothing of noauth.
    let locked = Admin::start();
    let page = locked.call("GET", "/admin/login", None, &[]);
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("Authentication is off"));
}

#[test]
fn the_nodes_page_shows_the_cinder_sync_status() {
    use bootvol_db::{SyncPass, SyncPassOutcome, SyncRunner};
    let admin = Admin::start();
    let cookie = admin.login(PASSWORD).cookie();
    let list = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]);
    assert!(list.body.contains("id=\"cinder-sync\""), "{}", list.body);
    assert!(list.body.contains("syncs every"), "{}", list.body);
    // A pass recorded by another process (`bootvol sync`) on the same database, with drift and
    // an error: the page shows it as it is, the problems included.
    let db = crate::support::open_db_ok(admin._dir.path()).unwrap();
    let clean = SyncPass {
        ran_by: SyncRunner::Cli,
        started_at: 1_790_000_000,
        finished_at: 1_790_000_001,
        outcome: SyncPassOutcome::Ok,
        checked: 2,
        updated: 1,
        drifted: 0,
        errors: 0,
        message: String::new(),
    };
    db.record_sync_pass(&clean).unwrap();
    db.record_sync_pass(&SyncPass {
        started_at: 1_790_000_100,
        finished_at: 1_790_000_102,
        outcome: SyncPassOutcome::Partial,
        drifted: 1,
        errors: 1,
        message: "drift: volume vol-7: the volume no longer exists in Cinder\nerror: <b>".into(),
        ..clean
    })
    .unwrap();
    let list = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]);
    let at = |t: u64| bootvol_core::timefmt::format_unix(t);
    for expected in [
        "<span id=\"sync-verdict\" class=\"bad\">errors</span>".to_owned(),
        format!("finished {} (by bootvol sync)", at(1_790_000_102)),
        "2 volume(s) checked, 1 updated, 1 drifted, 1 error(s)".to_owned(),
        at(1_790_000_001),
        "the volume no longer exists in Cinder".to_owned(),
        "error: &lt;b&gt;".to_owned(),
    ] {
        assert!(list.body.contains(&expected), "{expected} missing: {}", list.body);
    }
}

/// A first start with `http_basic` and no user file: the real binary writes a one-time password
/// to `[api] first_password_files` (here two files standing in for the console and the login
/// prompt's issue file), only its bcrypt to the htpasswd file (0600), never the password to its
/// log. The operator logs in with it and sets a real password on the admin page: refused
/// without CSRF, with a wrong current password, a short or mistyped new one; then the file is
/// rewritten, the running API takes the new password and refuses the old one (no restart), the
/// issue file is gone, and no answer or log line ever held either password.
#[test]
#[allow(clippy::disallowed_methods)] // tests run the real binary
fn a_one_time_password_on_the_console_then_the_admin_page_sets_the_real_one() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (htpasswd, console, issue) =
        (dir.path().join("htpasswd"), dir.path().join("console"), dir.path().join("first.issue"));
    let text = format!(
        "{}[api]\nlisten = \"127.0.0.1:0\"\nhttp_basic_auth_user_file = \"{}\"\nfirst_password_files = [\"{}\", \"{}\"]\n",
        config_text(dir.path())
            .replace("[http]\n", "[http]\nlisten = \"127.0.0.1:0\"\n")
            .replace("[tftp]\n", "[tftp]\nlisten = \"127.0.0.1:0\"\n"),
        htpasswd.display(),
        console.display(),
        issue.display()
    );
    std::fs::write(dir.path().join("bootvol.toml"), text).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_bootvol"))
        .arg("--config")
        .arg(dir.path().join("bootvol.toml"))
        .arg("serve")
        .env("RUST_LOG", "debug")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let (lines, stderr) = (std::sync::Arc::clone(&log), child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains(" serving ") {
                let _ = tx.send(line.clone());
            }
            lines.lock().unwrap().push_str(&(line + "\n"));
        }
    });
    let serving = rx.recv_timeout(Duration::from_secs(20)).expect("serve started");
    let api = serving.split_whitespace().find_map(|f| f.strip_prefix("api=")).unwrap().to_owned();
    let admin = Admin {
        base: format!("http://{api}"),
        boot: String::new(),
        shutdown: crate::support::ServeGuard::unstarted(),
        _dir: tempfile::tempdir().unwrap(),
    };

    let shown = std::fs::read_to_string(&console).unwrap();
    assert_eq!(std::fs::read_to_string(&issue).unwrap().replace("\\4", "<this box>"), shown);
    let one_time = shown
        .lines()
        .find_map(|l| l.trim().strip_prefix("one-time password: "))
        .unwrap_or_else(|| panic!("no password shown: {shown}"))
        .to_owned();
    assert!(one_time.len() >= 12, "{one_time}");
    let stored = std::fs::read_to_string(&htpasswd).unwrap();
    assert!(stored.contains("admin:$2b$12$") && !stored.contains(&one_time), "{stored}");
    assert_eq!(std::fs::metadata(&htpasswd).unwrap().permissions().mode() & 0o777, 0o600);
    let v1 = |password: &str| {
        let agent: ureq::Agent =
            ureq::Agent::config_builder().http_status_as_error(false).build().into();
        agent
            .get(format!("{}/v1/nodes", admin.base))
            .header("Authorization", &format!("Basic {}", basic("admin", password)))
            .call()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(v1(&one_time), 200);

    let (cookie, csrf) = admin.login_form();
    let logged = admin.call(
        "POST",
        "/admin/login",
        Some(&form(&[("csrf", &csrf), ("username", "admin"), ("password", &one_time)])),
        &[("Cookie", &cookie)],
    );
    assert_eq!(logged.status, 303, "{}", logged.body);
    let cookie = logged.cookie();
    let page = admin.call("GET", "/admin/password", None, &[("Cookie", &cookie)]);
    assert_eq!(page.status, 200);
    assert!(page.body.contains("name=\"current\""), "{}", page.body);
    let csrf = page.csrf();
    let new = "correct horse battery";
    let mut bodies = Vec::new();
    let mut post = |fields: &[(&str, &str)], expect: u16| {
        let reply =
            admin.call("POST", "/admin/password", Some(&form(fields)), &[("Cookie", &cookie)]);
        assert_eq!(reply.status, expect, "{fields:?}: {}", reply.body);
        bodies.push(reply.body.clone());
        reply
    };
    post(&[("current", &one_time), ("new", new), ("again", new)], 403);
    post(&[("csrf", "0"), ("current", &one_time), ("new", new), ("again", new)], 403);
    let wrong = post(&[("csrf", &csrf), ("current", "nope"), ("new", new), ("again", new)], 401);
    assert!(wrong.body.contains("current password is wrong"), "{}", wrong.body);
    let short = post(
        &[("csrf", &csrf), ("current", &one_time), ("new", "short1"), ("again", "short1")],
        400,
    );
    assert!(short.body.contains("shorter than 12"), "{}", short.body);
    post(&[("csrf", &csrf), ("current", &one_time), ("new", new), ("again", "other")], 400);
    assert_eq!(v1(&one_time), 200, "refused forms changed nothing");
    let done = post(&[("csrf", &csrf), ("current", &one_time), ("new", new), ("again", new)], 303);
    assert_eq!(done.header("location"), Some("/admin/"));
    // The session that changed it goes on under a new cookie; the old one ended with the entry.
    let next = admin.call("GET", "/admin/", None, &[("Cookie", &done.cookie())]);
    assert!(next.body.contains("Password changed."), "{}", next.body);
    assert_eq!(admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]).status, 303);
    bodies.push(next.body);

    assert_eq!(v1(new), 200, "the running API took the new password");
    assert_eq!(v1(&one_time), 401, "and refuses the one-time one");
    let stored = std::fs::read_to_string(&htpasswd).unwrap();
    assert!(!stored.contains("one-time") && !stored.contains(new), "{stored}");
    assert_eq!(std::fs::metadata(&htpasswd).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(!issue.exists(), "the login prompt no longer shows the one-time password");
    for body in &bodies {
        assert!(!body.contains(new) && !body.contains(&one_time), "a page echoed a password");
    }
    let _ = child.kill();
    let _ = child.wait();
    let log = log.lock().unwrap();
    assert!(log.contains("one-time password was generated"), "{log}");
    assert!(log.contains("admin password changed"), "{log}");
    assert!(!log.contains(&one_time) && !log.contains(new), "a password in the log: {log}");
}

/// 500 nodes (as `bootvol apply` writes them), one deploy failed, two in maintenance: the list
/// shows 50 rows with "1–50 of 500", counts what needs attention at the top with links to the
/// filtered list, and a search by MAC, typed in any common form, finds the one node.
#[test]
fn a_rack_of_500_nodes_search_by_mac_pages_and_counts() {
    let admin = Admin::start();
    let cookie = admin.login(PASSWORD).cookie();
    seed_rack(&admin);
    let get = |path: &str| admin.call("GET", path, None, &[("Cookie", &cookie)]);

    let list = get("/admin/");
    assert_eq!(list.status, 200);
    let rows = list.body.matches("name=\"node\" value=").count();
    assert_eq!(rows, 50, "one page of 50 rows");
    assert!(list.body.contains("1–50 of 500"), "{}", list.body);
    let started = Instant::now();
    let timed = get("/admin/");
    let took = started.elapsed();
    eprintln!("nodes list with 500 nodes: {} bytes, {rows} rows, {took:?}", list.body.len());
    assert!(timed.body.len() <= 60_000, "at most 60 KB: {} bytes", timed.body.len());
    // What needs attention, at the top, before the list.
    let attention = list.body.find("id=\"attention\"").unwrap();
    assert!(attention < list.body.find("id=\"node-list\"").unwrap());
    for counted in [
        "href=\"/admin/?state=deploy%20failed\"><span class=\"n\">1</span> deploy failed",
        "href=\"/admin/?maintenance=1\"><span class=\"n\">2</span> in maintenance",
    ] {
        assert!(list.body.contains(counted), "{counted}: {}", list.body);
    }
    // The long error is one line in the list.
    assert!(!list.body.contains(&" and more".repeat(20)));
    // Its page says so in a red banner, with the whole error.
    let failed_page = get("/admin/nodes/rack-321");
    assert!(
        failed_page.body.contains("<p class=\"banner\" role=\"alert\" id=\"failure\">Deploy failed: deploy timed out and more"),
        "{}",
        failed_page.body
    );
    assert!(
        failed_page.body.contains(&" and more".repeat(100)),
        "the whole error on the node page"
    );
    let failed_list = get("/admin/?state=deploy%20failed");
    assert!(failed_list.body.contains(">rack-321</a>") && failed_list.body.contains("1–1 of 1"));
    let page = get("/admin/?page=10");
    assert!(page.body.contains("451–500 of 500") && page.body.contains(">rack-499</a>"));
    assert!(page.body.contains("rel=\"prev\""), "{}", page.body);
    let maintenance = get("/admin/?maintenance=1");
    assert!(maintenance.body.contains("1–2 of 2 (of 500 nodes)"), "{}", maintenance.body);
    // The nodes that cannot boot their volume, as the boot snapshot serves them (it may still
    // be catching up with the seeding: wait for it): counted at the top, listed by "only
    // problems" and by a search for "not bootable", each with its reason on the row.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut list = get("/admin/");
    while !list.body.contains("<span class=\"n\">7</span> not bootable") {
        assert!(Instant::now() < deadline, "not counted: {}", list.body);
        std::thread::sleep(Duration::from_millis(100));
        list = get("/admin/");
    }
    let problems = get("/admin/?problem=1");
    assert!(problems.body.contains("1–10 of 10"), "{}", problems.body);
    let unbootable = get("/admin/?q=not%20bootable");
    assert!(unbootable.body.contains("1–7 of 7"), "{}", unbootable.body);
    for i in UNBOOTABLE {
        let row = &unbootable.body[unbootable.body.find(&format!(">rack-{i}</a>")).unwrap()..];
        let row = &row[..row.find("</tr>").unwrap()];
        let (scenario, why) = match i {
            100..=102 => ("invalid", "volume target boot_index 0"),
            103..=105 => ("invalid", "no volume target with boot_index 0"),
            _ => ("not-deployed", "no volume target with boot_index 0"),
        };
        assert!(
            row.contains(&format!(
                "<td class=\"scenario\">{scenario} <span class=\"bad\">not bootable: "
            )),
            "rack-{i}: {row}"
        );
        assert!(row.contains(why), "rack-{i}: {row}");
    }
    // Not the scenario the volume would have: the one the snapshot serves (the default).
    assert!(!unbootable.body.contains("<td class=\"scenario\">iscsi"), "{}", unbootable.body);
    let script = ureq::get(format!("{}/boot/52:54:00:10:00:64.ipxe", admin.boot))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(!script.contains("sanboot"), "rack-100 is served the default script: {script}");
    let deployed = get("/admin/nodes/rack-100");
    assert!(
        deployed.body.contains("id=\"boot-problem\">Not bootable: this node is served the default script, not its volume: volume target boot_index 0"),
        "{}",
        deployed.body
    );
    let available = get("/admin/nodes/rack-106");
    assert!(
        available.body.contains("id=\"boot-problem\">Not bootable: once deployed, this node would get the default script instead of its volume: capability iscsi_boot is true"),
        "{}",
        available.body
    );
    assert!(
        !get("/admin/nodes/rack-200").body.contains("boot-problem"),
        "a bootable node has no banner"
    );

    // rack-300 has 52:54:00:10:01:2c: found from a DHCP log's form, a switch's, bare hex.
    for typed in ["52:54:00:10:01:2c", "52-54-00-10-01-2C", "5254.0010.012c", "52540010012c"] {
        let found = get(&format!("/admin/?q={}", super_encode(typed)));
        assert!(found.body.contains("1–1 of 1 (of 500 nodes)"), "{typed}: {}", found.body);
        assert!(found.body.contains(">rack-300</a>"), "{typed}");
        assert!(found.body.contains("<code>52:54:00:10:01:2c</code>"), "the MAC column");
    }
    // Sorted by name, descending: rack-499 first.
    let sorted = get("/admin/?sort=name&dir=desc");
    let first = sorted.body.find(">rack-499</a>").unwrap();
    assert!(first < sorted.body.find(">rack-498</a>").unwrap());
}

/// 500 nodes `rack-000`..`rack-499` (MAC `52:54:00:10:<i / 256>:<i % 256>`), as `bootvol
/// apply` writes them: `rack-007` and `rack-008` in maintenance, `rack-321` deploy failed with
/// a long error; seven that cannot boot their volume ([`UNBOOTABLE`]): `rack-100`..`rack-102`
/// deployed with an iSCSI boot target without its connection info (the scenario says iscsi,
/// the script served is the default one), `rack-103`..`rack-105` deployed with `iscsi_boot`
/// and no boot target, `rack-106` available likewise (it would get the default script once
/// deployed).
fn seed_rack(admin: &Admin) {
    let nodes: Vec<serde_json::Value> = (0..500)
        .map(|i| {
            let mut node = serde_json::json!({"name": format!("rack-{i:03}"), "driver": "fake",
                "maintenance": i == 7 || i == 8,
                "ports": [{"address": format!("52:54:00:10:{:02x}:{:02x}", i / 256, i % 256)}]});
            if UNBOOTABLE.contains(&i) {
                node["storage_interface"] = "external".into();
                node["provision_state"] = if i == 106 { "available" } else { "active" }.into();
                node["properties"] = serde_json::json!({"capabilities": "iscsi_boot:true"});
                node["volume_connectors"] = serde_json::json!([{"type": "iqn",
                    "connector_id": format!("iqn.2024-01.org.example.node:rack-{i:03}")}]);
                if i <= 102 {
                    node["volume_targets"] = serde_json::json!([{"volume_type": "iscsi",
                        "boot_index": 0, "volume_id": format!("vol-rack-{i:03}"), "properties": {}}]);
                }
            }
            node
        })
        .collect();
    let config = Config::from_toml(&config_text(admin._dir.path()), "test").unwrap();
    let specs = bootvol_core::inventory::parse(
        &serde_json::json!({ "nodes": nodes }).to_string(),
        bootvol_core::inventory::Format::Json,
        &config,
    )
    .unwrap();
    let mut db = crate::support::open_db(admin._dir.path());
    db.apply_inventory(&specs, false).unwrap();
    let mut failed = db.node_record("rack-321").unwrap().unwrap();
    failed.node.provision_state = bootvol_core::model::ProvisionState::DeployFailed;
    failed.node.last_error = Some(format!("deploy timed out{}", " and more".repeat(100)));
    db.save_node_runtime(&failed.node).unwrap();
}

/// The seeded nodes of [`seed_rack`] that cannot boot their volume.
const UNBOOTABLE: [usize; 7] = [100, 101, 102, 103, 104, 105, 106];

fn super_encode(text: &str) -> String {
    encode(text)
}

/// Power off, reboot, undeploy and delete need `confirm=<node name>`: without it, the POST
/// changes nothing and answers the confirmation step; the same for bulk actions.
#[test]
fn power_off_without_confirmation_leaves_the_node_on() {
    let admin = Admin::start();
    let cookie = admin.login(PASSWORD).cookie();
    let csrf = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]).csrf();
    let created = post(&admin, &cookie, &csrf, "/admin/nodes", &[("name", "careful")]);
    let node = created.header("location").unwrap().to_owned();
    let power_is = |want: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let page = admin.call("GET", &node, None, &[("Cookie", &cookie)]);
            if page.body.contains(&format!("<th>Power</th><td>{want}</td>")) {
                return page;
            }
            assert!(Instant::now() < deadline, "never {want}: {}", page.body);
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let uuid = node.rsplit('/').next().unwrap().to_owned();
    // An action that starts records its target before the form is answered (Conductor::start),
    // so right after a refused form the node shows none: nothing started.
    let untouched = || {
        let shown = admin.api_get(&format!("/v1/nodes/{uuid}"));
        assert_eq!(shown["power_state"], "power on", "{shown}");
        assert_eq!(shown["target_power_state"], serde_json::Value::Null, "{shown}");
        assert_eq!(shown["reservation"], serde_json::Value::Null, "{shown}");
    };
    let on = post(&admin, &cookie, &csrf, &format!("{node}/power"), &[("target", "power on")]);
    assert_eq!(on.status, 303, "power on needs no confirmation");
    let page = power_is("power on");
    let deadline = Instant::now() + Duration::from_secs(10);
    while admin.api_get(&format!("/v1/nodes/{uuid}"))["reservation"] != serde_json::Value::Null {
        assert!(Instant::now() < deadline, "the power-on action never released the node");
        std::thread::sleep(Duration::from_millis(20));
    }
    untouched();
    // Only what fits: powered on, no "Power on" button; "Power off…" asks first.
    assert!(!page.body.contains(">Power on</button>"), "{}", page.body);
    assert!(page.body.contains(">Power off…</button>"), "{}", page.body);

    let asked = post(&admin, &cookie, &csrf, &format!("{node}/power"), &[("target", "power off")]);
    assert_eq!(asked.status, 200, "{}", asked.body);
    assert!(asked.body.contains("Power off careful?"), "{}", asked.body);
    assert!(asked.body.contains("Nothing has been done yet"), "{}", asked.body);
    assert!(asked.body.contains("name=\"confirm\" value=\"careful\""), "{}", asked.body);
    untouched();
    let wrong = post(
        &admin,
        &cookie,
        &csrf,
        &format!("{node}/power"),
        &[("target", "power off"), ("confirm", "someone-else")],
    );
    assert_eq!(wrong.status, 200);
    untouched();

    // Bulk: the same rule, naming the nodes.
    let bulk = |extra: &[(&str, &str)]| {
        let mut fields =
            vec![("node", uuid.as_str()), ("action", "power off"), ("back", "/admin/")];
        fields.extend_from_slice(extra);
        post(&admin, &cookie, &csrf, "/admin/bulk", &fields)
    };
    let asked = bulk(&[]);
    assert_eq!(asked.status, 200, "{}", asked.body);
    assert!(asked.body.contains("these 1 node(s): careful"), "{}", asked.body);
    untouched();
    let done = bulk(&[("confirm", "careful")]);
    assert_eq!(done.status, 303, "{}", done.body);
    assert_eq!(done.header("location"), Some("/admin/"));
    let list = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]);
    assert!(list.body.contains("Power off started on 1 node(s): careful."), "{}", list.body);
    power_is("power off");
}

/// A refused creation shows the form again with what was typed (not the secrets), the message
/// beside the field it is about, as a failure.
#[test]
fn a_refused_create_re_renders_the_typed_values() {
    let admin = Admin::start();
    let cookie = admin.login(PASSWORD).cookie();
    let csrf = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]).csrf();
    let fields = [
        ("name", "typed-node"),
        ("driver", "redfish"),
        ("capabilities", "iscsi_boot:true"),
        ("bmc_address", "10.0.0.5"),
        ("bmc_username", "root"),
        ("bmc_password", "bmc-secret-typed"),
        ("mac", "52:54:00:zz:00:01"),
        ("connector_iqn", "iqn.2024-01.org.example.node:typed"),
        ("volume_id", "vol-typed"),
        ("target_iqn", "iqn.2024-01.org.example.san:typed"),
        ("target_portal", "192.0.2.7:3260"),
        ("auth_username", "chapuser"),
        ("auth_password", "chap-secret-typed"),
    ];
    let refused = post(&admin, &cookie, &csrf, "/admin/nodes", &fields);
    assert_eq!(refused.status, 400, "{}", refused.body);
    for kept in [
        "value=\"typed-node\"",
        "value=\"10.0.0.5\"",
        "value=\"root\"",
        "value=\"52:54:00:zz:00:01\"",
        "value=\"iqn.2024-01.org.example.node:typed\"",
        "value=\"vol-typed\"",
        "value=\"192.0.2.7:3260\"",
        "<option value=\"redfish\" selected>redfish</option>",
        "<details id=\"create\" open>",
    ] {
        assert!(refused.body.contains(kept), "{kept} lost: {}", refused.body);
    }
    // The message is beside the MAC field, right after it.
    let mac = refused.body.find("name=\"mac\"").unwrap();
    let message = refused.body.find("id=\"error-mac\"").expect("the message by the field");
    assert!(message > mac && message - mac < 600, "{}", refused.body);
    assert!(refused.body.contains("not a MAC address"), "{}", refused.body);
    assert!(
        !refused.body.contains("chap-secret-typed") && !refused.body.contains("bmc-secret-typed")
    );
    assert_eq!(
        admin.call("GET", "/admin/nodes/typed-node", None, &[("Cookie", &cookie)]).status,
        404
    );

    // Fixed, it goes through; with a target and no storage interface, the node gets external
    // (the default, noop, could not boot its volume); the BMC fields land in driver_info.
    let mut fixed = fields.to_vec();
    fixed[6] = ("mac", "52:54:00:77:00:01");
    let created = post(&admin, &cookie, &csrf, "/admin/nodes", &fixed);
    assert_eq!(created.status, 303, "{}", created.body);
    let page = admin.call("GET", created.header("location").unwrap(), None, &[("Cookie", &cookie)]);
    assert!(page.body.contains("Storage interface: external"), "{}", page.body);
    assert!(page.body.contains("<tr><th>Storage interface</th><td>external</td></tr>"));
    assert!(page.body.contains("value=\"10.0.0.5\""), "{}", page.body);
    assert!(page.body.contains("stored; leave empty to keep it"), "{}", page.body);
    assert!(!page.body.contains("bmc-secret-typed"));
    let db = crate::support::open_db(admin._dir.path());
    let record = db.node_record("typed-node").unwrap().unwrap();
    assert_eq!(record.node.driver_info["redfish_password"], "bmc-secret-typed");
    assert_eq!(record.node.driver_info["redfish_address"], "10.0.0.5");

    // A node that could not boot its volume (noop chosen, or no iscsi_boot) is said at once,
    // as a failure.
    let noop = post(
        &admin,
        &cookie,
        &csrf,
        "/admin/nodes",
        &[
            ("name", "noop-node"),
            ("storage_interface", "noop"),
            ("volume_id", "vol-noop"),
            ("target_iqn", "iqn.2024-01.org.example.san:noop"),
            ("target_portal", "192.0.2.8:3260"),
        ],
    );
    assert_eq!(noop.status, 303, "{}", noop.body);
    let shown = admin.call("GET", noop.header("location").unwrap(), None, &[("Cookie", &cookie)]);
    assert!(
        shown.body.contains("role=\"alert\">Node created, but it cannot boot its volume: its storage interface is noop"),
        "{}",
        shown.body
    );

    // An edit with a JSON typo keeps what was typed, and the stored password stays when the
    // field is left empty.
    let edit = format!("/admin/nodes/{}/edit", record.node.uuid);
    let typo = post(
        &admin,
        &cookie,
        &csrf,
        &edit,
        &[
            ("name", "typed-node"),
            ("driver", "redfish"),
            ("bmc_address", "10.0.0.9"),
            ("bmc_password", ""),
            (
                "driver_info",
                "{\"redfish_password\": \"json-secret-9\", \"redfish_verify_ca\": fals",
            ),
        ],
    );
    assert_eq!(typo.status, 400, "{}", typo.body);
    assert!(!typo.body.contains("json-secret-9"), "a secret typed in JSON is not shown again");
    assert!(
        typo.body.contains(
            "{&quot;redfish_password&quot;: &quot;******&quot;, &quot;redfish_verify_ca&quot;: fals"
        ),
        "the typo kept as typed, its secret masked: {}",
        typo.body
    );
    assert!(typo.body.contains("value=\"10.0.0.9\""), "{}", typo.body);
    assert!(typo.body.contains("<details id=\"edit-node\" open>"));
    let saved = post(
        &admin,
        &cookie,
        &csrf,
        &edit,
        &[
            ("name", "typed-node"),
            ("driver", "redfish"),
            ("bmc_address", "10.0.0.9"),
            ("bmc_username", "root"),
            ("bmc_password", ""),
            ("driver_info", "{}"),
        ],
    );
    assert_eq!(saved.status, 303, "{}", saved.body);
    let record = db.node_record("typed-node").unwrap().unwrap();
    assert_eq!(record.node.driver_info["redfish_password"], "bmc-secret-typed", "kept");
    assert_eq!(record.node.driver_info["redfish_address"], "10.0.0.9");
}

/// A pass that found drift is a warning, not "ok", and not a clean pass; the drifted volume is
/// linked to its node and marked on the node's target row.
#[test]
fn the_sync_panel_warns_of_drift() {
    use bootvol_db::{SyncPass, SyncPassOutcome, SyncRunner};
    use serde_json::json;
    let admin = Admin::start();
    let cookie = admin.login(PASSWORD).cookie();
    let (status, node) = admin.api("/v1/nodes", json!({"name": "drifty", "driver": "fake"}));
    assert_eq!(status, 201, "{node}");
    let (status, _) = admin.api(
        "/v1/volume/targets",
        json!({"node_uuid": node["uuid"], "volume_type": "iscsi", "boot_index": 0,
               "volume_id": "vol-7", "properties": {"target_iqn": "iqn.2024-01.org.example.san:v7",
               "target_portal": "192.0.2.5:3260", "target_lun": 0}}),
    );
    assert_eq!(status, 201);
    let db = crate::support::open_db(admin._dir.path());
    let pass = SyncPass {
        ran_by: SyncRunner::Serve,
        started_at: 1_790_000_000,
        finished_at: 1_790_000_001,
        outcome: SyncPassOutcome::Ok,
        checked: 2,
        updated: 0,
        drifted: 1,
        errors: 0,
        message: "drift: volume vol-7: the volume no longer exists in Cinder".into(),
    };
    db.record_sync_pass(&pass).unwrap();
    let list = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]);
    assert!(
        list.body.contains("<span id=\"sync-verdict\" class=\"warn\">drift</span>"),
        "{}",
        list.body
    );
    assert!(!list.body.contains("class=\"good\">ok<"), "never ok with drift");
    assert!(
        list.body.contains("<th>Last clean pass</th><td>never (not this one)"),
        "{}",
        list.body
    );
    let uuid = node["uuid"].as_str().unwrap();
    assert!(
        list.body.contains(&format!("— node <a href=\"/admin/nodes/{uuid}\">drifty</a>")),
        "{}",
        list.body
    );
    assert!(list.body.contains("<span class=\"n\">1</span> with volume drift"), "{}", list.body);
    let page = admin.call("GET", "/admin/nodes/drifty", None, &[("Cookie", &cookie)]);
    assert!(page.body.contains("drift: the last Cinder sync found this volume"), "{}", page.body);
    // A clean pass after: ok, and the clean pass is this one.
    db.record_sync_pass(&SyncPass {
        drifted: 0,
        message: String::new(),
        finished_at: 1_790_000_100,
        ..pass
    })
    .unwrap();
    let list = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]);
    assert!(list.body.contains("class=\"good\">ok</span>"), "{}", list.body);
}

/// The session signing key is kept in the database: after a restart, an open page's form
/// still works (the same cookie and CSRF token); a session logged out stays out; a form
/// posted without a live session does nothing and says so, and the log-in returns to its page.
#[test]
fn a_restart_keeps_the_session() {
    let admin = Admin::start();
    let cookie = admin.login(PASSWORD).cookie();
    let gone = admin.login(PASSWORD).cookie();
    let csrf = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]).csrf();
    let gone_csrf = admin.call("GET", "/admin/", None, &[("Cookie", &gone)]).csrf();
    let created = post(&admin, &cookie, &csrf, "/admin/nodes", &[("name", "before")]);
    let node = created.header("location").unwrap().to_owned();
    assert_eq!(post(&admin, &gone, &gone_csrf, "/admin/logout", &[]).status, 303);

    let admin = admin.restart();
    let page = admin.call("GET", &node, None, &[("Cookie", &cookie)]);
    assert_eq!(page.status, 200, "the session survived: {}", page.body);
    let set =
        post(&admin, &cookie, &csrf, &format!("{node}/maintenance"), &[("maintenance", "on")]);
    assert_eq!(set.status, 303, "the open page's form worked: {}", set.body);
    assert!(
        admin.call("GET", &node, None, &[("Cookie", &cookie)]).body.contains("Maintenance set.")
    );
    assert_eq!(admin.call("GET", "/admin/", None, &[("Cookie", &gone)]).status, 303, "logged out");

    // A form from a session that is no more: nothing done, said so, back to the page after.
    let refused =
        post(&admin, &gone, &gone_csrf, &format!("{node}/maintenance"), &[("maintenance", "off")]);
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert!(refused.body.contains("nothing was done"), "{}", refused.body);
    let escaped = node.replace('/', "&#x2f;");
    assert!(
        refused.body.contains(&format!("name=\"next\" value=\"{escaped}\"")),
        "{}",
        refused.body
    );
    let db = crate::support::open_db(admin._dir.path());
    assert!(db.node_record("before").unwrap().unwrap().node.maintenance, "nothing was done");
    let (anonymous, login_csrf) = (refused.cookie(), refused.csrf());
    let back = admin.call(
        "POST",
        "/admin/login",
        Some(&form(&[
            ("csrf", &login_csrf),
            ("username", USER),
            ("password", PASSWORD),
            ("next", &node),
        ])),
        &[("Cookie", &anonymous)],
    );
    assert_eq!(back.status, 303, "{}", back.body);
    assert_eq!(back.header("location"), Some(node.as_str()));
    // A page asked without a session comes back after the log-in too; never off the site.
    let asked = admin.call("GET", &node, None, &[]);
    assert!(asked.header("location").unwrap().starts_with("/admin/login?next=%2Fadmin%2Fnodes%2F"));
    let outside = admin.call("GET", "/admin/login?next=//evil.example/", None, &[]);
    assert!(outside.body.contains("name=\"next\" value=\"&#x2f;admin&#x2f;\""), "{}", outside.body);
}

/// Writes `text` as the htpasswd file of `admin`, as an operator's `htpasswd -B` does (a new
/// file renamed over the old one).
fn rewrite_htpasswd(admin: &Admin, text: &str) {
    let path = admin._dir.path().join("htpasswd");
    let next = admin._dir.path().join("htpasswd.new");
    std::fs::write(&next, text).unwrap();
    std::fs::rename(&next, &path).unwrap();
}

/// A session belongs to the user's htpasswd entry as it was at log-in: a password change (on
/// the admin page, or by rewriting the file) ends every other session of that user at once,
/// the session that changed it gets a fresh cookie, and after the user's removal from the file
/// an old session can no longer set maintenance; a restart revives none of them (issue 22,
/// finding 8).
#[test]
fn a_password_change_or_the_users_removal_ends_their_sessions() {
    let admin = Admin::start();
    let first = admin.login(PASSWORD).cookie();
    let other = admin.login(PASSWORD).cookie();
    let csrf = admin.call("GET", "/admin/", None, &[("Cookie", &first)]).csrf();
    let other_csrf = admin.call("GET", "/admin/", None, &[("Cookie", &other)]).csrf();
    let created = post(&admin, &first, &csrf, "/admin/nodes", &[("name", "revoked")]);
    let node = created.header("location").unwrap().to_owned();

    // The password changed on the admin page, from `first`.
    let page = admin.call("GET", "/admin/password", None, &[("Cookie", &first)]);
    let new = "correct horse battery";
    let done = admin.call(
        "POST",
        "/admin/password",
        Some(&form(&[("csrf", &page.csrf()), ("current", PASSWORD), ("new", new), ("again", new)])),
        &[("Cookie", &first)],
    );
    assert_eq!(done.status, 303, "{}", done.body);
    let refused =
        post(&admin, &other, &other_csrf, &format!("{node}/maintenance"), &[("maintenance", "on")]);
    assert_eq!(refused.status, 401, "the other session ended: {}", refused.body);
    for old in [&first, &other] {
        assert_eq!(admin.call("GET", "/admin/", None, &[("Cookie", old)]).status, 303, "{old}");
    }
    let renewed = done.cookie();
    assert_ne!(renewed, first);
    let next = admin.call("GET", "/admin/", None, &[("Cookie", &renewed)]);
    assert!(next.body.contains("Password changed."), "{}", next.body);

    // The file rewritten by hand (another password): the renewed session ends too.
    let hand = "typed by hand, not on the page";
    rewrite_htpasswd(&admin, &format!("{USER}:{}\n", bcrypt::hash(hand, 4).unwrap()));
    assert_eq!(admin.call("GET", "/admin/", None, &[("Cookie", &renewed)]).status, 303);

    // Logged in again with it; then the user is removed from the file (another one kept).
    let (cookie, login_csrf) = admin.login_form();
    let logged = admin.call(
        "POST",
        "/admin/login",
        Some(&form(&[("csrf", &login_csrf), ("username", USER), ("password", hand)])),
        &[("Cookie", &cookie)],
    );
    assert_eq!(logged.status, 303, "{}", logged.body);
    let last = logged.cookie();
    let last_csrf = admin.call("GET", "/admin/", None, &[("Cookie", &last)]).csrf();
    rewrite_htpasswd(&admin, &format!("someone-else:{}\n", bcrypt::hash("x", 4).unwrap()));
    let refused =
        post(&admin, &last, &last_csrf, &format!("{node}/maintenance"), &[("maintenance", "on")]);
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert!(refused.body.contains("nothing was done"), "{}", refused.body);
    let db = crate::support::open_db(admin._dir.path());
    assert!(!db.node_record("revoked").unwrap().unwrap().node.maintenance, "nothing was done");

    // A restart (the user back, with the hand-typed password): no old session comes back.
    rewrite_htpasswd(&admin, &format!("{USER}:{}\n", bcrypt::hash(new, 4).unwrap()));
    let admin = admin.restart();
    for old in [&first, &other, &renewed, &last] {
        assert_eq!(admin.call("GET", "/admin/", None, &[("Cookie", old)]).status, 303, "{old}");
    }
    let refused =
        post(&admin, &last, &last_csrf, &format!("{node}/maintenance"), &[("maintenance", "on")]);
    assert_eq!(refused.status, 401, "{}", refused.body);
    let db = crate::support::open_db(admin._dir.path());
    assert!(!db.node_record("revoked").unwrap().unwrap().node.maintenance);
}

/// Throttling is per (address, user): failures for one user from an address (a TLS proxy that
/// every operator shares) lock that user there, with back-off, and not another operator whose
/// password is right, on the admin page and on the API alike (issue 22, finding 12).
#[test]
fn a_locked_user_does_not_lock_out_another_from_the_same_address() {
    let admin = Admin::start();
    const SECOND: &str = "second-operator";
    const SECOND_PASSWORD: &str = "another s3cret";
    let line = |u: &str, p: &str| format!("{u}:{}\n", bcrypt::hash(p, 4).unwrap());
    rewrite_htpasswd(&admin, &(line(USER, PASSWORD) + &line(SECOND, SECOND_PASSWORD)));
    let login_as = |user: &str, password: &str| {
        let (cookie, csrf) = admin.login_form();
        admin.call(
            "POST",
            "/admin/login",
            Some(&form(&[("csrf", &csrf), ("username", user), ("password", password)])),
            &[("Cookie", &cookie)],
        )
    };
    for _ in 0..5 {
        assert_eq!(login_as(USER, "wrong").status, 401);
    }
    let locked = login_as(USER, PASSWORD);
    assert_eq!(locked.status, 429, "the user who failed is locked: {}", locked.body);
    assert!(locked.body.contains("Too many"), "{}", locked.body);
    let other = login_as(SECOND, SECOND_PASSWORD);
    assert_eq!(other.status, 303, "another operator gets in: {}", other.body);
    assert_eq!(login_as(USER, PASSWORD).status, 429, "still locked after the other's log-in");

    // The API: 10 failures for one user from this address, then the other's right password.
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let v1 = |user: &str, password: &str| {
        let mut reply = agent
            .get(format!("{}/v1/nodes", admin.base))
            .header("Authorization", &format!("Basic {}", basic(user, password)))
            .call()
            .unwrap();
        let retry = reply.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
        let _ = reply.body_mut().read_to_string();
        (reply.status().as_u16(), retry)
    };
    const API_USER: &str = "api-user";
    rewrite_htpasswd(
        &admin,
        &(line(USER, PASSWORD) + &line(SECOND, SECOND_PASSWORD) + &line(API_USER, "api pass")),
    );
    for _ in 0..10 {
        assert_eq!(v1(API_USER, "wrong").0, 401);
    }
    let (status, retry) = v1(API_USER, "api pass");
    assert_eq!(status, 429, "the API user who failed is locked");
    let retry: u64 = retry.expect("Retry-After on 429").parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(v1(SECOND, SECOND_PASSWORD).0, 200, "another user from this address gets in");
}

/// Every route of the admin router (read from `src/admin/mod.rs`, so a new route is tried as
/// soon as it is added), each method, logged out and logged in, with and without the CSRF
/// token, and a path under `/admin/` that is no route: every answer forbids framing
/// (`X-Frame-Options: DENY`, `frame-ancestors 'none'`), the log-in page, redirects, refusals,
/// 404s, 405s and confirmations included; `/admin/activity` alone may be framed by the page itself.
#[test]
fn every_admin_route_forbids_framing_but_the_activity_frame() {
    use serde_json::json;
    let admin = Admin::start();
    let (status, node) = admin.api(
        "/v1/nodes",
        json!({"name": "framed", "driver": "fake", "storage_interface": "external",
               "properties": {"capabilities": "iscsi_boot:true"}}),
    );
    assert_eq!(status, 201, "{node}");
    let uuid = node["uuid"].as_str().unwrap().to_owned();
    let (status, port) =
        admin.api("/v1/ports", json!({"node_uuid": uuid, "address": "52:54:00:12:34:99"}));
    assert_eq!(status, 201);
    let port = port["uuid"].as_str().unwrap().to_owned();
    let source = include_str!("../../src/admin/mod.rs");
    let router = &source[source.find("pub fn router(").unwrap()..];
    let router = &router[..router.find("\n}\n").unwrap()];
    let mut routes: Vec<(String, Vec<&str>)> = Vec::new();
    for line in router.lines().filter(|l| l.trim_start().starts_with(".route(\"")) {
        let path = line.split('"').nth(1).unwrap().to_owned();
        let methods: Vec<&str> = [("get(", "GET"), ("post(", "POST"), ("any(", "ANY")]
            .iter()
            .filter(|(call, _)| line.contains(call))
            .map(|(_, m)| *m)
            .collect();
        assert!(!methods.is_empty(), "a route with no method this test knows: {line}");
        routes.push((path, methods));
    }
    assert!(routes.len() >= 14, "the router was not read: {routes:?}");
    let concrete = |path: &str| -> Vec<String> {
        let mut paths = vec![path.to_owned()];
        for (param, values) in [
            ("{node}", vec![uuid.clone(), "no-such-node".to_owned()]),
            ("{form}", vec!["delete".into(), "maintenance".into(), "nope".into()]),
            ("{child}", vec!["ports".into()]),
            ("{id}", vec![port.clone()]),
            ("{*rest}", vec!["no/such/page".into()]),
        ] {
            paths = paths
                .iter()
                .flat_map(|p| values.iter().map(move |v| p.replace(param, v)))
                .collect();
        }
        paths
    };
    let logged = admin.login(PASSWORD);
    let cookie = logged.cookie();
    let csrf = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]).csrf();
    let mut tried = 0;
    let mut check = |method: &str, path: &str, body: Option<&str>, cookie: Option<&str>| {
        if method == "GET" && path == "/admin/stream" && cookie.is_some() {
            // A live stream does not end: `admin::live` reads its headers (DENY among them).
            return 200;
        }
        let headers: Vec<(&str, &str)> = cookie.map(|c| ("Cookie", c)).into_iter().collect();
        let reply = admin.call(method, path, body, &headers);
        let what =
            format!("{method} {path} (logged in: {}) answered {}", cookie.is_some(), reply.status);
        let csp =
            reply.header("content-security-policy").unwrap_or_else(|| panic!("{what}: no CSP"));
        if path == "/admin/activity" && reply.status == 200 {
            assert_eq!(reply.header("x-frame-options"), Some("SAMEORIGIN"), "{what}");
            assert!(csp.contains("frame-ancestors 'self'"), "{what}: {csp}");
        } else {
            assert_eq!(reply.header("x-frame-options"), Some("DENY"), "{what}");
            assert!(csp.contains("frame-ancestors 'none'"), "{what}: {csp}");
        }
        tried += 1;
        reply.status
    };
    let mut statuses = std::collections::BTreeSet::new();
    let mut logout = Vec::new();
    for (path, methods) in &routes {
        for path in concrete(path) {
            if path == "/admin/logout" {
                logout = methods.clone();
                continue;
            }
            for method in methods {
                let methods: &[&str] = if *method == "ANY" { &["GET", "POST"] } else { &[method] };
                for &method in methods {
                    let no_token = Some("x=1");
                    let token = format!("csrf={csrf}");
                    let body = (method == "POST").then_some(token.as_str());
                    statuses.insert(check(method, &path, body, None));
                    statuses.insert(check(method, &path, body, Some(&cookie)));
                    if method == "POST" {
                        statuses.insert(check(method, &path, no_token, Some(&cookie)));
                    } else {
                        // The other method too: 405 where the route has no POST.
                        statuses.insert(check("POST", &path, Some(&token), Some(&cookie)));
                    }
                }
            }
        }
    }
    assert_eq!(logout, ["POST"], "the log-out route");
    statuses.insert(check("GET", "/admin/logout", None, Some(&cookie)));
    statuses.insert(check("POST", "/admin/logout", Some("x=1"), Some(&cookie)));
    statuses.insert(check("POST", "/admin/logout", Some(&format!("csrf={csrf}")), Some(&cookie)));
    statuses.insert(check("GET", "/admin/password", None, Some(&cookie)));
    // Redirects, pages, form errors, CSRF refusals, a confirmation, 404s and 405s were all seen.
    for status in [200, 303, 400, 401, 403, 404, 405] {
        assert!(statuses.contains(&status), "no {status} among {statuses:?}");
    }
    assert!(tried > 60, "{tried}");
}

/// A page's alerts (`role="alert"`), where a form's refusal is shown: each one's remaining
/// attributes (a field's error has `id="error-<field>"`) and its text.
fn alerts(body: &str) -> Vec<String> {
    body.split("role=\"alert\"")
        .skip(1)
        .map(|rest| rest[..rest.find("</").unwrap_or(rest.len())].to_owned())
        .collect()
}

/// Every admin form field whose value reaches a script (the create form's, the node edit
/// form's, instance_info's keys, the port, connector and target forms, new and edited, every
/// target property), with every hostile value of `hostile.rs`: a form error naming the field,
/// and nothing stored.
#[test]
fn every_admin_form_field_refuses_every_hostile_value_and_stores_nothing() {
    use crate::hostile::{HOSTILE, SCRIPT_FIELDS, base_nodes, field_name, hostile_for};
    use serde_json::{Value, json};
    let admin = Admin::start();
    let base = base_nodes();
    let iscsi = &base["nodes"][0];
    let target = &iscsi["volume_targets"][0];
    let instance = base["nodes"][5]["instance_info"].clone();
    let (status, node) = admin.api(
        "/v1/nodes",
        json!({"name": "host", "driver": "fake", "storage_interface": "external",
               "properties": {"capabilities": "iscsi_boot:true"}, "instance_info": instance}),
    );
    assert_eq!(status, 201, "{node}");
    let uuid = node["uuid"].as_str().unwrap().to_owned();
    let (status, made) = admin.api(
        "/v1/volume/connectors",
        json!({"node_uuid": uuid, "type": "iqn", "connector_id": iscsi["volume_connectors"][0]["connector_id"]}),
    );
    assert_eq!(status, 201, "{made}");
    let connector = made["uuid"].as_str().unwrap().to_owned();
    let mut body = target.clone();
    body["node_uuid"] = json!(uuid);
    let (status, made) = admin.api("/v1/volume/targets", body);
    assert_eq!(status, 201, "{made}");
    let target_uuid = made["uuid"].as_str().unwrap().to_owned();
    let before = format!("{:?}", stored(&admin, "host"));
    let cookie = admin.login(PASSWORD).cookie();
    let csrf = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]).csrf();

    // (where the form posts, its valid fields, the fields made hostile; a field `instance_info`
    // or `properties` holds JSON, and `key/sub` means that key of it).
    let properties = target["properties"].to_string();
    let instance_text = instance.to_string();
    let create: Vec<(&str, &str)> = vec![
        ("name", "made"),
        ("driver", "fake"),
        ("storage_interface", "external"),
        ("capabilities", "iscsi_boot:true"),
        ("instance_info", &instance_text),
        ("mac", "52:54:00:ee:00:02"),
        ("connector_iqn", "iqn.2024-01.org.example.node:made"),
        ("volume_id", "made-1"),
        ("target_iqn", "iqn.2024-01.org.example.san:made"),
        ("target_portal", "192.0.2.5:3260"),
        ("target_lun", "1"),
        ("auth_username", "u"),
        ("auth_password", "p"),
    ];
    let instance_keys = [
        "instance_info/kernel",
        "instance_info/ramdisk",
        "instance_info/nfs_root",
        "instance_info/nfs_options",
        "instance_info/kernel_append_params",
    ];
    let mut create_hostile: Vec<&str> = create
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| {
            !matches!(*k, "driver" | "storage_interface" | "capabilities" | "instance_info")
        })
        .collect();
    create_hostile.extend(instance_keys);
    let edit: Vec<(&str, &str)> = create[..5].to_vec();
    let mut edit_hostile = vec!["name"];
    edit_hostile.extend(instance_keys);
    let target_props: Vec<String> = SCRIPT_FIELDS
        .iter()
        .filter_map(|f| f.strip_prefix("/nodes/0/volume_targets/0/properties/"))
        .map(|p| format!("properties/{p}"))
        .collect();
    let mut target_hostile: Vec<&str> = vec!["volume_id"];
    target_hostile.extend(target_props.iter().map(String::as_str));
    let new_target: Vec<(&str, &str)> = vec![
        ("volume_type", "iscsi"),
        ("boot_index", "1"),
        ("volume_id", "v9"),
        ("properties", &properties),
    ];
    let old_target: Vec<(&str, &str)> = vec![
        ("volume_type", "iscsi"),
        ("boot_index", "0"),
        ("volume_id", "v1"),
        ("properties", &properties),
    ];
    let node_path = format!("/admin/nodes/{uuid}");
    type Fields<'a> = Vec<(&'a str, &'a str)>;
    let forms: Vec<(String, Fields, Vec<&str>)> = vec![
        ("/admin/nodes".into(), create, create_hostile),
        (format!("{node_path}/edit"), edit, edit_hostile),
        (format!("{node_path}/ports"), vec![("address", "52:54:00:ee:00:03")], vec!["address"]),
        (
            format!("{node_path}/connectors"),
            vec![("type", "iqn"), ("connector_id", "iqn.2024-01.org.example.node:other")],
            vec!["connector_id"],
        ),
        (
            format!("{node_path}/connectors/{connector}"),
            vec![("type", "iqn"), ("connector_id", "iqn.2024-01.org.example.node:other")],
            vec!["connector_id"],
        ),
        (format!("{node_path}/targets"), new_target, target_hostile.clone()),
        (format!("{node_path}/targets/{target_uuid}"), old_target, target_hostile),
    ];
    let mut tried = 0;
    for (path, valid, hostile_fields) in &forms {
        for field in hostile_fields {
            for hostile in hostile_for(field) {
                let mut fields: Vec<(String, String)> =
                    valid.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
                match field.split_once('/') {
                    Some((json_field, pointer)) => {
                        let (_, text) = fields.iter_mut().find(|(k, _)| k == json_field).unwrap();
                        let mut doc: Value = serde_json::from_str(text).unwrap();
                        *doc.pointer_mut(&format!("/{pointer}")).unwrap() = json!(hostile);
                        *text = doc.to_string();
                    }
                    None => {
                        fields.iter_mut().find(|(k, _)| k == field).unwrap().1 =
                            (*hostile).to_owned()
                    }
                }
                fields.push(("csrf".into(), csrf.clone()));
                let pairs: Vec<(&str, &str)> =
                    fields.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let reply = admin.call("POST", path, Some(&form(&pairs)), &[("Cookie", &cookie)]);
                let what = format!("POST {path} {field}={hostile:?}");
                assert_eq!(reply.status, 400, "{what}: {}", reply.body);
                let shown = alerts(&reply.body);
                let pointer = format!("/{field}");
                let name = field_name(&pointer);
                assert!(shown.iter().any(|a| a.contains(name)), "{what}: alerts {shown:?}");
                tried += 1;
            }
        }
    }
    assert_eq!(format!("{:?}", stored(&admin, "host")), before, "nothing changed");
    let db = crate::support::open_db_ok(admin._dir.path()).unwrap();
    assert!(db.node_record("made").unwrap().is_none(), "no node was created");
    assert!(tried > 250, "{tried} ({} hostile values)", HOSTILE.len());
}

/// Every provision verb of the state machine, over HTTP: the ones that take a running node
/// away (undeploy, rebuild, abort, rescue, unrescue) answer a confirmation naming that verb and
/// the node, with its own consequence and the focus on its button, and change nothing without
/// `confirm`; the others start at once. Power off, reboot, soft power off and delete likewise.
#[test]
fn every_verb_is_confirmed_in_its_own_words_and_nothing_changes_unconfirmed() {
    use bootvol_core::model::ProvisionState as S;
    let admin = Admin::start();
    let cookie = admin.login(PASSWORD).cookie();
    let csrf = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]).csrf();
    // (verb's target, the state the node is in, the confirmation's heading or none, words of
    // its consequence).
    let verbs: [(&str, S, Option<&str>, &str); 11] = [
        ("manage", S::Enroll, None, ""),
        ("provide", S::Manageable, None, ""),
        ("active", S::Available, None, ""),
        ("inspect", S::Manageable, None, ""),
        ("clean", S::Manageable, None, ""),
        ("adopt", S::Manageable, None, ""),
        ("deleted", S::Active, Some("Undeploy"), "detaches its volumes"),
        ("rebuild", S::Active, Some("Rebuild"), "undeploys the node and deploys it again"),
        ("abort", S::WaitCallBack, Some("Abort"), "stops the deployment"),
        ("rescue", S::Active, Some("Rescue"), "takes the node into rescue"),
        ("unrescue", S::Rescue, Some("Unrescue"), "takes the node out of rescue"),
    ];
    let db = crate::support::open_db(admin._dir.path());
    for (i, (target, state, asked, consequence)) in verbs.iter().enumerate() {
        let name = format!("verb-{i}");
        let made = post(&admin, &cookie, &csrf, "/admin/nodes", &[("name", &name)]);
        assert_eq!(made.status, 303, "{}", made.body);
        let mut record = db.node_record(&name).unwrap().unwrap();
        record.node.provision_state = *state;
        db.save_node_runtime(&record.node).unwrap();
        let path = format!("/admin/nodes/{}/provision", record.node.uuid);
        let reply = post(&admin, &cookie, &csrf, &path, &[("target", target)]);
        let Some(label) = asked else {
            assert_eq!(reply.status, 303, "{target} starts at once: {}", reply.body);
            continue;
        };
        assert_eq!(reply.status, 200, "{target}: {}", reply.body);
        assert!(
            reply.body.contains(&format!("<h2 id=\"confirm\">{label} {name}?</h2>")),
            "{target}: {}",
            reply.body
        );
        assert!(reply.body.contains(consequence), "{target}: {}", reply.body);
        assert!(
            reply
                .body
                .contains(&format!("id=\"confirm-button\" autofocus>{label} {name}</button>")),
            "{target}: {}",
            reply.body
        );
        assert!(
            reply.body.contains(&format!("name=\"target\" value=\"{target}\"")),
            "{}",
            reply.body
        );
        for other in
            ["Undeploy", "Rebuild", "Abort", "Rescue", "Unrescue"].iter().filter(|o| *o != label)
        {
            assert!(!reply.body.contains(&format!("{other} {name}")), "{target} named {other}");
        }
        // A wrong name is no confirmation either.
        let wrong =
            post(&admin, &cookie, &csrf, &path, &[("target", target), ("confirm", "other")]);
        assert_eq!(wrong.status, 200, "{}", wrong.body);
        std::thread::sleep(Duration::from_millis(200));
        let after = db.node_record(&name).unwrap().unwrap();
        assert_eq!(after.node.provision_state, *state, "{target} unconfirmed changed the node");
        assert_eq!(after.node.target_provision_state, None, "{target} unconfirmed started");
        if *target == "rebuild" {
            let done =
                post(&admin, &cookie, &csrf, &path, &[("target", target), ("confirm", &name)]);
            assert_eq!(done.status, 303, "{}", done.body);
            let page =
                admin.call("GET", done.header("location").unwrap(), None, &[("Cookie", &cookie)]);
            assert!(page.body.contains("Rebuild started."), "{}", page.body);
        }
    }
    // The power actions and delete, each in its own words.
    let made = post(&admin, &cookie, &csrf, "/admin/nodes", &[("name", "power-words")]);
    let node = made.header("location").unwrap().to_owned();
    for (form, target, heading) in [
        ("power", "power off", "Power off power-words?"),
        ("power", "soft power off", "Soft power off power-words?"),
        ("power", "rebooting", "Reboot power-words?"),
        ("delete", "", "Delete power-words?"),
    ] {
        let reply = post(&admin, &cookie, &csrf, &format!("{node}/{form}"), &[("target", target)]);
        assert_eq!(reply.status, 200, "{target}: {}", reply.body);
        assert!(reply.body.contains(heading), "{target}: {}", reply.body);
    }
    assert_eq!(admin.call("GET", &node, None, &[("Cookie", &cookie)]).status, 200, "not deleted");
}

/// A driver switch asks for the new driver's password instead of dropping the stored one; Save
/// refuses a BMC address the new driver's validation would (a Redfish URL as an IPMI address);
/// what the switch removed is said; a fake node's form hides the BMC fields.
#[test]
fn a_driver_switch_asks_for_the_new_drivers_fields() {
    let admin = Admin::start();
    let cookie = admin.login(PASSWORD).cookie();
    let csrf = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]).csrf();
    let made = post(
        &admin,
        &cookie,
        &csrf,
        "/admin/nodes",
        &[
            ("name", "switch"),
            ("driver", "redfish"),
            ("bmc_address", "https://10.12.100.11"),
            ("bmc_system_id", "/redfish/v1/Systems/1"),
            ("bmc_username", "root"),
            ("bmc_password", "redfish-secret"),
        ],
    );
    assert_eq!(made.status, 303, "{}", made.body);
    let edit = format!("{}/edit", made.header("location").unwrap());
    let to_ipmi = |address: &str, password: &str| {
        post(
            &admin,
            &cookie,
            &csrf,
            &edit,
            &[
                ("name", "switch"),
                ("driver", "ipmi"),
                ("bmc_address", address),
                ("bmc_system_id", "/redfish/v1/Systems/1"),
                ("bmc_username", "root"),
                ("bmc_password", password),
                ("driver_info", "{}"),
                ("instance_info", "{}"),
            ],
        )
    };
    let asked = to_ipmi("https://10.12.100.11", "");
    assert_eq!(asked.status, 400, "{}", asked.body);
    assert!(asked.body.contains("type the BMC password for ipmi"), "{}", asked.body);
    assert!(asked.body.contains("id=\"invalid-field\" autofocus"), "{}", asked.body);
    assert!(asked.body.contains("name=\"bmc_password\" type=\"password\" autocomplete=\"new-password\" placeholder=\"stored; leave empty to keep it\" id=\"invalid-field\""), "the password field has the focus: {}", asked.body);
    let stored_now = stored(&admin, "switch");
    assert_eq!(stored_now.node.driver_info["redfish_password"], "redfish-secret", "kept");
    let url = to_ipmi("https://10.12.100.11", "ipmi-secret");
    assert_eq!(url.status, 400, "{}", url.body);
    assert!(url.body.contains("BMC: ") && url.body.contains("ipmi_address"), "{}", url.body);
    assert_eq!(stored(&admin, "switch").node.driver, stored_now.node.driver, "nothing saved");
    let saved = to_ipmi("10.12.100.11", "ipmi-secret");
    assert_eq!(saved.status, 303, "{}", saved.body);
    let page = admin.call("GET", saved.header("location").unwrap(), None, &[("Cookie", &cookie)]);
    assert!(
        page.body.contains("Node saved. The driver is now ipmi: redfish_address, redfish_system_id, redfish_username, redfish_password removed"),
        "{}",
        page.body
    );
    let record = stored(&admin, "switch");
    assert_eq!(record.node.driver_info["ipmi_address"], "10.12.100.11");
    assert_eq!(record.node.driver_info["ipmi_password"], "ipmi-secret");
    assert!(!record.node.driver_info.contains_key("redfish_password"));
    // The page follows the driver saved: IPMI's words, no system id (hidden by the form's class).
    assert!(page.body.contains("class=\"driver-form driver-ipmi\""), "{}", page.body);
    let fake = post(&admin, &cookie, &csrf, "/admin/nodes", &[("name", "no-bmc")]);
    let fake = admin.call("GET", fake.header("location").unwrap(), None, &[("Cookie", &cookie)]);
    assert!(fake.body.contains("class=\"driver-form driver-fake\""), "{}", fake.body);
}

/// A refused creation is summed up at the top, linking to the field, which has the focus (not
/// the search box), and its message names a target once.
#[test]
fn a_refused_form_is_summed_up_at_the_top_with_the_field_focused() {
    let admin = Admin::start();
    let cookie = admin.login(PASSWORD).cookie();
    let csrf = admin.call("GET", "/admin/", None, &[("Cookie", &cookie)]).csrf();
    let refused = post(
        &admin,
        &cookie,
        &csrf,
        "/admin/nodes",
        &[
            ("name", "bad-portal"),
            ("volume_id", "vol-1"),
            ("target_iqn", "iqn.2024-01.org.example.san:x"),
            ("target_portal", "2001:db8::6:3260"),
        ],
    );
    assert_eq!(refused.status, 400, "{}", refused.body);
    let summary = refused.body.find("id=\"form-errors\"").expect("a summary");
    assert!(summary < refused.body.find("id=\"attention\"").unwrap(), "at the top");
    assert!(
        refused
            .body
            .contains("<a href=\"#invalid-field\" data-field=\"error-target_portal\">Portal: "),
        "{}",
        refused.body
    );
    assert!(refused.body.contains("name=\"target_portal\""));
    assert_eq!(refused.body.matches(" autofocus").count(), 1, "one focus: {}", refused.body);
    let focused = &refused.body[..refused.body.find(" autofocus").unwrap()];
    assert!(
        focused.rfind("<input").is_some_and(|i| focused[i..].contains("name=\"target_portal\"")),
        "the portal has the focus"
    );
    let message = &refused.body[summary..];
    let message = &message[..message.find("</div>").unwrap()];
    assert_eq!(message.matches("volume target").count(), 1, "said once: {message}");
}

mod history;
mod live;
mod rack;
