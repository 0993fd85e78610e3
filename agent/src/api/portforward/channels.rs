//! `pods/{name}/portforward` over the WebSocket channel protocol the kube-apiserver serves and the
//! Python and JavaScript clients speak (`v4.channel.k8s.io`, or `v4.base64.channel.k8s.io`
//! with base64 text messages): the ports are the request's `ports` parameters, and port `i` has
//! two channels, `2i` its data both ways and `2i + 1` its errors (from the agent), each opened
//! by the port number (two bytes, little-endian). Each port is connected when the session
//! opens; one nothing listens on gets its error and stays silent while the others go on. The
//! session ends when the client leaves, the pod goes, or every port's connection has ended.
//!
//! Bounded as kubectl's tunnel is ([`super`]): at most [`MAX_PORTS`] ports, the
//! client's bytes held at most [`CONNECTION_BUFFER`] a port (a port whose pod side reads nothing
//! for [`STALL`] while they wait is closed with its error, and the others go on), a client's
//! message for a port at most [`stream::MESSAGE`] bytes (a larger one closes that port), any
//! message at most [`MAX_MESSAGE`].

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::{CONNECTION_BUFFER, Dial, STALL};
use crate::api::stream::{self, Socket};
use crate::status::ApiError;

/// The subprotocols of this port-forward.
pub(super) const PROTOCOLS: &[&str] = &["v4.channel.k8s.io", "v4.base64.channel.k8s.io"];
/// Ports of one session (each takes two of a message's 256 channels).
pub(super) const MAX_PORTS: usize = 64;
/// The largest message taken from a client; a larger one ends the session.
pub(super) const MAX_MESSAGE: usize = 1 << 20;
/// What is read from the pod at once: one message to the client.
const CHUNK: usize = 32 * 1024;
/// Messages waiting to be written to the client, for the whole session.
const QUEUE: usize = 8;

/// The ports of the request's `ports` parameters (repeated, or separated by commas).
pub(super) fn ports(raw_query: Option<&str>) -> Result<Vec<u16>, ApiError> {
    let mut ports = Vec::new();
    for value in crate::api::repeated(raw_query, "ports") {
        for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.parse::<u16>() {
                Ok(port) if port > 0 => ports.push(port),
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "ports: invalid port {part:?}: must be between 1 and 65535"
                    )));
                }
            }
        }
    }
    if ports.is_empty() {
        return Err(ApiError::bad_request(
            "ports: at least one port is required for port-forward over WebSocket",
        ));
    }
    if ports.len() > MAX_PORTS {
        return Err(ApiError::bad_request(format!(
            "ports: at most {MAX_PORTS} ports a session"
        )));
    }
    Ok(ports)
}

/// One port of a session: where the client's bytes for it go, while it is open.
struct Port {
    port: u16,
    to_pod: Option<mpsc::Sender<Vec<u8>>>,
    /// The task carrying its connection (none for a port that could not connect).
    carried: Option<tokio::task::AbortHandle>,
}

/// A session: `ports` of the pod `target` over `ws`, base64 text messages when `base64`.
pub(super) async fn session<D: Dial>(ws: Socket, base64: bool, ports: Vec<u16>, target: D) {
    let target = Arc::new(target);
    let (mut sink, mut messages) = ws.split();
    let (out, mut outbox) = mpsc::channel::<(u8, Vec<u8>)>(QUEUE);
    let writer = tokio::spawn(async move {
        while let Some((channel, data)) = outbox.recv().await {
            let message = if base64 {
                let digit = stream::channel_digit(channel);
                Message::Text(format!("{digit}{}", BASE64.encode(&data)).into())
            } else {
                let mut frame = Vec::with_capacity(data.len() + 1);
                frame.push(channel);
                frame.extend_from_slice(&data);
                Message::Binary(frame.into())
            };
            if sink.send(message).await.is_err() {
                return;
            }
        }
        let normal = CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        };
        let _ = sink.send(Message::Close(Some(normal))).await;
    });
    let mut open = Vec::with_capacity(ports.len());
    let mut carried = JoinSet::new();
    for (i, &port) in ports.iter().enumerate() {
        let (data, error) = (channel(i), channel(i) + 1);
        for c in [data, error] {
            if out.send((c, port.to_le_bytes().to_vec())).await.is_err() {
                return;
            }
        }
        match target.connect(port).await {
            Ok(connection) => {
                let (to_pod, from_client) = mpsc::channel(CONNECTION_BUFFER / CHUNK);
                let task = carried.spawn(carry(connection, port, data, from_client, out.clone()));
                open.push(Port {
                    port,
                    to_pod: Some(to_pod),
                    carried: Some(task),
                });
            }
            Err(e) => {
                let message = format!(
                    "error forwarding port {port} to {}: failed to connect to localhost:{port} \
                     inside the pod's network: {e}",
                    target.which()
                );
                let _ = out.send((error, message.into_bytes())).await;
                open.push(Port {
                    port,
                    to_pod: None,
                    carried: None,
                });
            }
        }
    }
    loop {
        tokio::select! {
            message = messages.next() => {
                let Some((channel, data)) = (match message {
                    Some(Ok(m)) => stream::from_client(&m, base64),
                    _ => break,
                }) else {
                    continue;
                };
                let Some(p) = open.get_mut(usize::from(channel / 2)).filter(|_| channel % 2 == 0)
                else {
                    tracing::debug!(channel, "port-forward: a message on no port's data channel");
                    continue;
                };
                if let Err(why) = deliver(p, data).await {
                    tracing::debug!(port = p.port, "port-forward: {why}");
                    // The port's connection closes both ways; the others go on.
                    p.to_pod = None;
                    if let Some(task) = p.carried.take() {
                        task.abort();
                    }
                    let message = format!("error forwarding port {} to {}: {why}", p.port, target.which());
                    if out.send((channel + 1, message.into_bytes())).await.is_err() {
                        break;
                    }
                }
            }
            done = carried.join_next() => if done.is_none() {
                // Every connection has ended (or none could be made).
                break;
            },
            () = target.ended() => break,
        }
    }
    carried.abort_all();
    drop(out);
    drop(open);
    let _ = writer.await;
}

