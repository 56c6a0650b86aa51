//! The NFS root probe's I/O: the server's portmapper (TCP 111) says where MOUNT v3 listens,
//! MOUNT's EXPORT lists the exports, and the path of the node's `nfsroot=` must be one of them
//! (or under one); then the kernel and initrd URLs the script loads must answer HEAD with 200.
//! The calls and replies are `bootvol_core::probe::rpc`'s; nothing is mounted.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use bootvol_core::probe::Status;
use bootvol_core::probe::rpc::{self, Assembled, PORTMAP_PORT, Record};

/// One call over a fresh TCP connection to `server:port`: the reply's record.
async fn call(server: &str, port: u16, request: &[u8]) -> Result<Vec<u8>, String> {
    let mut stream = TcpStream::connect((server, port))
        .await
        .map_err(|e| format!("connecting to {server}:{port}: {e}"))?;
    stream.write_all(request).await.map_err(|e| format!("{server}:{port}: {e}"))?;
    let mut record = Record::default();
    let mut buffer = vec![0u8; 8192];
    loop {
        let n = stream.read(&mut buffer).await.map_err(|e| format!("{server}:{port}: {e}"))?;
        if n == 0 {
            return Err(format!("{server}:{port} closed the connection before answering"));
        }
        match record.push(&buffer[..n]) {
            Assembled::Incomplete => {}
            Assembled::Done(reply) => return Ok(reply),
            Assembled::TooLarge => return Err(format!("{server}:{port}: the reply is too large")),
        }
    }
}

fn xid() -> u32 {
    uuid::Uuid::new_v4().as_u128() as u32
}

/// The export list of `server`, through its portmapper.
async fn exports(server: &str) -> Result<Vec<rpc::Export>, String> {
    let id = xid();
    let reply = call(server, PORTMAP_PORT, &rpc::getport_mount(id)).await.map_err(|e| {
        format!("portmapper: {e} (the MOUNT protocol is found through rpcbind; an NFSv4-only server without it cannot be probed)")
    })?;
    let port =
        rpc::parse_getport(&reply, id).map_err(|e| format!("portmapper at {server}: {e}"))?;
    if port == 0 {
        return Err(format!(
            "{server} runs no MOUNT v3 service over TCP (portmapper: not registered)"
        ));
    }
    let id = xid();
    let reply =
        call(server, port, &rpc::export_call(id)).await.map_err(|e| format!("MOUNT: {e}"))?;
    rpc::parse_exports(&reply, id).map_err(|e| format!("MOUNT EXPORT at {server}:{port}: {e}"))
}

/// The NFS root probe: the export, then the kernel and initrd.
pub(super) async fn probe(
    http: &super::http::Http,
    server: &str,
    path: &str,
    kernel_url: &str,
    initrd_url: &str,
    timeout: Duration,
) -> (Status, String) {
    let listed = match tokio::time::timeout(timeout, exports(server)).await {
        Ok(Ok(list)) => list,
        Ok(Err(e)) => return (Status::Failed, e),
        Err(_) => {
            return (
                Status::Failed,
                format!("{server}: no export list within {}s", timeout.as_secs()),
            );
        }
    };
    if !rpc::exports_path(&listed, path) {
        let names: Vec<&str> = listed.iter().take(8).map(|e| e.path.as_str()).collect();
        return (
            Status::Failed,
            format!(
                "{server} does not export {path} (exports: {})",
                if names.is_empty() { "none".to_owned() } else { names.join(", ") }
            ),
        );
    }
    for (what, url) in [("kernel", kernel_url), ("initrd", initrd_url)] {
        if let Err(e) = http.head(url).await {
            return (Status::Failed, format!("{server}:{path} exported, but the {what}: {e}"));
        }
    }
    (Status::Ok, format!("{server} exports {path}; kernel and initrd answer 200"))
}
