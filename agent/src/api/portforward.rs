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
//! RST_STREAM), [`MAX_PENDING`] streams waiting for their pair, [`CHUNK`]-byte data frames, and a
//! few chunks buffered each way per connection (a side that does not read slows the other). A
//! session ends with its pod.

use std::collections::HashMap;

use futures_util::{SinkExt, StreamExt};
use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use wasmpod::PodHandle;

use super::spdy::{self, Frame};
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
/// The largest data frame sent, and what is read from the pod at once.
const CHUNK: usize = 32 * 1024;
/// Chunks buffered each way per connection, and frames waiting to be written to the client.
const QUEUE: usize = 8;

impl Api {
    /// `pods/{name}/portforward`: connections into the pod's network, over WebSocket or SPDY.
    pub(super) async fn portforward(
        &self,
        ns: &str,
        name: &str,
        _call: &Call,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, ApiError> {
        let pod = stream::running(self, ns, name)?;
        let seat = self.sessions.enter(&pod.uid)?;
        let target = Target {
            pod: pod.handle,
            name: name.to_owned(),
            uid: pod.uid,
        };
        if stream::wants(&req, &[TUNNEL]) {
            let (answer, socket) = stream::accept("port-forward", req, &[TUNNEL])?;
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
                "port-forward is served over WebSocket with the {TUNNEL} protocol, or an upgrade to \
                 SPDY/3.1 with {PROTOCOL}"
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

/// Where a session's connections go.
struct Target {
    pod: PodHandle,
    name: String,
    uid: String,
}

/// A stream waiting for the other of its pair.
#[derive(Default)]
struct Pair {
    error: Option<u32>,
    data: Option<u32>,
    port: Option<u16>,
}

/// A forwarded connection: where the client's bytes for it go, and its task.
struct Connection {
    to_pod: Option<mpsc::Sender<Vec<u8>>>,
    task: JoinHandle<()>,
}

/// Serves one session until the client or the pod goes.
async fn session(io: impl AsyncRead + AsyncWrite + Send + 'static, target: Target) {
    let (reader, mut writer) = tokio::io::split(io);
    let (out, mut frames) = mpsc::channel::<Vec<u8>>(QUEUE);
    let write = tokio::spawn(async move {
        while let Some(frame) = frames.recv().await {
            if writer.write_all(&frame).await.is_err() {
                return;
            }
        }
        let _ = writer.shutdown().await;
    });
    let mut reader = spdy::Reader::new(reader);
    let mut replies = spdy::Writer::new();
    let mut pending: HashMap<String, Pair> = HashMap::new();
    // By data stream id.
    let mut connections: HashMap<u32, Connection> = HashMap::new();
    let ended = target.pod.deleted();
    tokio::pin!(ended);
    loop {
        let frame = tokio::select! {
            frame = reader.next() => frame,
            () = &mut ended => break,
        };
        let frame = match frame {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(pod = %target.name, "port-forward: {e}");
                break;
            }
        };
        connections.retain(|_, c| !c.task.is_finished());
        let sent = match frame {
            Frame::SynStream { id, headers } => {
                let header = |name: &str| {
                    headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(name))
                        .map(|(_, v)| v.as_str())
                };
                let port = header("port").and_then(|p| p.parse::<u16>().ok());
                let request = header("requestid").unwrap_or("").to_owned();
                let kind = header("streamtype").unwrap_or("");
                if port.is_none_or(|p| p == 0) || !matches!(kind, "error" | "data") {
                    out.send(spdy::rst_stream(id, spdy::PROTOCOL_ERROR)).await
                } else if connections.len() >= MAX_CONNECTIONS
                    || (pending.len() >= MAX_PENDING && !pending.contains_key(&request))
                {
                    out.send(spdy::rst_stream(id, spdy::REFUSED_STREAM)).await
                } else {
                    let reply = out.send(replies.syn_reply(id)).await;
                    let pair = pending.entry(request.clone()).or_default();
                    pair.port = port;
                    match kind {
                        "error" => pair.error = Some(id),
                        _ => pair.data = Some(id),
                    }
                    if let Pair {
                        error: Some(error),
                        data: Some(data),
                        port: Some(port),
                    } = *pair
                    {
                        pending.remove(&request);
                        let (to_pod, from_client) = mpsc::channel(QUEUE);
                        let task = tokio::spawn(forward(
                            target.pod.clone(),
                            port,
                            (error, data),
                            from_client,
                            out.clone(),
                            format!("pod {}, uid {}", target.name, target.uid),
                        ));
                        connections.insert(
                            data,
                            Connection {
                                to_pod: Some(to_pod),
                                task,
                            },
                        );
                    }
                    reply
                }
            }
            Frame::Data { id, fin, data } => {
                if let Some(c) = connections.get_mut(&id) {
                    if !data.is_empty()
                        && let Some(to_pod) = &c.to_pod
                        && to_pod.send(data).await.is_err()
                    {
                        c.to_pod = None;
                    }
                    if fin {
                        // The pod reads its end of file.
                        c.to_pod = None;
                    }
                }
                Ok(())
            }
            Frame::RstStream { id } => {
                if let Some(c) = connections.remove(&id) {
                    c.task.abort();
                }
                Ok(())
            }
            Frame::Ping { id } => out.send(spdy::ping(id)).await,
            Frame::GoAway => break,
            Frame::Ignored => Ok(()),
        };
        if sent.is_err() {
            break;
        }
    }
    for c in connections.into_values() {
        c.task.abort();
    }
    drop(out);
    let _ = write.await;
}

/// One connection: to `port` in the pod, the client's bytes from `from_client`, the pod's to
/// the data stream; the error stream carries why it could not connect, then ends.
async fn forward(
    pod: PodHandle,
    port: u16,
    (error, data): (u32, u32),
    mut from_client: mpsc::Receiver<Vec<u8>>,
    out: mpsc::Sender<Vec<u8>>,
    which: String,
) {
    let connection = match pod.connect(port).await {
        Ok(c) => c,
        Err(e) => {
            let message = format!(
                "error forwarding port {port} to {which}: failed to connect to localhost:{port} \
                 inside the pod's network: {e}"
            );
            let _ = out.send(spdy::data(error, true, message.as_bytes())).await;
            let _ = out.send(spdy::data(data, true, &[])).await;
            return;
        }
    };
    let (mut from_pod, mut to_pod) = tokio::io::split(connection);
    let inbound = async move {
        while let Some(bytes) = from_client.recv().await {
            if to_pod.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to_pod.shutdown().await;
    };
    let outbound = {
        let out = out.clone();
        async move {
            let mut buf = vec![0; CHUNK];
            loop {
                match from_pod.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if out.send(spdy::data(data, false, &buf[..n])).await.is_err() {
                            return;
                        }
                    }
                }
            }
            // kubectl reads the error stream to its end once the data stream ended.
            let _ = out.send(spdy::data(data, true, &[])).await;
            let _ = out.send(spdy::data(error, true, &[])).await;
        }
    };
    // Each side ends on its own (a client done writing may still read the pod's answer); the
    // client resets the streams when its local connection closes.
    tokio::join!(inbound, outbound);
}
