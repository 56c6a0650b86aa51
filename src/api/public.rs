//! The API listener's public routes, answered without authentication (they never reach the
//! dispatcher, where the API authenticates): `GET /healthz` (200 while the process runs),
//! `GET /readyz` (200 when boots can be served, 503 with the reason otherwise) and
//! `GET /metrics` (OpenMetrics text). What they say comes from `bootvol_runtime::metrics`; none of it
//! names a node, a MAC or an address.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::ApiState;

const TEXT: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");

pub(super) async fn healthz() -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, TEXT)], "ok\n").into_response()
}

pub(super) async fn readyz(State(state): State<ApiState>) -> Response {
    let (ready, text) = state.inner.metrics.readiness().await;
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, [(header::CONTENT_TYPE, TEXT)], text).into_response()
}

pub(super) async fn metrics(State(state): State<ApiState>) -> Response {
    let text = state.inner.metrics.scrape().await;
    let kind = HeaderValue::from_static(bootvol_runtime::metrics::CONTENT_TYPE);
    (StatusCode::OK, [(header::CONTENT_TYPE, kind)], text).into_response()
}
