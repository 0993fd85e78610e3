//! Exec handlers, probes, hooks and `kubectl exec`: a command run in a fresh instance of a
//! running container (Kubernetes' exec semantics: the same volumes and environment, not the
//! same memory), the export it names or the entry point, its file-system calls made inline.

use std::sync::Arc;

use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::cli::{AsyncStdinStream, StdoutStream};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

use super::{EXIT_START_ERROR, EXIT_TRAP, Sandbox, Thread};
use crate::engine::Image;
use crate::host::PodExport;
use crate::volumes::MountDir;

/// The most output of an exec handler kept for its result message.
const EXEC_OUTPUT: usize = 1024;

/// What a handler's `exec.command[0]` resolves to in a preview1 module, besides its own name.
fn p1_export(name: &str) -> &str {
    match name {
        "liveness" => "wasmpod_probe_liveness",
        "readiness" => "wasmpod_probe_readiness",
        "startup" => "wasmpod_probe_startup",
        "post-start" | "post_start" => "wasmpod_post_start",
        "pre-stop" | "pre_stop" => "wasmpod_pre_stop",
        other => other,
    }
}

impl Sandbox {
    /// Runs an exec handler in a fresh instance: the export `command[0]` names when the module
    /// has it, else the entry point with argv = `command`. `Ok` on success; the error says why
    /// not, with what the handler printed.
    pub(crate) async fn exec(self: &Arc<Self>, command: &[String]) -> Result<(), String> {
        let output = MemoryOutputPipe::new(EXEC_OUTPUT);
        let (_, why) = self
            .run_command(command, None, output.clone(), output.clone())
            .await;
        match why {
            None => Ok(()),
            Some(message) => {
                let out = String::from_utf8_lossy(&output.contents())
                    .trim()
                    .to_owned();
                Err(if out.is_empty() {
                    message
                } else {
                    format!("{message}: {out}")
                })
            }
        }
    }

    /// Runs `command` as [`Sandbox::exec`] does, reading `stdin` (empty when `None`) and
    /// keeping up to `limit` bytes of each of its stdout and stderr (`kubectl exec`).
    pub(crate) async fn exec_output(
        self: &Arc<Self>,
        command: &[String],
        stdin: Option<AsyncStdinStream>,
        limit: usize,
    ) -> ExecOutput {
        let (stdout, stderr) = (MemoryOutputPipe::new(limit), MemoryOutputPipe::new(limit));
        let (exit_code, why) = self
            .run_command(command, stdin, stdout.clone(), stderr.clone())
            .await;
        let mut stderr = stderr.contents().to_vec();
        if exit_code != 0
            && let Some(why) = why.filter(|w| !w.starts_with("command exited with"))
        {
            stderr.extend_from_slice(format!("{why}\n").as_bytes());
        }
        ExecOutput {
            exit_code,
            stdout: stdout.contents().to_vec(),
            stderr,
        }
    }

    /// Runs `command` as [`Sandbox::exec`] does, its output streamed to `stdout` and `stderr`:
    /// its exit code and, when that is not 0, why (the containerd shim's exec).
    pub(crate) async fn exec_streamed(
        self: &Arc<Self>,
        command: &[String],
        stdin: Option<AsyncStdinStream>,
        stdout: impl StdoutStream + 'static,
        stderr: impl StdoutStream + 'static,
    ) -> (i32, Option<String>) {
        self.run_command(command, stdin, stdout, stderr).await
    }

