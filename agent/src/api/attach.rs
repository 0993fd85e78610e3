//! `pods/{name}/attach`: `kubectl attach` and `kubectl run -i` over the streaming protocol
//! ([`super::stream`]). The container's output comes on channels 1 and 2 as its log has it,
//! from the start of its current instance (so `kubectl run -i` misses nothing the container
//! printed before kubectl attached), followed until the instance ends; with `-i`, what the
//! client sends on channel 0 goes to the container's stdin (`stdin: true`). The client's end of
//! stdin, or its leaving, ends the container's stdin when it has `stdinOnce`, as the kubelet
//! does; otherwise the stdin stays open for the next attacher.

use http::{Request, Response};
use hyper::body::Incoming;
use serde_json::json;
use wasmpod::{LogOptions, Stream};

use super::stream::{self, FromClient, STDERR, STDOUT};
use super::{Api, Call};
use crate::body::Body;
use crate::status::ApiError;

impl Api {
    /// `pods/{name}/attach`: the running container's output, and its stdin when it has one.
    pub(super) async fn attach(
        &self,
        ns: &str,
        name: &str,
        call: &Call,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, ApiError> {
        let pod = stream::running(self, ns, name)?;
        let spec = stream::container(&pod.pod, name, call.query.get("container"))?;
        let (container, has_stdin) = (spec.name.clone(), spec.stdin == Some(true));
        stream::no_tty(&call.query)?;
        let (uid, handle) = (pod.uid, pod.handle);
        if call.query.flag("stdin") && !has_stdin {
            return Err(ApiError::bad_request(format!(
                "container {container} does not have stdin: true: nothing can be written to it"
            )));
        }
        let mut logs = handle
            .logs(&container, LogOptions::default().follow())
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let (stdout, stderr) = (
            !matches!(call.query.get("stdout"), Some("false" | "0")),
            !matches!(call.query.get("stderr"), Some("false" | "0")),
        );
        // The seat and the upgrade first: the container's stdin writer is taken only for a
        // session that will run, since dropping it ends a `stdinOnce` container's stdin.
        let seat = self.sessions.enter(&uid)?;
        let (answer, socket) = stream::accept_channels("attach", req)?;
        let stdin = if call.query.flag("stdin") {
            Some(
                handle
                    .attach_stdin(&container)
                    .await
                    .map_err(|e| ApiError::bad_request(e.to_string()))?,
            )
        } else {
            None
        };
        tokio::spawn(async move {
            let _seat = seat;
            let Some(mut channels) = socket.await else {
                tracing::debug!(pod = %uid, %container, "attach: the connection was not upgraded");
                return;
            };
            tracing::debug!(pod = %uid, %container, "attach: session open");
            // The log is read by a task of its own: a read is never cut short by what the client
            // sends (a log read is not cancel-safe), and a few lines wait for the client.
            let (lines_tx, mut lines) = tokio::sync::mpsc::channel(16);
            let reader = tokio::spawn(async move {
                while let Some(line) = logs.next().await {
                    if lines_tx.send(line).await.is_err() {
                        return;
                    }
                }
            });
            let _reader = tokio_util::task::AbortOnDropHandle::new(reader);
            let mut stdin = stdin;
            loop {
                tokio::select! {
                    line = lines.recv() => {
                        let Some(line) = line else {
                            tracing::debug!(pod = %uid, %container, "attach: the instance ended");
                            break;
                        };
                        let (channel, wanted) = match line.stream {
                            Stream::Stdout => (STDOUT, stdout),
                            Stream::Stderr => (STDERR, stderr),
                        };
                        if !wanted {
                            continue;
                        }
                        let mut bytes = line.line.into_bytes();
                        if !line.partial {
                            bytes.push(b'\n');
                        }
                        if !channels.send(channel, &bytes).await {
                            return;
                        }
                    }
                    from = channels.receive() => match from {
                        FromClient::Stdin(bytes) => {
                            tracing::debug!(pod = %uid, %container, bytes = bytes.len(), "attach: stdin");
                            if let Some(pipe) = &stdin
                                && pipe.write_all(&bytes).await.is_err()
                            {
                                stdin = None;
                            }
                        }
                        // Dropping the writer ends a `stdinOnce` container's stdin.
                        FromClient::StdinClosed => stdin = None,
                        FromClient::Gone => {
                            tracing::debug!(pod = %uid, %container, "attach: the client left");
                            return;
                        }
                    },
                }
            }
            drop(stdin);
            channels
                .finish(&json!({"metadata": {}, "status": "Success"}))
                .await;
        });
        Ok(answer)
    }
}
