//! The streaming protocol of `exec` and `attach` as kubectl 1.30+ and the official clients speak
//! it: a WebSocket with the `v5.channel.k8s.io` (or `v4.channel.k8s.io`) subprotocol, each
//! message a channel byte and data: 0 stdin (from the client), 1 stdout, 2 stderr, 3 the end as
//! a `Status`, 4 terminal resizes (ignored: there is no terminal). v5 adds 255: the client
//! closed a channel (`[255, 0]`: end of stdin). A client's message may be binary or text (the
//! Python client sends text as text frames, its channel the first character). With
//! `base64.channel.k8s.io` (or `v4.base64.channel.k8s.io`) every message is text: the channel
//! as an ASCII digit, then the data in base64.
//!
//! A session is bounded: [`MAX_SESSIONS`] per pod at once, frames of at most [`FRAME`] bytes
//! sent, and stdin read only as fast as the command or container takes it (the WebSocket is
//! not read past one message while a write to it waits).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use wasmpod::k8s_openapi::api::core::v1::{Container, Pod};

use crate::body::Body;
use crate::status::ApiError;

/// The largest WebSocket frame sent.
pub(crate) const FRAME: usize = 32 * 1024;
/// The largest message taken from a client (kubectl sends stdin in pieces of 32 KiB at most).
pub(crate) const MESSAGE: usize = 64 * 1024;
/// `exec`, `attach` and `port-forward` sessions of one pod at once.
pub(crate) const MAX_SESSIONS: usize = 16;
/// The subprotocols of `exec` and `attach`, the first one a client offers taken.
pub(crate) const CHANNELS: &[&str] = &[
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "base64.channel.k8s.io",
];

/// A WebSocket the client switched to.
pub(crate) type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

pub(crate) const STDIN: u8 = 0;
pub(crate) const STDOUT: u8 = 1;
pub(crate) const STDERR: u8 = 2;
const ERROR: u8 = 3;
const CLOSE: u8 = 255;

/// The sessions of each pod, by uid.
#[derive(Debug, Default)]
pub(crate) struct Sessions(Arc<Mutex<HashMap<String, usize>>>);

/// One session's place; given back when dropped.
#[derive(Debug)]
pub(crate) struct Seat {
    sessions: Arc<Mutex<HashMap<String, usize>>>,
    uid: String,
}

impl Sessions {
    /// A place for a session of the pod `uid`; `429` when it has [`MAX_SESSIONS`].
    pub(crate) fn enter(&self, uid: &str) -> Result<Seat, ApiError> {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = all.entry(uid.to_owned()).or_default();
        if *n >= MAX_SESSIONS {
            return Err(ApiError::too_many_requests(format!(
                "the pod has {MAX_SESSIONS} exec, attach and port-forward sessions already"
            )));
        }
        *n += 1;
        Ok(Seat {
            sessions: self.0.clone(),
            uid: uid.to_owned(),
        })
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut all = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = all.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                all.remove(&self.uid);
            }
        }
    }
}

/// What the client sent.
#[derive(Debug)]
pub(crate) enum FromClient {
    Stdin(Vec<u8>),
    /// The client's stdin ended (v5's close of channel 0).
    StdinClosed,
    /// The client left (or broke the protocol).
    Gone,
}

/// A session's WebSocket.
pub(crate) struct Channels {
    ws: Socket,
    /// Text messages with base64 data (`base64.channel.k8s.io`).
    base64: bool,
}

impl std::fmt::Debug for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channels").finish_non_exhaustive()
    }
}

impl Channels {
    /// The session's channels over `ws`, which speaks `protocol`.
    pub(crate) fn new(ws: Socket, protocol: &str) -> Channels {
        Channels {
            ws,
            base64: protocol.contains("base64"),
        }
    }

    /// One message of `data` on `channel`, as the protocol has it.
    fn message(&self, channel: u8, data: &[u8]) -> Message {
        if self.base64 {
            Message::Text(format!("{}{}", channel_digit(channel), BASE64.encode(data)).into())
        } else {
            let mut frame = Vec::with_capacity(data.len() + 1);
            frame.push(channel);
            frame.extend_from_slice(data);
            Message::Binary(frame.into())
        }
    }

    /// Sends `bytes` on `channel`, in frames; false when the client is gone.
    pub(crate) async fn send(&mut self, channel: u8, bytes: &[u8]) -> bool {
        for chunk in bytes.chunks(FRAME) {
            if self.ws.send(self.message(channel, chunk)).await.is_err() {
                return false;
            }
        }
        true
    }

