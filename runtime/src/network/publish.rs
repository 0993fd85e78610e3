//! Published ports: a host listener per `hostPort` (or `run --publish`) that carries each
//! connection it accepts into the pod's network, to the container port on the pod IP.

use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use tokio::task::JoinHandle;

use super::PodNetwork;

/// One port to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PortMapping {
    /// Where the host listens.
    pub(crate) host: SocketAddr,
    /// The port inside the pod.
    pub(crate) container_port: u16,
    /// The field or option it comes from, for errors.
    pub(crate) origin: String,
}

/// The running host listeners of a pod; dropping it closes them.
pub(crate) struct Published(Vec<JoinHandle<()>>);

impl Drop for Published {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Opens every host listener (all or none) and starts forwarding.
pub(crate) fn publish(
    pod: &Arc<PodNetwork>,
    ports: &[PortMapping],
) -> Result<Published, (String, std::io::Error)> {
    let mut listeners = Vec::new();
    for p in ports {
        let open = || {
            let std = std::net::TcpListener::bind(p.host)?;
            std.set_nonblocking(true)?;
            tokio::net::TcpListener::from_std(std)
        };
        match open() {
            Ok(l) => listeners.push((l, p.container_port)),
            Err(e) => return Err((format!("{}: cannot listen on {}", p.origin, p.host), e)),
        }
    }
    let tasks = listeners
        .into_iter()
        .map(|(listener, port)| tokio::spawn(forward(listener, Arc::downgrade(pod), port)))
        .collect();
    Ok(Published(tasks))
}

/// How long the accept loop of a published port waits after a failed accept.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);
/// Connections one published port carries at once; more wait in the kernel's backlog, so that
/// a flood of idle connections to one port costs the process a bounded number of descriptors.
const MAX_FORWARDED: usize = 256;

async fn forward(listener: tokio::net::TcpListener, pod: Weak<PodNetwork>, port: u16) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_FORWARDED));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (mut outside, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors (EMFILE/ENFILE) or memory: the pending connection stays
                // queued and accept would fail again at once. Wait instead of spinning.
                tracing::warn!(port, "cannot accept a published connection: {e}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Some(pod) = pod.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            let _slot = slot;
            match pod.connect_from_host(port).await {
                Ok(mut inside) => {
                    let _ = tokio::io::copy_bidirectional(&mut outside, &mut inside).await;
                }
                // Nothing listens in the pod: the host client sees its connection closed.
                Err(e) => tracing::debug!(%peer, port, "published connection refused: {e}"),
            }
        });
    }
}
