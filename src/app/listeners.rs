//! The listeners `serve` answers on: bound by the caller ([`Listeners`], so tests run the real
//! thing on port 0), started on a tracked task each ([`Running::start`]), and drained at
//! shutdown within the deadline ([`Running::drain`]): the boot HTTP listener's end (an error,
//! or shutdown) ends the others.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use bootvol_core::config::Config;
use bootvol_edge::http::listener::{serve, serve_tls};
use bootvol_edge::http::tls::Tls;
use bootvol_edge::http::{BootState, router};
use bootvol_edge::tftp_files::TftpBootFiles;
use bootvol_runtime::liveness::Liveness;

use super::DRAIN_TIMEOUT;
use crate::api::ApiState;

/// The sockets `serve` answers on, bound by the caller.
#[derive(Debug)]
pub struct Listeners {
    pub http: TcpListener,
    pub tftp: UdpSocket,
    /// The Ironic-compatible REST API (`[api] listen`).
    pub api: TcpListener,
    /// `/metrics`, `/healthz` and `/readyz` alone (`[metrics] listen`), when configured.
    pub metrics: Option<TcpListener>,
}

impl Listeners {
    /// Binds the addresses the configuration names.
    pub async fn bind(config: &Config) -> Result<Listeners> {
        let http = TcpListener::bind(config.http.listen)
            .await
            .with_context(|| format!("binding the boot HTTP listener on {}", config.http.listen))?;
        let tftp = UdpSocket::bind(config.tftp.listen)
            .await
            .with_context(|| format!("binding the TFTP listener on {}", config.tftp.listen))?;
        let api = TcpListener::bind(config.api.listen)
            .await
            .with_context(|| format!("binding the REST API listener on {}", config.api.listen))?;
        let metrics = match config.metrics.listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("binding the metrics listener on {addr}"))?,
            ),
            None => None,
        };
        Ok(Listeners { http, tftp, api, metrics })
    }

    /// Where the boot HTTP, TFTP and API listeners answer.
    pub fn addresses(&self) -> Result<(SocketAddr, SocketAddr, SocketAddr)> {
        Ok((self.http.local_addr()?, self.tftp.local_addr()?, self.api.local_addr()?))
    }
}

/// What the listeners serve.
#[derive(Debug)]
pub(crate) struct Served {
    pub(crate) boot: BootState,
    pub(crate) tftp: Arc<TftpBootFiles>,
    pub(crate) api: ApiState,
    pub(crate) api_tls: Option<Tls>,
    /// What the admin page's live streams hear from.
    pub(crate) live: Arc<crate::admin::Feed>,
}

type Listening = JoinHandle<std::io::Result<()>>;

/// The running listeners, each on a task of the tracker `serve` drains.
#[derive(Debug)]
pub(crate) struct Running {
    boot: Listening,
    tftp: Listening,
    api: Listening,
    /// The loopback API and the metrics listener: their errors are logged, not returned.
    others: Vec<(&'static str, Listening)>,
}

impl Running {
    /// Starts every listener on a task of `tracker`.
    pub(crate) async fn start(
        config: &Config,
        listeners: Listeners,
        served: Served,
        tracker: &TaskTracker,
        shutdown: &CancellationToken,
        liveness: &Liveness,
    ) -> Result<Running> {
        let Served { boot, tftp, api: api_state, api_tls, live } = served;
        let tftp = tracker.spawn(bootvol_tftp::serve_with_heartbeat(
            listeners.tftp,
            tftp,
            super::tftp_config(config),
            shutdown.clone(),
            DRAIN_TIMEOUT,
            liveness.register("tftp"),
        ));
        let mut others = Vec::new();
        if let Some(listener) = listeners.metrics {
            tracing::info!(metrics = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving /metrics, /healthz and /readyz");
            let app = crate::api::public_router(api_state.clone());
            let limits = config.metrics.connection_limits();
            let heart = liveness.register("metrics http");
            let task = serve("metrics", listener, app, limits, shutdown.clone(), heart);
            others.push(("metrics listener", tracker.spawn(task)));
        }
        if let Some(tls) = &api_tls {
            tracing::info!(api = %listeners.api.local_addr()?, cert = %tls.cert.display(), sha256 = %tls.fingerprint, "the API and admin page answer TLS only");
        }
        if let Some(addr) = config.api.loopback_listen {
            let listener = TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the loopback REST API listener on {addr}"))?;
            tracing::info!(api = %addr, "serving the REST API (plain HTTP, no admin page) on loopback");
            let app = crate::api::router(api_state.clone());
            let heart = liveness.register("api loopback http");
            let limits = config.api.connection_limits();
            let task = serve("api loopback", listener, app, limits, shutdown.clone(), heart);
            others.push(("loopback REST API listener", tracker.spawn(task)));
        }
        let app =
            crate::api::router(api_state.clone()).merge(crate::admin::router(api_state, live));
        let api = tracker.spawn(serve_tls(
            "api",
            listeners.api,
            app,
            config.api.connection_limits(),
            api_tls.map(|tls| tls.acceptor),
            shutdown.clone(),
            liveness.register("api http"),
        ));
        let boot = tracker.spawn(serve(
            "boot",
            listeners.http,
            router(boot),
            config.http.connection_limits(),
            shutdown.clone(),
            liveness.register("boot http"),
        ));
        Ok(Running { boot, tftp, api, others })
    }

    /// Waits for the boot HTTP listener to end (an error, or shutdown and its drain), calls
    /// `stopping`, then ends the others (`shutdown` is cancelled) and waits for them until the
    /// drain deadline, which it returns with the first error of the boot HTTP, TFTP and API
    /// listeners.
    pub(crate) async fn drain(
        self,
        shutdown: &CancellationToken,
        stopping: impl FnOnce(),
    ) -> (Result<()>, tokio::time::Instant) {
        let boot = tokio::select! {
            result = self.boot => joined(result, "boot HTTP listener"),
            () = async { shutdown.cancelled().await; tokio::time::sleep(DRAIN_TIMEOUT).await } => {
                tracing::warn!("drain timeout: exiting with requests still in flight");
                Ok(())
            }
        };
        stopping();
        shutdown.cancel();
        let deadline = tokio::time::Instant::now() + DRAIN_TIMEOUT;
        let tftp = joined(self.tftp.await, "TFTP listener");
        let api = match tokio::time::timeout_at(deadline, self.api).await {
            Ok(result) => joined(result, "REST API listener"),
            Err(_) => {
                tracing::warn!("drain timeout: REST API requests still in flight");
                Ok(())
            }
        };
        for (name, listener) in self.others {
            if let Ok(result) = tokio::time::timeout_at(deadline, listener).await
                && let Err(e) = joined(result, name)
            {
                tracing::warn!(error = %e, "{name}");
            }
        }
        (boot.and(tftp).and(api), deadline)
    }
}

fn joined(
    result: Result<std::io::Result<()>, tokio::task::JoinError>,
    name: &'static str,
) -> Result<()> {
    match result {
        Ok(result) => result.context(name),
        Err(e) => Err(anyhow::anyhow!("{name} task: {e}")),
    }
}
