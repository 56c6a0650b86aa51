//! `/files/<path>` (regular files under `[http] files_root`) and `/ipxe/<path>` (the iPXE
//! binaries under `[tftp] root`, for UEFI HTTP Boot, whose firmware needs Content-Length; the
//! EFI ones signed with `[secure_boot]`'s key, `crate::secure_boot`), both
//! confined by `files::FileRoot`, with Content-Length, Range and HEAD (tower-http's `ServeFile`
//! answers once the path is resolved and confined here).
//!
//! A response streams: the file is read `CHUNK` bytes at a time, each read only when hyper asks
//! for more (it stops asking while `http::listener::MAX_BUF` bytes wait for the socket), so a
//! client that does not read holds a bounded amount of memory, until `send_timeout` cuts it.

use std::sync::Arc;

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tower::ServiceExt;
use tower_http::services::ServeFile;

use super::BootState;
use crate::secure_boot::SignedBinaries;
use bootvol_core::files::FileError;
use bootvol_runtime::logging::Peer;

/// Bytes of a file read at a time (tower-http's default is 64 KiB).
pub(super) const CHUNK: usize = 8 * 1024;

/// `/files/<path>`: under `[http] files_root`.
pub(super) async fn serve(
    State(state): State<Arc<BootState>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Path(path): Path<String>,
    request: Request<Body>,
) -> Response {
    let Some(root) = state.files.clone() else {
        return (StatusCode::NOT_FOUND, "no files_root\n").into_response();
    };
    serve_under(client, path, request, move |path| root.resolve(path).map_err(Some)).await
}

/// `/ipxe/<path>`: under `[tftp] root`, the same binaries TFTP serves.
pub(super) async fn ipxe(
    State(state): State<Arc<BootState>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Path(path): Path<String>,
    request: Request<Body>,
) -> Response {
    let Some(root) = state.ipxe.clone() else {
        return (StatusCode::NOT_FOUND, "no tftp root\n").into_response();
    };
    match state.signed.clone().filter(|_| SignedBinaries::signs(&path)) {
        // The EFI binaries signed with `[secure_boot]`'s key, as TFTP serves them.
        Some(signed) => serve_under(client, path, request, move |path| signed.served(path)).await,
        None => {
            serve_under(client, path, request, move |path| root.resolve(path).map_err(Some)).await
        }
    }
}

/// Serves the file `resolve` finds for `path` (on a blocking thread): `Err(None)` is a fault of
/// the server, already logged.
async fn serve_under(
    client: SocketAddr,
    path: String,
    request: Request<Body>,
    resolve: impl FnOnce(&str) -> Result<std::path::PathBuf, Option<FileError>> + Send + 'static,
) -> Response {
    let method = request.method().clone();
    let resolved = match tokio::task::spawn_blocking({
        let path = path.clone();
        move || resolve(&path)
    })
    .await
    {
        Ok(result) => result,
        Err(_) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    };
    let file = match resolved {
        Ok(file) => file,
        Err(None) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        Err(Some(FileError::NotFound)) => {
            tracing::info!(client = %Peer(client), %method, path, status = 404, "file");
            return (StatusCode::NOT_FOUND, "not found\n").into_response();
        }
        Err(Some(FileError::Denied(why))) => {
            tracing::warn!(client = %Peer(client), %method, path, status = 403, why, "file refused");
            return (StatusCode::FORBIDDEN, "forbidden\n").into_response();
        }
    };
    let range = request
        .headers()
        .get(axum::http::header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match ServeFile::new(file).with_buf_chunk_size(CHUNK).oneshot(request).await {
        Ok(response) => {
            tracing::info!(client = %Peer(client), %method, path, status = response.status().as_u16(), range, "file");
            response.into_response()
        }
        Err(e) => {
            tracing::warn!(client = %Peer(client), %method, path, error = %e, "file");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
