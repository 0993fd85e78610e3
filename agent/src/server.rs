//! The HTTPS listener: TLS (rustls), HTTP/1.1 (hyper) with upgrades for `exec`, a bound on
//! connections and on the time a client may take to send its request head.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use crate::api::Api;

/// Connections served at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 1024;
/// How long a client has for the TLS handshake and for each request head.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves the API on `listener` until `stop` turns true.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    api: Arc<Api>,
    mut stop: watch::Receiver<bool>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await.map(|_| ());
    };
    tokio::pin!(stopped);
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
            () = &mut stopped => return,
        };
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
            () = &mut stopped => return,
        };
        let (acceptor, api) = (acceptor.clone(), api.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return tracing::debug!(%peer, "TLS handshake: {e}"),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            };
            let service = service_fn(move |req| {
                let api = api.clone();
                async move { Ok::<_, Infallible>(api.handle(req).await) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HANDSHAKE_TIMEOUT)
                .max_buf_size(1 << 20)
                .serve_connection(TokioIo::new(tls), service)
                .with_upgrades();
            if let Err(e) = conn.await {
                tracing::debug!(%peer, "connection: {e}");
            }
        });
    }
}
