//! The HTTPS listener: TLS (rustls), HTTP/1.1 (hyper) with upgrades for `exec`, and the bounds
//! that keep a peer without the token from degrading service for those with it.
//!
//! A connection is *pending* from its accept until a request of it carries the token. Pending
//! connections have their own slots ([`MAX_PENDING`]), apart from the authenticated ones
//! ([`MAX_CONNECTIONS`]): when every pending slot is taken, a new connection takes the oldest
//! one's (which is closed), so connections that never authenticate cannot keep newer ones out. A
//! pending connection has [`PENDING_TIMEOUT`] in all for its TLS handshake and its first
//! authenticated request; a request without the token is answered 401 and its connection closed.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderValue, Response, header};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;

use crate::api::Api;
use crate::body::Body;
use crate::status::ApiError;

/// Authenticated connections served at once; past it, a newly authenticated connection is
/// answered 429 and closed.
const MAX_CONNECTIONS: usize = 1024;
/// Connections not yet authenticated, at once.
const MAX_PENDING: usize = 256;
/// How long a connection may stay unauthenticated: its TLS handshake and its first request.
const PENDING_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client has for each request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The connections' slots.
struct Gate {
    authenticated: Arc<Semaphore>,
    /// Pending connections, oldest first.
    pending: Mutex<VecDeque<(u64, CancellationToken)>>,
    next: AtomicU64,
}

impl Gate {
    /// A new pending connection's slot; the oldest pending one is closed if none is free.
    fn admit(self: &Arc<Self>) -> Conn {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let evicted = CancellationToken::new();
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.len() >= MAX_PENDING
            && let Some((_, oldest)) = pending.pop_front()
        {
            oldest.cancel();
        }
        pending.push_back((id, evicted.clone()));
        Conn {
            id,
            gate: self.clone(),
            evicted,
            slot: Mutex::new(None),
        }
    }

    fn forget(&self, id: u64) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = pending.iter().position(|(p, _)| *p == id) {
            pending.remove(i);
        }
    }
}

/// One connection's standing.
struct Conn {
    id: u64,
    gate: Arc<Gate>,
    /// Cancelled when a newer pending connection took its slot.
    evicted: CancellationToken,
    /// Its authenticated slot, once it has one.
    slot: Mutex<Option<OwnedSemaphorePermit>>,
}

impl Conn {
    fn authenticated(&self) -> bool {
        self.slot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Moves the connection to an authenticated slot; false when none is free.
    fn authenticate(&self) -> bool {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return true;
        }
        match self.gate.authenticated.clone().try_acquire_owned() {
            Ok(permit) => {
                *slot = Some(permit);
                self.gate.forget(self.id);
                true
            }
            Err(_) => false,
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.gate.forget(self.id);
    }
}

/// An answer after which the connection is closed.
fn closing(e: &ApiError) -> Response<Body> {
    let mut r = crate::api::json(e.code, &e.to_json());
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// Serves the API on `listener` until `stop` turns true.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    api: Arc<Api>,
    mut stop: watch::Receiver<bool>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let gate = Arc::new(Gate {
        authenticated: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
        pending: Mutex::new(VecDeque::with_capacity(MAX_PENDING)),
        next: AtomicU64::new(0),
    });
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await.map(|_| ());
    };
    tokio::pin!(stopped);
    // Every connection's task holds a sender: once they have all ended, what they held (the
    // API, its store) is released.
    let shutdown = CancellationToken::new();
    let (alive, mut ended) = tokio::sync::mpsc::channel::<()>(1);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: wait a little rather than spin.
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut stopped => break,
        };
        let conn = Arc::new(gate.admit());
        let (acceptor, api) = (acceptor.clone(), api.clone());
        let (shutdown, alive) = (shutdown.clone(), alive.clone());
        let connection = async move {
            let deadline = tokio::time::Instant::now() + PENDING_TIMEOUT;
            let tls = tokio::select! {
                tls = tokio::time::timeout_at(deadline, acceptor.accept(tcp)) => match tls {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => return tracing::debug!(%peer, "TLS handshake: {e}"),
                    Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
                },
                () = conn.evicted.cancelled() => return,
            };
            let service = {
                let conn = conn.clone();
                service_fn(move |req| {
                    let (api, conn) = (api.clone(), conn.clone());
                    async move {
                        if api.authenticate(&req).is_none() {
                            return Ok::<_, Infallible>(closing(&ApiError::unauthorized()));
                        }
                        if !conn.authenticate() {
                            return Ok(closing(&ApiError::too_many_requests(format!(
                                "the node serves at most {MAX_CONNECTIONS} connections"
                            ))));
                        }
                        Ok(api.handle(req).await)
                    }
                })
            };
            let served = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(1 << 20)
                .serve_connection(TokioIo::new(tls), service)
                .with_upgrades();
            tokio::pin!(served);
            loop {
                tokio::select! {
                    done = &mut served => {
                        if let Err(e) = done {
                            tracing::debug!(%peer, "connection: {e}");
                        }
                        return;
                    }
                    () = conn.evicted.cancelled(), if !conn.authenticated() => {
                        return tracing::debug!(%peer, "unauthenticated connection closed for a newer one");
                    }
                    () = tokio::time::sleep_until(deadline), if !conn.authenticated() => {
                        if !conn.authenticated() {
                            return tracing::debug!(%peer, "no authenticated request in time");
                        }
                    }
                }
            }
        };
        tokio::spawn(async move {
            tokio::select! {
                () = connection => {}
                () = shutdown.cancelled() => {}
            }
            drop(alive);
        });
    }
    // Stopped: open connections (watches, log follows, sessions) end with the server.
    shutdown.cancel();
    drop(alive);
    let _ = ended.recv().await;
}
