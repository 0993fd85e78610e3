//! One container run as a process of its own, as a containerd task runs it.
//!
//! A [`Task`] is one WASI module or component with its argv, environment, directories, working
//! directory and limits, run on wasmpod's engine with the container semantics that make sense
//! for a single process, where someone else (containerd and the kubelet) keeps the pod:
//!
//! - [`Terminator::terminate`] is TERM: a guest that imports `wasmpod:pod/termination` learns
//!   it and goes on until it exits by itself; any other guest stops at once with 143. KILL is
//!   the process's end (SIGKILL), so a task has no grace period of its own.
//! - Exit codes are the supervisor's: the guest's own (0–255), 134 when it trapped, 137 when it
//!   ran out of memory ([`TaskExit::oom`]).
//! - Its stdio is the process's, and its components' `wasi:sockets` are the host's: a task runs
//!   in a network namespace made for it (in Kubernetes, the CNI's pod network), not in a wasmpod
//!   pod network.
//! - An HTTP handler component (`wasi:http/incoming-handler`, or 0.3's `wasi:http/handler`) is
//!   served on [`TaskOptions::http_port`] (8080 unless set, as `wasmtime serve` does) on every IPv4
//!   address of that namespace, a fresh instance per request, as in a pod; TERM stops accepting,
//!   lets the requests under way finish and exits 0.
//!
//! This is what the containerd shim (`containerd-shim-wasmpod-v1`) runs in each container's
//! process; a [`crate::Node`] is the way to run pods.
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use wasmpod::task::{Task, TaskOptions};
//!
//! let wasm = std::fs::read("hello.wasm")?;
//! let options = TaskOptions::new(["hello.wasm", "--name", "world"]).memory_limit(64 << 20);
//! let task = Task::new("hello.wasm".as_ref(), &wasm, options)?;
//! let terminator = task.terminator();
//! tokio::spawn(async move {
//!     let _ = tokio::signal::ctrl_c().await;
//!     terminator.terminate();
//! });
//! let exit = task.run().await;
//! std::process::exit(exit.code);
//! # }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;

use crate::container::{DEFAULT_PORT, EXIT_TERMINATED, HttpServe, Preopen, Sandbox};
#[cfg(feature = "compiler")]
use crate::engine;
use crate::engine::{Engine, Image};
use crate::host::{GuestSockets, TermSignal};
use crate::memory::{Budget, NodeMemory, PodMemory};
use crate::network::{NodeNetwork, PodNames};
use crate::{Egress, LoadError};

/// What a task runs with besides its module: argv, environment, directories, limits.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct TaskOptions {
    /// The guest's argv, its program name first.
    pub args: Vec<String>,
    /// The guest's environment.
    pub env: Vec<(String, String)>,
    /// Host directories the guest sees.
    pub mounts: Vec<TaskMount>,
    /// The guest's working directory (a guest path).
    pub working_dir: Option<String>,
    /// The most linear memory and table space the guest may hold, in bytes.
    pub memory_limit: Option<u64>,
    /// The CPU the guest may use, as a share of one core (below 1 to take effect).
    pub cpu_share: Option<f64>,
    /// The TCP port an HTTP handler component is served on (8080 when unset).
    pub http_port: Option<u16>,
}

impl TaskOptions {
    /// Options with this argv and nothing else.
    pub fn new<S: Into<String>>(args: impl IntoIterator<Item = S>) -> TaskOptions {
        TaskOptions {
            args: args.into_iter().map(Into::into).collect(),
            ..TaskOptions::default()
        }
    }

    /// Adds environment variables.
    pub fn envs<K: Into<String>, V: Into<String>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.env
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Shows the host directory `host` at `guest`, read-only or not.
    pub fn mount(
        mut self,
        host: impl Into<PathBuf>,
        guest: impl Into<String>,
        read_only: bool,
    ) -> Self {
        self.mounts.push(TaskMount {
            host: host.into(),
            guest: guest.into(),
            read_only,
        });
        self
    }

    /// Sets the working directory.
    pub fn working_dir(mut self, dir: impl Into<String>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// Sets the memory limit in bytes.
    pub fn memory_limit(mut self, bytes: u64) -> Self {
        self.memory_limit = Some(bytes);
        self
    }

    /// Sets the CPU limit as a share of one core.
    pub fn cpu_share(mut self, share: f64) -> Self {
        self.cpu_share = Some(share);
        self
    }

    /// Sets the port an HTTP handler component is served on.
    pub fn http_port(mut self, port: u16) -> Self {
        self.http_port = Some(port);
        self
    }
}

/// A host directory a task's guest sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskMount {
    /// The directory on the host (opened when the task is made).
    pub host: PathBuf,
    /// Where the guest sees it.
    pub guest: String,
    /// The guest may not change it.
    pub read_only: bool,
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskExit {
    /// The exit code: the guest's, 134 when it trapped, 137 out of memory, 143 stopped by
    /// TERM, 128 when it could not start.
    pub code: i32,
    /// It ended because it reached its memory limit.
    pub oom: bool,
    /// Why it ended, when that is more than its exit code (a trap, a mount that failed).
    pub message: Option<String>,
}

/// Delivers TERM to a task (see [`Task::terminator`]).
#[derive(Debug, Clone)]
pub struct Terminator(Arc<watch::Sender<bool>>);

impl Terminator {
    /// Sends TERM: a guest importing `wasmpod:pod/termination` is told; any other stops with 143.
    pub fn terminate(&self) {
        self.0.send_replace(true);
    }
}

/// One container's guest, ready to run as a process (see the [module docs](self)).
pub struct Task {
    sandbox: Arc<Sandbox>,
    term: Arc<watch::Sender<bool>>,
    // The engine's epoch ticker runs while the engine lives.
    _engine: Engine,
}

impl std::fmt::Debug for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task")
            .field("args", &self.sandbox.argv)
            .field("handles_term", &self.handles_term())
            .finish_non_exhaustive()
    }
}