    /// The next thing the client sent (pings, resizes and what the protocol does not have are
    /// skipped).
    pub(crate) async fn receive(&mut self) -> FromClient {
        loop {
            let message = match self.ws.next().await {
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return FromClient::Gone,
                Some(Ok(message)) => message,
            };
            match from_client(&message, self.base64) {
                Some((STDIN, data)) if !data.is_empty() => return FromClient::Stdin(data),
                Some((CLOSE, data)) if data == [STDIN] => return FromClient::StdinClosed,
                _ => continue,
            }
        }
    }

    /// Ends the session: its `Status` on channel 3, then a normal close.
    pub(crate) async fn finish(mut self, status: &Value) {
        let status = serde_json::to_vec(status).unwrap_or_default();
        let _ = self.ws.send(self.message(ERROR, &status)).await;
        let normal = CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        };
        let _ = self.ws.close(Some(normal)).await;
    }
}

/// The character that names `channel` in a base64 message: `'0'` plus the channel.
pub(crate) fn channel_digit(channel: u8) -> char {
    char::from(b'0'.wrapping_add(channel))
}

/// A client's message as its channel and data: binary, or text (the channel its first
/// character, as the Python client sends text), or with `base64` text whose channel is an ASCII
/// digit and whose data is base64. `None` for any other message (a ping) or one without a
/// channel.
pub(crate) fn from_client(message: &Message, base64: bool) -> Option<(u8, Vec<u8>)> {
    let raw: &[u8] = match message {
        Message::Binary(b) if !base64 => b,
        Message::Text(t) if !base64 => t.as_bytes(),
        Message::Text(t) => return decode_base64(t.as_str()),
        _ => return None,
    };
    let (&channel, data) = raw.split_first()?;
    Some((channel, data.to_vec()))
}

/// A base64 message's channel and data (`"1aGk="`: channel 1, `hi`); `None` when it is not one.
fn decode_base64(text: &str) -> Option<(u8, Vec<u8>)> {
    let first = text.chars().next()?;
    let channel = u8::try_from(u32::from(first).checked_sub(u32::from(b'0'))?).ok()?;
    Some((channel, BASE64.decode(&text[first.len_utf8()..]).ok()?))
}

/// Accepts an `exec` or `attach` session ([`accept`] with [`CHANNELS`]): the `101`, and the
/// session's channels once the client switched.
pub(crate) fn accept_channels(
    what: &str,
    req: Request<Incoming>,
) -> Result<
    (
        Response<Body>,
        impl Future<Output = Option<Channels>> + Send + 'static,
    ),
    ApiError,
> {
    let protocol = offered(&req, CHANNELS).unwrap_or_default();
    let (answer, socket) = accept(what, req, CHANNELS, MESSAGE)?;
    Ok((answer, async move {
        socket.await.map(|ws| Channels::new(ws, protocol))
    }))
}

