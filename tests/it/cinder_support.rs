//! A real Cinder (from PyPI, `tests/cinder/`) for the storage tests, and a fault proxy in front
//! of it that fails chosen requests.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn venv_python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/cinder-venv/bin/python")
}

/// One Cinder-backed test at a time: they time Cinder's answers, and several Cinders at once
/// on a 2-core machine make those timings meaningless.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A Cinder process on a free port with its own state dir; killed on drop.
pub(crate) struct Cinder {
    pub(crate) url: String,
    pub(crate) state: tempfile::TempDir,
    child: Child,
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Cinder {
    /// Starts Cinder, or returns `None` (with a note) when the venv is missing and the tests
    /// are not required.
    #[allow(clippy::disallowed_methods)] // tests start real processes
    pub(crate) fn start() -> Option<Cinder> {
        let python = venv_python();
        if !python.exists() {
            crate::skip::skip(
                crate::skip::CINDER,
                &format!("no real Cinder: {} missing", python.display()),
            );
            return None;
        }
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let state = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let launcher = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cinder/cinder_aio.py");
        let mut child = std::process::Command::new(&python)
            .arg(launcher)
            .arg("--state-dir")
            .arg(state.path())
            .arg("--port")
            .arg(port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start cinder_aio.py");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        assert!(
            line.starts_with("READY "),
            "Cinder did not start: {line:?} (see {}/cinder.log)",
            state.path().display()
        );
        Some(Cinder { url: format!("http://127.0.0.1:{port}"), state, child, _turn: turn })
    }

    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into()
    }

    /// A request straight to Cinder (not through bootvol): status and JSON body.
    pub(crate) fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        microversion: &str,
    ) -> (u16, Value) {
        let url = format!("{}/v3{path}", self.url);
        let agent = Cinder::agent();
        let result = match (method, body) {
            ("GET", _) => agent
                .get(&url)
                .header("X-Auth-Token", "test:test")
                .header("OpenStack-API-Version", microversion)
                .call(),
            ("DELETE", _) => agent
                .delete(&url)
                .header("X-Auth-Token", "test:test")
                .header("OpenStack-API-Version", microversion)
                .call(),
            (_, body) => agent
                .post(&url)
                .header("X-Auth-Token", "test:test")
                .header("OpenStack-API-Version", microversion)
                .header("Content-Type", "application/json")
                .send(body.unwrap_or(json!({})).to_string()),
        };
        let mut response = result.expect("Cinder answers");
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Creates a 1 GiB volume and waits until it is `available`.
    pub(crate) fn create_volume(&self, name: &str) -> String {
        let (status, body) = self.request(
            "POST",
            "/volumes",
            Some(json!({"volume": {"size": 1, "name": name}})),
            "volume 3.0",
        );
        assert_eq!(status, 202, "{body}");
        let id = body["volume"]["id"].as_str().unwrap().to_owned();
        self.wait_status(&id, "available");
        id
    }

    pub(crate) fn volume(&self, id: &str) -> Value {
        let (status, body) = self.request("GET", &format!("/volumes/{id}"), None, "volume 3.44");
        assert_eq!(status, 200, "{body}");
        body["volume"].clone()
    }

    pub(crate) fn wait_status(&self, id: &str, status: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let volume = self.volume(id);
            if volume["status"] == status {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "volume {id} stayed {} (wanted {status})",
                volume["status"]
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The attachments Cinder holds for a volume (attachments API listing, all states).
    pub(crate) fn attachments(&self, id: &str) -> Vec<Value> {
        let (status, body) = self.request(
            "GET",
            &format!("/attachments/detail?all_tenants=1&volume_id={id}"),
            None,
            "volume 3.44",
        );
        assert_eq!(status, 200, "{body}");
        body["attachments"].as_array().cloned().unwrap_or_default()
    }

    /// Asserts that nothing holds the volume: `available`, no attachment of any state.
    pub(crate) fn assert_free(&self, id: &str, context: &str) {
        let volume = self.volume(id);
        assert_eq!(volume["status"], "available", "{context}: volume {id} is {}", volume["status"]);
        assert_eq!(
            self.attachments(id),
            Vec::<Value>::new(),
            "{context}: volume {id} still has attachments"
        );
    }

    /// What the fake backend hands out from now on.
    pub(crate) fn set_backend(&self, backend: Value) {
        let tmp = self.state.path().join("backend.json.tmp");
        std::fs::write(&tmp, backend.to_string()).unwrap();
        std::fs::rename(&tmp, self.state.path().join("backend.json")).unwrap();
    }
}

impl Drop for Cinder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How the proxy fails a matching request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Answer 500 without forwarding.
    Error500,
    /// Forward the request, then hold the answer for this long (past bootvol's timeout): the
    /// step happens in Cinder but bootvol never hears of it.
    ForwardThenStall(Duration),
    /// Hold the request for this long without forwarding.
    Stall(Duration),
}

#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub(crate) method: &'static str,
    /// A substring of the path (and, for actions, of the body: `os-attach`...).
    pub(crate) matches: String,
    pub(crate) fault: Fault,
    /// How many matching requests fail (then the rule is spent).
    pub(crate) times: usize,
}

