//! `pods/{name}/exec`: `kubectl exec` over the streaming protocol ([`super::stream`]). The command
//! runs in a fresh instance of the container, as the runtime's exec does; with `-i` it reads what
//! the client sends on channel 0 until the client's end of stdin. What it writes comes back on
//! channels 1 (stdout) and 2 (stderr) once it has ended, and its end as a `Status` on channel 3,
//! from which kubectl takes its own exit code. A client that leaves stops the command.

use http::{Request, Response};
use hyper::body::Incoming;
use serde_json::json;
use tokio::io::AsyncWriteExt;

use super::stream::{self, FromClient, STDERR, STDOUT};
use super::{Api, Call, repeated};
use crate::body::Body;
use crate::status::ApiError;

/// The most kept of each of a command's stdout and stderr.
const OUTPUT_LIMIT: usize = 4 << 20;
/// What the command's stdin pipe holds before a write from the client waits.
const STDIN_BUFFER: usize = 64 * 1024;

impl Api {
    /// `pods/{name}/exec`: the command in a fresh instance of the container, over a WebSocket.
    pub(super) async fn exec(
        &self,
        ns: &str,
        name: &str,
        call: &Call,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, ApiError> {
        let pod = stream::running(self, ns, name)?;
        let command = repeated(call.raw_query.as_deref(), "command");
        if command.is_empty() {
            return Err(ApiError::bad_request("you must specify at least 1 command"));
        }
        let container = stream::container(&pod.pod, name, call.query.get("container"))?
            .name
            .clone();
        stream::no_tty(&call.query)?;
        let interactive = call.query.flag("stdin");
        let (uid, handle) = (pod.uid, pod.handle);
        let seat = self.sessions.enter(&uid)?;
        let (answer, socket) = stream::accept_channels("exec", req)?;
        tokio::spawn(async move {
            let _seat = seat;
            let Some(mut channels) = socket.await else {
                return;
            };
            let (mut stdin, reader) = tokio::io::duplex(STDIN_BUFFER);
            if !interactive {
                drop(stdin.shutdown().await);
            }
            let mut run = tokio::spawn({
                let command = command.clone();
                async move {
                    handle
                        .exec_with_stdin(&container, &command, reader, OUTPUT_LIMIT)
                        .await
                }
            });
            let mut stdin = interactive.then_some(stdin);
            let ran = loop {
                tokio::select! {
                    ran = &mut run => break ran,
                    from = channels.receive() => match from {
                        FromClient::Stdin(bytes) => {
                            if let Some(pipe) = &mut stdin
                                && pipe.write_all(&bytes).await.is_err()
                            {
                                stdin = None;
                            }
                        }
                        FromClient::StdinClosed => stdin = None,
                        FromClient::Gone => {
                            run.abort();
                            return;
                        }
                    },
                }
            };
            drop(stdin);
            let status = match ran {
                Ok(Ok(out)) => {
                    if !(channels.send(STDOUT, &out.stdout).await
                        && channels.send(STDERR, &out.stderr).await)
                    {
                        return;
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
                Ok(Err(why)) => json!({
                    "metadata": {},
                    "status": "Failure",
                    "message": why.to_string(),
                    "reason": "InternalError",
                }),
                Err(e) => json!({
                    "metadata": {},
                    "status": "Failure",
                    "message": format!("the command's task failed: {e}"),
                    "reason": "InternalError",
                }),
            };
            channels.finish(&status).await;
        });
        Ok(answer)
    }
}
