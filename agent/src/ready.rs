//! Whether the agent does its work (what `wasmpod serve` tells systemd): the pods the store held
//! at its start run again, and the API answers a client's request, through TLS, the token check
//! and a read of the store, as kubectl's would be.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasmpod::k8s_openapi::api::core::v1::PodStatus;

/// Whether a pod brought back after a restart runs again: a container of it runs, or waits for
/// a reason other than being made (an image that cannot be pulled, a crash-loop backoff), or
/// the pod has ended or cannot be placed on the node. (A container that has terminated and will
/// start again does not count: the instance the restart lost is reported so.)
pub(crate) fn started_again(status: &PodStatus) -> bool {
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return true;
    }
    let unschedulable = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "PodScheduled" && c.status == "False");
    let container_moved = status
        .init_container_statuses
        .iter()
        .chain(&status.container_statuses)
        .flatten()
        .filter_map(|c| c.state.as_ref())
        .any(|s| {
            s.running.is_some()
                || s.waiting.as_ref().is_some_and(|w| {
                    !matches!(
                        w.reason.as_deref(),
                        None | Some("ContainerCreating" | "PodInitializing")
                    )
                })
        });
    unschedulable || container_moved
}

/// The most bytes of the answer read (its status line is all that counts).
const ANSWER: usize = 4096;

/// Asks the API at `addr` for the `default` Namespace as a client would, with `token`, trusting
/// only `ca_pem`; `Ok` when it answers 200 within `limit`.
pub(crate) async fn ask(
    addr: SocketAddr,
    ca_pem: &str,
    token: &str,
    limit: Duration,
) -> Result<(), String> {
    tokio::time::timeout(limit, ask_once(addr, ca_pem, token))
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {limit:?}")))
}

async fn ask_once(addr: SocketAddr, ca_pem: &str, token: &str) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // The serving certificate names the loopback addresses and the listening one.
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    let tcp = tokio::net::TcpStream::connect((ip, addr.port()))
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::IpAddress(ip.into()), tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let request = format!(
        "GET /api/v1/namespaces/default HTTP/1.1\r\nHost: {ip}\r\nAuthorization: Bearer \
         {token}\r\nConnection: close\r\n\r\n"
    );
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    (&mut tls)
        .take(ANSWER as u64)
        .read_to_end(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    let line = answer.split(|b| *b == b'\r').next().unwrap_or_default();
    match line.strip_prefix(b"HTTP/1.1 ") {
        Some(rest) if rest.starts_with(b"200") => Ok(()),
        _ => Err(format!("answered {:?}", String::from_utf8_lossy(line))),
    }
}