/// A proxy in front of Cinder that fails the requests its rules match.
pub(crate) struct FaultProxy {
    pub(crate) url: String,
    rules: Arc<Mutex<Vec<Rule>>>,
    pub(crate) log: Arc<Mutex<Vec<String>>>,
    /// Stops and joins the proxy when the test ends.
    _server: crate::support::Background,
}

impl FaultProxy {
    pub(crate) fn start(upstream: &str) -> FaultProxy {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let rules: Arc<Mutex<Vec<Rule>>> = Arc::default();
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let state = (upstream.to_owned(), Arc::clone(&rules), Arc::clone(&log));
        let (addr, server) =
            crate::support::Background::serve("the fault proxy", |listener, shutdown| async move {
                let app = axum::Router::new().fallback(forward).with_state(state);
                axum::serve(listener, app)
                    .with_graceful_shutdown(shutdown.cancelled_owned())
                    .await?;
                Ok(())
            });
        FaultProxy { url: format!("http://{addr}"), rules, log, _server: server }
    }

    pub(crate) fn fail(&self, method: &'static str, matches: &str, fault: Fault, times: usize) {
        self.rules.lock().unwrap().push(Rule { method, matches: matches.to_owned(), fault, times });
    }

    pub(crate) fn clear(&self) {
        self.rules.lock().unwrap().clear();
    }
}

type ProxyState = (String, Arc<Mutex<Vec<Rule>>>, Arc<Mutex<Vec<String>>>);

async fn forward(
    axum::extract::State((upstream, rules, log)): axum::extract::State<ProxyState>,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let method = request.method().clone();
    let path = request.uri().path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_default();
    let headers = request.headers().clone();
    let body = axum::body::to_bytes(request.into_body(), 1 << 20).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&body).to_string();
    log.lock().unwrap().push(format!("{method} {path} {text}"));
    let fault = {
        let mut rules = rules.lock().unwrap();
        rules
            .iter_mut()
            .find(|r| {
                r.times > 0
                    && r.method == method.as_str()
                    && (path.contains(&r.matches) || text.contains(&r.matches))
            })
            .map(|r| {
                r.times -= 1;
                r.fault
            })
    };
    if let Some(Fault::Error500) = fault {
        return (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(
                json!({"computeFault": {"code": 500, "message": "injected by the test proxy"}}),
            ),
        )
            .into_response();
    }
    if let Some(Fault::Stall(delay)) = fault {
        tokio::time::sleep(delay).await;
        return axum::http::StatusCode::GATEWAY_TIMEOUT.into_response();
    }
    let client = reqwest::Client::new();
    let mut outgoing = client.request(method, format!("{upstream}{path}")).body(body.to_vec());
    for (name, value) in headers.iter().filter(|(n, _)| *n != "host" && *n != "content-length") {
        outgoing = outgoing.header(name, value);
    }
    let response = match outgoing.send().await {
        Ok(r) => r,
        Err(e) => return (axum::http::StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let status = response.status();
    let content_type = response.headers().get("content-type").cloned();
    let bytes = response.bytes().await.unwrap_or_default();
    if let Some(Fault::ForwardThenStall(delay)) = fault {
        tokio::time::sleep(delay).await;
    }
    let mut out = (status, bytes).into_response();
    if let Some(ct) = content_type {
        out.headers_mut().insert("content-type", ct);
    }
    out
}
