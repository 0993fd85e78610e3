//! What runs in each container's process: the OCI spec's argv, environment, working directory,
//! mounts and memory limit made into a [`Task`], and containerd's signals made into TERM.
//!
//! - `SIGTERM` (and `SIGINT`) is TERM: a guest that imports `wasmpod:pod/termination` learns it
//!   and may finish its work; any other ends at once with 143. containerd's `SIGKILL` ends the
//!   process, 137, whatever the guest does.
//! - Each top-level directory of the root filesystem is preopened at its path, and every deeper
//!   mount (a volume) at its own, read-only where it is mounted read-only. `/proc`, `/sys` and
//!   `/dev` are not shown (through `/proc/self/mem` a guest would reach the runtime's memory),
//!   and neither is `/` itself, so files at the very top of the image are not either.
//! - Components' sockets are the host's: the container's network namespace is the pod's.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context, bail};
use containerd_shim_wasm::sandbox::Sandbox;
use containerd_shim_wasm::sandbox::context::{RuntimeContext, Source};
use tokio::signal::unix::{Signal, SignalKind, signal};
use wasmpod::task::{Task, TaskOptions};

use crate::spec;

/// The sandbox of one container, made in the container's process.
#[derive(Default)]
pub(crate) struct WasmpodSandbox {
    /// Listens for TERM from when the container is created: the process is its pid
    /// namespace's init, for which a signal without a handler is lost, and containerd may send
    /// TERM before the guest is compiled.
    term: Mutex<Option<TermSignals>>,
}

/// containerd's TERM (and an interrupt), as streams.
struct TermSignals {
    term: Signal,
    int: Signal,
}

impl TermSignals {
    fn listen() -> anyhow::Result<TermSignals> {
        Ok(TermSignals {
            term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
        })
    }

    /// Resolves at the first TERM (or interrupt).
    async fn recv(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

impl Sandbox for WasmpodSandbox {
    async fn run_wasi(&self, ctx: &impl RuntimeContext) -> anyhow::Result<i32> {
        let signals = match self.term.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(signals) => signals,
            None => TermSignals::listen()?,
        };
        let (term_tx, mut term_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            signals.recv().await;
            term_tx.send_replace(true);
        });
        let entrypoint = ctx.entrypoint();
        if entrypoint.func != "_start" {
            bail!(
                "wasmpod runs a module's `_start` or a component's `wasi:cli/run`, not `{}`",
                entrypoint.func
            );
        }
        let name = entrypoint
            .arg0
            .map(Path::to_path_buf)
            .unwrap_or_else(|| "module".into());
        let options = options(ctx)?;
        let precompiled = entrypoint.source.is_precompiled()?;
        let wasm = entrypoint.source.as_bytes()?;
        let task = tokio::task::block_in_place(|| {
            if precompiled {
                // SAFETY: runwasi gives layers marked precompiled only from containerd's content
                // store, where the shim's compiler (`wasmpod::task::precompile`) put them under
                // its cache key.
                unsafe { Task::from_precompiled(&name, &wasm, options) }
            } else {
                Task::new(&name, &wasm, options)
            }
        })?;
        drop(wasm);

        // TERM that came while the guest was being compiled is delivered as it starts.
        let terminator = task.terminator();
        tokio::spawn(async move {
            if term_rx.wait_for(|t| *t).await.is_ok() {
                terminator.terminate();
            }
        });

        let exit = task.run().await;
        if let Some(message) = &exit.message {
            eprintln!("wasmpod: {message}");
        }
        Ok(exit.code)
    }

    async fn can_handle(&self, ctx: &impl RuntimeContext) -> anyhow::Result<()> {
        // Called in the container's process when it is created, before it starts.
        *self.term.lock().unwrap_or_else(|e| e.into_inner()) = Some(TermSignals::listen()?);
        let source = ctx.entrypoint().source;
        if let Source::File(path) = &source {
            // The magic number is enough; a path that does not open as given is looked up as
            // runwasi looks it up (its PATH), reading it whole.
            let mut magic = [0u8; 4];
            let opened = File::open(path).and_then(|mut f| f.read_exact(&mut magic));
            let wasm = match opened {
                Ok(()) => &magic == b"\0asm",
                Err(_) => source.as_bytes()?.starts_with(b"\0asm"),
            };
            if !wasm {
                bail!("the entry point is not a WebAssembly module or component");
            }
        }
        Ok(())
    }
}

/// The task's options from what the container's process has: argv and environment from the
/// spec (through runwasi), the working directory libcontainer entered, the mounts it made, the
/// memory limit of its cgroup.
fn options(ctx: &impl RuntimeContext) -> anyhow::Result<TaskOptions> {
    let env = ctx
        .envs()
        .iter()
        .map(|kv| kv.split_once('=').unwrap_or((kv, "")));
    let mut options = TaskOptions::new(ctx.args()).envs(env);
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").context("cannot read the mounts")?;
    let top: Vec<_> = std::fs::read_dir("/")
        .context("cannot list the root filesystem")?
        .flatten()
        .map(|e| e.path())
        .collect();
    for mount in spec::guest_dirs(&spec::mounts(&mountinfo), &top) {
        if mount.path.is_dir() {
            let guest = mount.path.to_string_lossy().into_owned();
            options = options.mount(mount.path, guest, mount.read_only);
        }
    }
    if let Ok(cwd) = std::env::current_dir() {
        options = options.working_dir(cwd.to_string_lossy());
    }
    if let Some(limit) = spec::memory_limit() {
        options = options.memory_limit(limit);
    }
    Ok(options)
}