/// The first of `protocols` the request offers, when it asks to switch to a WebSocket.
pub(crate) fn chosen(req: &Request<Incoming>, protocols: &[&'static str]) -> Option<&'static str> {
    upgrades_to_websocket(req)
        .then(|| offered(req, protocols))
        .flatten()
}

/// Whether the request asks to switch to a WebSocket with one of `protocols`.
pub(crate) fn wants(req: &Request<Incoming>, protocols: &[&'static str]) -> bool {
    upgrades_to_websocket(req) && offered(req, protocols).is_some()
}

fn upgrades_to_websocket(req: &Request<Incoming>) -> bool {
    req.headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// The first of `protocols` the client offers.
fn offered(req: &Request<Incoming>, protocols: &[&'static str]) -> Option<&'static str> {
    let offered: Vec<String> = req
        .headers()
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|p| p.trim().to_owned()))
        .collect();
    protocols
        .iter()
        .copied()
        .find(|p| offered.iter().any(|o| o == p))
}

/// Accepts a WebSocket session of `what` (`exec`, `attach`, `portforward`) with one of
/// `protocols`, taking messages of at most `max_message` bytes: the `101` to answer with, the
/// socket once the client switched (to be awaited after the answer is sent), and the protocol.
pub(crate) fn accept(
    what: &str,
    req: Request<Incoming>,
    protocols: &[&'static str],
    max_message: usize,
) -> Result<
    (
        Response<Body>,
        impl Future<Output = Option<Socket>> + Send + 'static,
    ),
    ApiError,
> {
    let is_websocket = upgrades_to_websocket(&req);
    let key = req
        .headers()
        .get("sec-websocket-key")
        .map(|k| derive_accept_key(k.as_bytes()));
    let protocol = offered(&req, protocols);
    let (Some(accept), Some(protocol), true) = (key, protocol, is_websocket) else {
        return Err(ApiError::bad_request(format!(
            "{what} is served over WebSocket with the {} protocol",
            protocols.join(" or ")
        )));
    };
    let channels = async move {
        let upgraded = match hyper::upgrade::on(req).await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!("upgrade: {e}");
                return None;
            }
        };
        let config = WebSocketConfig::default()
            .max_message_size(Some(max_message))
            .max_frame_size(Some(max_message));
        Some(
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config))
                .await,
        )
    };
    let mut r = Response::new(Body::full(Vec::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert("sec-websocket-accept", v);
    }
    h.insert("sec-websocket-protocol", HeaderValue::from_static(protocol));
    Ok((r, channels))
}

/// A pod the node runs, as a session finds it.
pub(crate) struct Running {
    /// The pod as it was when the session started.
    pub(crate) pod: Pod,
    pub(crate) uid: String,
    pub(crate) handle: wasmpod::PodHandle,
}

/// The pod `ns/name` the node runs: `NotFound` without its object, 400 when it ended.
pub(crate) fn running(api: &super::Api, ns: &str, name: &str) -> Result<Running, ApiError> {
    let object = api
        .store
        .get("pods", ns, name)
        .ok_or_else(|| ApiError::not_found("pods", name))?;
    let uid = object.uid().to_owned();
    let pod = object.pod();
    let handle = api.kubelet.handle(&uid).ok_or_else(|| {
        ApiError::bad_request(format!("pod {name} does not run on this node any more"))
    })?;
    Ok(Running { pod, uid, handle })
}

/// 400 for a session that asks for a terminal (`-t`), which no guest has.
pub(crate) fn no_tty(query: &super::Query) -> Result<(), ApiError> {
    if query.flag("tty") {
        return Err(ApiError::bad_request(
            "wasmpod has no tty: a WASI guest has byte streams, not a terminal (drop -t)",
        ));
    }
    Ok(())
}

/// The pod's container named by the request's `container` parameter (its first container
/// when not given), or a 400 naming the choices.
pub(crate) fn container<'a>(
    pod: &'a Pod,
    name: &str,
    asked: Option<&str>,
) -> Result<&'a Container, ApiError> {
    let spec = pod.spec.as_ref();
    let mut all = spec.into_iter().flat_map(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
    });
    let wanted = match asked {
        Some(c) if !c.is_empty() => c.to_owned(),
        _ => spec
            .and_then(|s| s.containers.first())
            .map(|c| c.name.clone())
            .unwrap_or_default(),
    };
    match all.find(|c| c.name == wanted) {
        Some(c) => Ok(c),
        None => Err(ApiError::bad_request(format!(
            "container {wanted} is not valid for pod {name}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_messages_carry_their_channel_as_a_digit() {
        assert_eq!(decode_base64("0aGk=").unwrap(), (STDIN, b"hi".to_vec()));
        assert_eq!(decode_base64("3").unwrap(), (ERROR, Vec::new()));
        assert_eq!(channel_digit(STDERR), '2');
        // Past 9 the digit goes on as the character after it, both ways.
        assert_eq!(
            decode_base64(&format!("{}aGk=", channel_digit(12)))
                .unwrap()
                .0,
            12
        );
        for bad in ["", "/aGk=", "1%%%"] {
            assert_eq!(decode_base64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_pod_has_at_most_its_sessions_and_gets_them_back() {
        let sessions = Sessions::default();
        let seats: Vec<Seat> = (0..MAX_SESSIONS)
            .map(|_| sessions.enter("a").unwrap())
            .collect();
        let refused = sessions.enter("a").unwrap_err();
        assert_eq!(refused.code, StatusCode::TOO_MANY_REQUESTS);
        // Another pod's sessions are its own.
        let other = sessions.enter("b").unwrap();
        drop(seats);
        let _again = sessions.enter("a").unwrap();
        drop(other);
        assert_eq!(
            sessions.0.lock().unwrap().get("b"),
            None,
            "nothing kept for a pod"
        );
    }
}
