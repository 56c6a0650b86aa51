//! Keystone v3 against the upstream sample payloads: the token request body, the catalog
//! lookup, token caching and renewal, and re-authentication after a 401.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::{Value, json};

use bootvol_control::cinder::CinderClient;
use bootvol_control::cinder::keystone::{auth_request, catalog_endpoint, parse_token};
use bootvol_core::config::{Config, KeystoneSection};
use bootvol_core::timefmt::{format_unix, now_unix};

fn sample(path: &str) -> Value {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/openstack-api-samples/");
    let text = std::fs::read_to_string(format!("{root}{path}"))
        .or_else(|_| {
            std::fs::read_to_string(format!(
                "{}/tests/fixtures/openstack-api-samples/{path}",
                env!("CARGO_MANIFEST_DIR")
            ))
        })
        .unwrap_or_else(|e| panic!("sample {path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn token_requests_match_the_upstream_samples() {
    let password = KeystoneSection {
        auth_url: "http://keystone.example/v3".into(),
        user_id: "ee4dfb6e5540447cb3741905149d9b6e".into(),
        password: "devstacker".into(),
        project_name: "admin".into(),
        project_domain_id: "default".into(),
        ..KeystoneSection::default()
    };
    assert_eq!(
        auth_request(&password),
        sample("keystone/v3/auth/requests/project-name-password.json")
    );
    let app_cred = KeystoneSection {
        auth_url: "http://keystone.example".into(),
        application_credential_id: "423f19a4ac1e4f48bbb4180756e6eb6c".into(),
        application_credential_secret: "rEaqvJka48mpv".into(),
        ..KeystoneSection::default()
    };
    assert_eq!(
        auth_request(&app_cred),
        sample("keystone/v3/admin/auth-application-credential-id-request.json")
    );
    let debug = format!("{password:?} {app_cred:?}");
    assert!(!debug.contains("devstacker") && !debug.contains("rEaqvJka48mpv"), "{debug}");
}

#[test]
fn the_catalog_gives_a_v3_block_storage_endpoint() {
    let body = sample("keystone/v3/admin/auth-password-project-scoped-response.json");
    let k = KeystoneSection::default();
    let token = parse_token("subject".into(), &body, &k).unwrap();
    assert_eq!(
        token.endpoint.as_deref(),
        Some("http://23.253.248.171:8776/v3/a6944d763bf64ee6a275f1263fae0352")
    );
    assert_eq!(token.expires_at, 1_446_865_123);
    let catalog = &body["token"]["catalog"];
    assert_eq!(
        catalog_endpoint(catalog, "", "internal", "RegionOne").as_deref(),
        Some("http://23.253.248.171:8776/v3/a6944d763bf64ee6a275f1263fae0352")
    );
    assert_eq!(
        catalog_endpoint(catalog, "", "public", "RegionTwo"),
        None,
        "no endpoint in that region"
    );
    assert_eq!(
        catalog_endpoint(catalog, "block-storage", "public", ""),
        None,
        "no service of that type"
    );
    // A catalog without any volume service (the application-credential sample).
    let app = sample("keystone/v3/admin/auth-application-credential-response.json");
    assert_eq!(parse_token("s".into(), &app, &k).unwrap().endpoint, None);
}

/// A Keystone and a Cinder on one port: Keystone answers with the upstream sample, its times
/// moved to now, its catalog pointing back here.
#[derive(Clone)]
struct Cloud {
    base: Arc<std::sync::Mutex<String>>,
    tokens_issued: Arc<AtomicUsize>,
    lifetime: u64,
    /// Cinder answers 401 to tokens issued before this count (simulates revocation).
    revoked_below: Arc<AtomicUsize>,
}

async fn issue_token(State(cloud): State<Cloud>, body: axum::Json<Value>) -> impl IntoResponse {
    assert_eq!(body["auth"]["identity"]["methods"], json!(["password"]));
    assert_eq!(body["auth"]["identity"]["password"]["user"]["password"], "s3cret-keystone");
    let n = cloud.tokens_issued.fetch_add(1, Ordering::SeqCst) + 1;
    let mut response = sample("keystone/v3/admin/auth-password-project-scoped-response.json");
    let now = now_unix();
    response["token"]["issued_at"] = json!(format_unix(now));
    response["token"]["expires_at"] = json!(format_unix(now + cloud.lifetime));
    let base = cloud.base.lock().unwrap().clone();
    response["token"]["catalog"].as_array_mut().unwrap().push(json!({"type": "block-storage", "name": "cinder", "id": "x",
        "endpoints": [{"id": "e", "interface": "public", "region": "RegionOne", "region_id": "RegionOne", "url": format!("{base}/volume/v3")}]}));
    let mut headers = HeaderMap::new();
    headers.insert("X-Subject-Token", format!("token-{n}").parse().unwrap());
    (StatusCode::CREATED, headers, axum::Json(response))
}

async fn show_volume(State(cloud): State<Cloud>, headers: HeaderMap) -> impl IntoResponse {
    let token = headers.get("X-Auth-Token").and_then(|v| v.to_str().ok()).unwrap_or("");
    let n: usize = token.strip_prefix("token-").and_then(|n| n.parse().ok()).unwrap_or(0);
    if n == 0 || n < cloud.revoked_below.load(Ordering::SeqCst) {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": {"code": 401, "message": "bad token"}})),
        );
    }
    (
        StatusCode::OK,
        axum::Json(
            json!({"volume": {"id": "v1", "status": "available", "attachments": [], "metadata": {}}}),
        ),
    )
}

async fn start_cloud(lifetime: u64) -> (Cloud, String) {
    let cloud = Cloud {
        base: Arc::default(),
        tokens_issued: Arc::default(),
        lifetime,
        revoked_below: Arc::default(),
    };
    let app = Router::new()
        .route("/identity/v3/auth/tokens", post(issue_token))
        .route("/volume/v3/volumes/{id}", get(show_volume))
        .with_state(cloud.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    *cloud.base.lock().unwrap() = base.clone();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (cloud, base)
}

fn keystone_config(base: &str) -> Config {
    Config::from_toml(
        &format!(
            r#"[DEFAULT]
enabled_storage_interfaces = ["noop", "cinder"]
[cinder]
auth_strategy = "keystone"
url_timeout = 5
[keystone]
auth_url = "{base}/identity"
username = "bootvol"
password = "s3cret-keystone"
user_domain_name = "Default"
project_name = "baremetal"
project_domain_name = "Default"
"#
        ),
        "test",
    )
    .unwrap()
}

#[tokio::test]
async fn tokens_are_cached_renewed_before_expiry_and_after_a_401() {
    let (cloud, base) = start_cloud(3).await;
    let client = CinderClient::new(&keystone_config(&base)).unwrap();
    assert_eq!(client.volume("v1").await.unwrap().status, "available");
    assert_eq!(client.volume("v1").await.unwrap().id, "v1");
    assert_eq!(cloud.tokens_issued.load(Ordering::SeqCst), 1, "the token is cached");
    // A 3 s token is renewed once at most half its life (whole seconds) is left: kept for the
    // calls until then, renewed before it expires.
    let issued = std::time::Instant::now();
    while cloud.tokens_issued.load(Ordering::SeqCst) < 2 {
        assert!(issued.elapsed() < Duration::from_secs(3), "not renewed before expiry");
        tokio::time::sleep(Duration::from_millis(100)).await;
        client.volume("v1").await.unwrap();
    }
    assert!(issued.elapsed() >= Duration::from_millis(900), "renewed too early");
    assert_eq!(cloud.tokens_issued.load(Ordering::SeqCst), 2, "renewed once");
    // Cinder stops accepting the current token: one re-authentication, then success.
    cloud.revoked_below.store(3, Ordering::SeqCst);
    client.volume("v1").await.unwrap();
    assert_eq!(cloud.tokens_issued.load(Ordering::SeqCst), 3, "re-authenticated after a 401");
}

#[tokio::test]
async fn keystone_errors_name_no_secret() {
    let config = keystone_config("http://127.0.0.1:9");
    let client = CinderClient::new(&config).unwrap();
    let error = client.volume("v1").await.unwrap_err().to_string();
    assert!(!error.contains("s3cret-keystone"), "{error}");
    assert!(error.contains("Keystone token request"), "{error}");
}
