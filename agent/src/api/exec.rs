//! `pods/{name}/exec`: `kubectl exec` over the WebSocket streaming protocol (`v5.channel.k8s.io`,
//! `v4.channel.k8s.io`). The command runs in a fresh instance of the container, as the runtime's
//! exec does; what it writes comes back on channels 1 (stdout) and 2 (stderr), and its end as a
//! `Status` on channel 3, from which kubectl takes its own exit code.

use futures_util::SinkExt;
use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};

use super::{Api, Call, repeated};
use crate::body::Body;
use crate::status::ApiError;

/// The most kept of each of a command's stdout and stderr.
const OUTPUT_LIMIT: usize = 4 << 20;
/// The largest WebSocket frame sent.
const FRAME: usize = 32 * 1024;
const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

pub(super) async fn exec(
    api: &Api,
    ns: &str,
    name: &str,
    call: &Call,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let pod = api
        .store
        .get("pods", ns, name)
        .ok_or_else(|| ApiError::not_found("pods", name))?;
    let command = repeated(call.raw_query.as_deref(), "command");
    if command.is_empty() {
        return Err(ApiError::bad_request("you must specify at least 1 command"));
    }
    let names: Vec<&str> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .chain(
            pod.pointer("/spec/initContainers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten(),
        )
        .filter_map(|c| c["name"].as_str())
        .collect();
    let container = match call.query.get("container") {
        Some(c) if !c.is_empty() => c.to_owned(),
        _ => names.first().map(|c| (*c).to_owned()).unwrap_or_default(),
    };
    if !names.contains(&container.as_str()) {
        return Err(ApiError::bad_request(format!(
            "container {container} is not valid for pod {name}"
        )));
    }
    if call.query.flag("tty") || call.query.flag("stdin") {
        return Err(ApiError::bad_request(
            "wasmpod exec takes no stdin or tty: a command runs in a fresh instance of the \
             container with its output sent back (drop -i and -t)",
        ));
    }
    let uid = pod
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("");
    let handle = api.kubelet.handle(uid).ok_or_else(|| {
        ApiError::bad_request(format!("pod {name} does not run on this node any more"))
    })?;
    let headers = req.headers();
    let is_websocket = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let key = headers
        .get("sec-websocket-key")
        .map(|k| derive_accept_key(k.as_bytes()));
    let offered: Vec<String> = headers
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|p| p.trim().to_owned()))
        .collect();
    let protocol = PROTOCOLS
        .into_iter()
        .find(|p| offered.iter().any(|o| o == p));
    let (Some(accept), Some(protocol), true) = (key, protocol, is_websocket) else {
        return Err(ApiError::bad_request(
            "exec is served over WebSocket with the v5.channel.k8s.io or v4.channel.k8s.io protocol",
        ));
    };
    tokio::spawn(async move {
        let upgraded = match hyper::upgrade::on(req).await {
            Ok(u) => u,
            Err(e) => return tracing::debug!("exec upgrade: {e}"),
        };
        let mut ws =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        let status = match handle.exec_output(&container, &command, OUTPUT_LIMIT).await {
            Ok(out) => {
                for (channel, bytes) in [(1u8, &out.stdout), (2u8, &out.stderr)] {
                    for chunk in bytes.chunks(FRAME) {
                        let mut frame = Vec::with_capacity(chunk.len() + 1);
                        frame.push(channel);
                        frame.extend_from_slice(chunk);
                        if ws.send(Message::Binary(frame.into())).await.is_err() {
                            return;
                        }
                    }
                }
                if out.exit_code == 0 {
                    json!({"metadata": {}, "status": "Success"})
                } else {
                    json!({
                        "metadata": {},
                        "status": "Failure",
                        "message": format!("command terminated with non-zero exit code: error executing command {command:?}, exit code {}", out.exit_code),
                        "reason": "NonZeroExitCode",
                        "details": {"causes": [{"reason": "ExitCode", "message": out.exit_code.to_string()}]},
                    })
                }
            }
            Err(why) => json!({
                "metadata": {},
                "status": "Failure",
                "message": why,
                "reason": "InternalError",
            }),
        };
        let mut frame = vec![3u8];
        frame.extend_from_slice(&serde_json::to_vec(&status).unwrap_or_default());
        let _ = ws.send(Message::Binary(frame.into())).await;
        let normal = CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        };
        let _ = ws.close(Some(normal)).await;
    });
    let mut r = Response::new(Body::full(Vec::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert("sec-websocket-accept", v);
    }
    h.insert("sec-websocket-protocol", HeaderValue::from_static(protocol));
    Ok(r)
}
