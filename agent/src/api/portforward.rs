//! `pods/{name}/portforward`: `kubectl port-forward` into the pod's network.
//!
//! kubectl 1.30+ asks for a WebSocket with the `SPDY/3.1+portforward.k8s.io` subprotocol and
//! carries SPDY/3.1 in its binary messages; older clients (and kubectl when the WebSocket is
//! refused) upgrade the connection to `SPDY/3.1` itself. Either way each local connection is a
//! pair of SPDY streams sharing a `requestID`: an error stream and a data stream, both naming
//! the `port`. Once both are open the agent connects to that port on the pod's IP
//! (`PodHandle::connect`) and copies bytes both ways; a refused port is reported on the error
//! stream in the kubelet's words, which kubectl prints.
//!
//! Bounded: [`MAX_CONNECTIONS`] connections of a session at once (more are refused with
//! RST_STREAM), [`MAX_PENDING`] streams waiting for their pair, stream ids only increasing (a
//! reused or lower id is a protocol error that ends the session, as SPDY has it), and every
//! connection's task ends with its session, which ends with its pod.
//!
//! Memory: the client's bytes wait for the pod in a buffer of their connection, at most
//! [`CONNECTION_BUFFER`] bytes each and [`SESSION_BUFFER`] for the whole session, whatever the
//! client's frame size. kubectl keeps no SPDY flow-control window, so the only brake on it is
//! the session's connection: while a connection's buffer is full the session reads no more
//! frames (a pod that reads slowly paces the session), and when a pod side has read nothing for
//! [`STALL`] with bytes waiting, that connection is reset (its error stream says why) and the
//! others go on. The pod's bytes go to the client [`CHUNK`] bytes at a time through [`QUEUE`]
//! frames shared by the session.

use std::future::Future;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use wasmpod::PodHandle;

mod channels;
mod session;

use session::session;

use super::spdy;
use super::stream::{self, Socket};
use super::{Api, Call};
use crate::body::Body;
use crate::status::ApiError;

/// The WebSocket subprotocol of SPDY tunnelled in binary messages (KEP-4006).
const TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";
/// The stream protocol asked for with a plain `Upgrade: SPDY/3.1`.
const PROTOCOL: &str = "portforward.k8s.io";
/// Connections of one session at once.
pub(crate) const MAX_CONNECTIONS: usize = 128;
/// Streams waiting for the other of their pair.
const MAX_PENDING: usize = 64;
/// The largest data frame sent, what is read from the pod at once, and the largest piece of a
/// client's frame held.
const CHUNK: usize = 32 * 1024;
/// Frames waiting to be written to the client, for the whole session.
const QUEUE: usize = 8;
/// The most bytes of the client's held for one connection, not yet read by the pod.
pub(crate) const CONNECTION_BUFFER: usize = 256 * 1024;
/// The most bytes of the client's held for all the connections of a session together.
pub(crate) const SESSION_BUFFER: usize = 4 * 1024 * 1024;
/// How long a connection's pod side may read nothing while its bytes wait before the
/// connection is reset.
pub(crate) const STALL: Duration = Duration::from_secs(1);

impl Api {
    /// `pods/{name}/portforward`: connections into the pod's network, over WebSocket or SPDY.
    pub(super) async fn portforward(
        &self,
        ns: &str,
        name: &str,
        call: &Call,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, ApiError> {
        let pod = stream::running(self, ns, name)?;
        let seat = self.sessions.enter(&pod.uid)?;
        let target = Target {
            pod: pod.handle,
            which: format!("pod {name}, uid {}", pod.uid),
        };
        if let Some(protocol) =
            stream::chosen(&req, channels::PROTOCOLS).filter(|_| !stream::wants(&req, &[TUNNEL]))
        {
            let ports = channels::ports(call.raw_query.as_deref())?;
            let max = channels::MAX_MESSAGE;
            let (answer, socket) = stream::accept("port-forward", req, &[protocol], max)?;
            tokio::spawn(async move {
                let _seat = seat;
                if let Some(socket) = socket.await {
                    let base64 = protocol.contains("base64");
                    channels::session(socket, base64, ports, target).await;
                }
            });
            return Ok(answer);
        }
        if stream::wants(&req, &[TUNNEL]) {
            let (answer, socket) = stream::accept("port-forward", req, &[TUNNEL], stream::MESSAGE)?;
            tokio::spawn(async move {
                let _seat = seat;
                if let Some(socket) = socket.await {
                    session(tunnel(socket), target).await;
                }
            });
            return Ok(answer);
        }
        let spdy = req
            .headers()
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("SPDY/3.1"));
        let protocol = req
            .headers()
            .get_all("x-stream-protocol-version")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|p| p.trim() == PROTOCOL);
        if !(spdy && protocol) {
            return Err(ApiError::bad_request(format!(
                "port-forward is served over WebSocket with the {TUNNEL} protocol (kubectl's) or \
                 the {} protocols (with the ports in the query), or an upgrade to SPDY/3.1 with \
                 {PROTOCOL}",
                channels::PROTOCOLS.join(" or ")
            )));
        }
        tokio::spawn(async move {
            let _seat = seat;
            match hyper::upgrade::on(req).await {
                Ok(upgraded) => session(TokioIo::new(upgraded), target).await,
                Err(e) => tracing::debug!("port-forward upgrade: {e}"),
            }
        });
        let mut r = Response::new(Body::full(Vec::new()));
        *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let h = r.headers_mut();
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        h.insert(
            "x-stream-protocol-version",
            HeaderValue::from_static(PROTOCOL),
        );
        Ok(r)
    }
}

/// The SPDY byte stream inside a WebSocket's binary messages, as a byte stream.
fn tunnel(socket: Socket) -> tokio::io::DuplexStream {
    let (session, pumps) = tokio::io::duplex(2 * CHUNK);
    let (mut from_pumps, mut to_pumps) = tokio::io::split(pumps);
    let (mut sink, mut messages) = socket.split();
    tokio::spawn(async move {
        while let Some(Ok(message)) = messages.next().await {
            match message {
                Message::Binary(bytes) if to_pumps.write_all(&bytes).await.is_err() => break,
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = to_pumps.shutdown().await;
    });
    tokio::spawn(async move {
        let mut buf = vec![0; CHUNK + 64];
        loop {
            match from_pumps.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let message = Message::Binary(buf[..n].to_vec().into());
                    if sink.send(message).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = sink.close().await;
    });
    session
}

/// Where a session's connections go: a pod, or a stand-in in tests.
pub(crate) trait Dial: Send + Sync + 'static {
    /// A connection into the pod's network.
    type Connection: AsyncRead + AsyncWrite + Send + 'static;
    /// Connects to `port` in the pod.
    fn connect(&self, port: u16) -> impl Future<Output = std::io::Result<Self::Connection>> + Send;
    /// Ends when the pod is gone.
    fn ended(&self) -> impl Future<Output = ()> + Send;
    /// The pod, as the kubelet's messages name it.
    fn which(&self) -> &str;
}

/// A running pod.
struct Target {
    pod: PodHandle,
    which: String,
}

impl Dial for Target {
    type Connection = wasmpod::PodConnection;

    async fn connect(&self, port: u16) -> std::io::Result<wasmpod::PodConnection> {
        self.pod.connect(port).await
    }

    async fn ended(&self) {
        self.pod.deleted().await
    }

    fn which(&self) -> &str {
        &self.which
    }
}

#[cfg(test)]
mod tests;