impl Task {
    /// Compiles `wasm` (a module or component; `name` names it in errors) into a task.
    /// Blocking: compiling takes from milliseconds to seconds.
    pub fn new(name: &Path, wasm: &[u8], options: TaskOptions) -> Result<Task, LoadError> {
        let engine = task_engine(name)?;
        let image = engine.load_bytes(name, wasm)?;
        Ok(Task::with(engine, image, options))
    }

    /// Makes a task of an artefact of [`precompile`], without compiling.
    ///
    /// # Safety
    ///
    /// `artefact` must be an output of [`precompile`]: wasmtime checks that it was made by the
    /// same wasmtime with the same configuration for this CPU, but runs the machine code it
    /// holds as it is.
    pub unsafe fn from_precompiled(
        name: &Path,
        artefact: &[u8],
        options: TaskOptions,
    ) -> Result<Task, LoadError> {
        let engine = task_engine(name)?;
        // SAFETY: as the caller promised.
        let image = unsafe { engine.load_precompiled(name, artefact) }?;
        Ok(Task::with(engine, image, options))
    }

    fn with(engine: Engine, image: Image, options: TaskOptions) -> Task {
        let (term, term_rx) = watch::channel(false);
        let node_memory = Arc::new(NodeMemory::new(u64::MAX));
        let names = PodNames {
            hostname: String::new(),
            dns: crate::spec::Dns {
                aliases: Vec::new(),
                searches: Vec::new(),
                ndots: 1,
                nameservers: Vec::new(),
                node_resolver: true,
            },
        };
        let sandbox = Arc::new(Sandbox {
            image: Arc::new(image),
            argv: options.args,
            env: options.env,
            preopens: options
                .mounts
                .into_iter()
                .map(|m| Preopen {
                    host: crate::volumes::MountDir::open(&m.host),
                    guest: m.guest,
                    read_only: m.read_only,
                })
                .collect(),
            working_dir: options.working_dir,
            budget: Budget::new(options.memory_limit.unwrap_or(u64::MAX)),
            cpu: options
                .cpu_share
                .filter(|f| *f > 0.0 && *f < 1.0)
                .map(crate::container::CpuLimit::new),
            term: TermSignal(term_rx),
            kill: Default::default(),
            net: NodeNetwork::new(Egress::Allow, None).create_pod(names),
            host_sockets: true,
            http: HttpServe {
                ports: vec![options.http_port.unwrap_or(DEFAULT_PORT)],
                serving: crate::spec::Serving::default(),
            },
            activity: engine.activity().clone(),
            memory: PodMemory::new(node_memory),
            meter: crate::container::Meter::new(),
            stdin: None,
        });
        Task {
            sandbox,
            term: Arc::new(term),
            _engine: engine,
        }
    }

    /// Whether the guest imports `wasmpod:pod/termination` (TERM lets it finish).
    pub fn handles_term(&self) -> bool {
        self.sandbox.image.handles_term()
    }

    /// A handle that delivers TERM to the running task.
    pub fn terminator(&self) -> Terminator {
        Terminator(self.term.clone())
    }

    /// Runs the guest to its end, its stdout and stderr the process's.
    pub async fn run(self) -> TaskExit {
        let (stdout, stderr) = (wasmtime_wasi::cli::stdout(), wasmtime_wasi::cli::stderr());
        let mut term = self.term.subscribe();
        let handles_term = self.handles_term();
        let stopped = async {
            // A guest that does not handle TERM stops at once, as TERM's default action does.
            let _ = term.wait_for(|t| *t && !handles_term).await;
        };
        let exit = tokio::select! {
            exit = self.sandbox.run(stdout, stderr) => exit,
            () = stopped => crate::container::Exit::code(EXIT_TERMINATED),
        };
        TaskExit {
            code: exit.code,
            oom: exit.oom,
            message: exit.message,
        }
    }
}

fn task_engine(name: &Path) -> Result<Engine, LoadError> {
    Engine::new(None, GuestSockets::Host, Default::default()).map_err(|e| LoadError::Compile {
        path: name.to_owned(),
        message: format!("cannot start the engine: {e:#}"),
    })
}

/// Compiles a module or component (`name` names it in errors) into an artefact
/// [`Task::from_precompiled`] loads without compiling: what the shim stores in containerd's
/// content store, once for the node. Blocking.
#[cfg(feature = "compiler")]
pub fn precompile(name: &Path, wasm: &[u8]) -> Result<Vec<u8>, LoadError> {
    engine::precompile(name, wasm)
}

/// Changes whenever artefacts of [`precompile`] stop loading (another wasmpod or wasmtime
/// build, another CPU): part of the key they are stored under.
#[cfg(feature = "compiler")]
pub fn precompile_key() -> u64 {
    engine::precompile_key()
}