/// The data channel of the `i`th port.
fn channel(i: usize) -> u8 {
    u8::try_from(i * 2).unwrap_or(u8::MAX - 1)
}

/// Hands the client's `data` to the port's connection, within the bounds.
async fn deliver(p: &mut Port, data: Vec<u8>) -> Result<(), String> {
    let Some(to_pod) = &p.to_pod else {
        return Ok(());
    };
    if data.len() > stream::MESSAGE {
        return Err(format!(
            "a message of {} bytes, over the {} a port takes: the port is closed",
            data.len(),
            stream::MESSAGE
        ));
    }
    for piece in data.chunks(CHUNK) {
        match tokio::time::timeout(STALL, to_pod.send(piece.to_vec())).await {
            Ok(Ok(())) => {}
            // The connection ended: the rest goes nowhere, as to a closed socket.
            Ok(Err(_)) => return Ok(()),
            Err(_) => {
                return Err(format!(
                    "the pod read nothing for {STALL:?} with {CONNECTION_BUFFER} bytes waiting: \
                     the port is closed"
                ));
            }
        }
    }
    Ok(())
}

/// Carries one port's connection: the client's bytes from `from_client` to the pod, the pod's
/// to the data channel, until the pod's side ends.
async fn carry(
    connection: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    port: u16,
    data: u8,
    mut from_client: mpsc::Receiver<Vec<u8>>,
    out: mpsc::Sender<(u8, Vec<u8>)>,
) {
    let (mut from_pod, mut to_pod) = tokio::io::split(connection);
    let inbound = tokio::spawn(async move {
        while let Some(bytes) = from_client.recv().await {
            if to_pod.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to_pod.shutdown().await;
    });
    let mut buf = vec![0u8; CHUNK];
    loop {
        match from_pod.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out.send((data, buf[..n].to_vec())).await.is_err() {
                    break;
                }
            }
        }
    }
    tracing::debug!(port, "port-forward: the pod's side ended");
    inbound.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_message_is_binary_text_or_base64() {
        let binary = Message::Binary(vec![2, b'h', b'i'].into());
        assert_eq!(
            stream::from_client(&binary.clone(), false),
            Some((2, b"hi".to_vec()))
        );
        assert_eq!(stream::from_client(&binary, true), None);
        let text = Message::Text("\u{0}hi".into());
        assert_eq!(stream::from_client(&text, false), Some((0, b"hi".to_vec())));
        let base64 = Message::Text("2aGk=".into());
        assert_eq!(
            stream::from_client(&base64, true),
            Some((2, b"hi".to_vec()))
        );
        assert_eq!(
            stream::from_client(&Message::Ping(Vec::new().into()), false),
            None
        );
        assert_eq!(
            stream::from_client(&Message::Binary(Vec::new().into()), false),
            None
        );
    }

    #[test]
    fn ports_come_repeated_or_separated_by_commas() {
        assert_eq!(
            ports(Some("ports=8080,9090&ports=7000")).unwrap(),
            [8080, 9090, 7000]
        );
        for bad in [None, Some("ports=0"), Some("ports=x"), Some("ports=70000")] {
            assert_eq!(ports(bad).unwrap_err().code, http::StatusCode::BAD_REQUEST);
        }
        let many = (1..=65)
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(",");
        assert!(ports(Some(&format!("ports={many}"))).is_err());
    }
}