    /// Runs `command` in a fresh instance, metered, with its file-system calls made inline
    /// rather than each sent to tokio's blocking pool and its answer sent back (two thread
    /// switches a call: most of what a probe cost). Where every mount is on a local file system
    /// it runs on the worker that calls (no call waits on a server); else on a thread of the
    /// blocking pool, where a call blocked on a slow mount holds that thread only, as it would
    /// have held a pool thread before. Dropping the returned future (a probe's timeout, a
    /// client gone) stops the instance, wherever it runs.
    async fn run_command(
        self: &Arc<Self>,
        command: &[String],
        stdin: Option<AsyncStdinStream>,
        stdout: impl StdoutStream + 'static,
        stderr: impl StdoutStream + 'static,
    ) -> (i32, Option<String>) {
        let local = self
            .preopens
            .iter()
            .all(|p| p.host.as_ref().is_ok_and(MountDir::is_local));
        if local {
            let invoked = self.invoke(command, stdin, stdout, stderr, Thread::WorkerLocalFs);
            return self.meter.run(invoked).await;
        }
        let (sandbox, command) = (self.clone(), command.to_vec());
        let runtime = tokio::runtime::Handle::current();
        // Dropped with this future (or once the instance ended): the instance stops.
        let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let instance = tokio::task::spawn_blocking(move || {
            runtime.block_on(async move {
                let invoked = sandbox.invoke(&command, stdin, stdout, stderr, Thread::Own);
                tokio::select! {
                    ended = sandbox.meter.run(invoked) => Some(ended),
                    _ = stopped => None,
                }
            })
        });
        match instance.await {
            Ok(Some(ended)) => ended,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Only a runtime shutting down cancels a blocking task.
            Ok(None) | Err(_) => (
                EXIT_START_ERROR,
                Some("the node is shutting down".to_owned()),
            ),
        }
    }

    /// Runs `command` in a fresh instance on `thread` (its caller meters it): its exit code
    /// (the export's result, the entry point's exit code, 134 for a trap) and, when that is
    /// not 0, why.
    async fn invoke(
        &self,
        command: &[String],
        stdin: Option<AsyncStdinStream>,
        stdout: impl StdoutStream + 'static,
        stderr: impl StdoutStream + 'static,
        thread: Thread,
    ) -> (i32, Option<String>) {
        let name = command.first().map(String::as_str).unwrap_or_default();
        let mut wasi = match self.wasi(command, stdout, stderr, thread) {
            Ok(wasi) => wasi,
            Err(e) => return (EXIT_START_ERROR, Some(e.to_string())),
        };
        if let Some(stdin) = stdin {
            wasi.stdin(stdin);
        }
        // The instance's place in the pool: dropped after its store (declared before it).
        let lease = self.image.short_lived();
        let called = match &*lease.image {
            Image::Module { pre, .. } => {
                let export = p1_export(name);
                let Some(wasmtime::ExternType::Func(_)) = pre.module().get_export(export) else {
                    return self.exec_entry(&lease.image, wasi).await;
                };
                let mut store = self.p1_store(pre.module().engine(), &mut wasi, thread);
                let result = async {
                    let instance = pre.instantiate_async(&mut store).await?;
                    let f = instance.get_typed_func::<(), i32>(&mut store, export)?;
                    f.call_async(&mut store, ()).await
                }
                .await;
                result.map(|code| {
                    if code == 0 {
                        Ok(())
                    } else {
                        Err((code, format!("{export} returned {code}")))
                    }
                })
            }
            Image::Component { instance: pre, .. } => {
                let Some(export) = PodExport::find(pre, name) else {
                    return self.exec_entry(&lease.image, wasi).await;
                };
                let mut store = self.p2_store(pre.engine(), &mut wasi, self.budget.clone(), thread);
                async {
                    let instance = pre.instantiate_async(&mut store).await?;
                    export.call(&mut store, &instance).await
                }
                .await
                .map(|r| r.map_err(|message| (1, message)))
            }
        };
        match called {
            Ok(Ok(())) => (0, None),
            Ok(Err((code, message))) => (code, Some(message)),
            Err(e) => (
                EXIT_TRAP,
                Some(format!("{name} trapped: {}", e.root_cause())),
            ),
        }
    }

    async fn exec_entry(&self, image: &Image, wasi: WasiCtxBuilder) -> (i32, Option<String>) {
        let exit = self.run_entry(image, Box::new(wasi)).await;
        match (exit.code, exit.message) {
            (0, _) => (0, None),
            (code, None) => (code, Some(format!("command exited with {code}"))),
            (code, Some(m)) => (code, Some(format!("command exited with {code} ({m})"))),
        }
    }
}

/// What a command run in a container (`kubectl exec`) printed, and its exit code.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExecOutput {
    /// The exit code: the entry point's, the export's result, 134 when it trapped, 128 when it
    /// could not start.
    pub exit_code: i32,
    /// What it wrote to stdout (the first MiBs of it, see [`crate::PodHandle::exec_output`]).
    pub stdout: Vec<u8>,
    /// What it wrote to stderr, then why it failed when that is not its exit code alone.
    pub stderr: Vec<u8>,
}
