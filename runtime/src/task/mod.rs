//! Containers run where someone else keeps the pod: what the containerd shim runs.
//!
//! A [`TaskEngine`] is one process's engine, shared by its tasks (one compile of each module,
//! one epoch ticker); a [`Task`] is one container's WASI module or component with its argv,
//! environment, directories, working directory and limits, with the container semantics that
//! make sense where containerd and the kubelet keep the pod:
//!
//! - [`Task::run`] runs the entry point with the stdio the caller gives ([`TaskIo`]);
//!   [`Task::exec`] runs a command in a fresh instance with the same mounts, environment,
//!   network and memory budget, as `kubectl exec` and exec probes do (the command names an
//!   export, such as a probe, or is the entry point's argv).
//! - [`Terminator::terminate`] is TERM: a guest that imports `wasmpod:pod/termination` learns
//!   it and goes on until it exits by itself; any other guest stops at once with 143. KILL is
//!   dropping the future of `run` or `exec`: every instance yields at each epoch tick.
//! - Exit codes are the supervisor's: the guest's own (0–255), 134 when it trapped, 137 when it
//!   ran out of memory ([`TaskExit::oom`]).
//! - Its components' `wasi:sockets` are the host's: a task runs in a network namespace made for
//!   it (in Kubernetes, the CNI's pod network), not in a wasmpod pod network.
//! - An HTTP handler component (`wasi:http/incoming-handler`, or 0.3's `wasi:http/handler`) is
//!   served on [`TaskOptions::http_port`] (8080 unless set, as `wasmtime serve` does) on every IPv4
//!   address of that namespace, a fresh instance per request, as in a pod; TERM stops accepting,
//!   lets the requests under way finish and exits 0.
//! - [`Task::usage`] is what it used (CPU time, memory), [`Task::resize`] changes its limits.
//!
//! A [`crate::Node`] is the way to run whole pods.
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use wasmpod::task::{TaskEngine, TaskIo, TaskOptions};
//!
//! let engine = TaskEngine::new(None)?;
//! let wasm = std::fs::read("hello.wasm")?;
//! let options = TaskOptions::new(["hello.wasm", "--name", "world"]).memory_limit(64 << 20);
//! let task = engine.task("hello.wasm".as_ref(), &wasm, options)?;
//! let terminator = task.terminator();
//! tokio::spawn(async move {
//!     let _ = tokio::signal::ctrl_c().await;
//!     terminator.terminate();
//! });
//! let exit = task.run(TaskIo::inherit()).await;
//! std::process::exit(exit.code);
//! # }
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::container::{
    CpuLimit, DEFAULT_PORT, EXIT_TERMINATED, HttpServe, Meter, Preopen, Sandbox, Shared,
};
use crate::engine::{Engine, Image};
use crate::host::{GuestSockets, TermSignal};
use crate::memory::{Budget, NodeMemory, PodMemory};
use crate::network::{NodeNetwork, PodNames};
use crate::{Egress, LoadError};

mod io;
mod options;

pub use io::TaskIo;
use io::tell;
pub use options::{HTTP_PORT, ResizeError, TaskExit, TaskMount, TaskOptions, TaskUsage};

/// Delivers TERM to a task (see [`Task::terminator`]).
#[derive(Debug, Clone)]
pub struct Terminator(TermSignal);

impl Terminator {
    /// Sends TERM: a guest importing `wasmpod:pod/termination` is told; any other stops with 143.
    pub fn terminate(&self) {
        self.0.deliver();
    }
}

/// One process's engine, shared by its tasks: each module or component is compiled once (and
/// kept in the compile cache directory, when there is one, for the next process).
pub struct TaskEngine {
    engine: Arc<Engine>,
    /// Images by the SHA-256 of their bytes: a pod's containers, and a container's restarts,
    /// share one compiled image.
    images: Mutex<HashMap<[u8; 32], Arc<Image>>>,
    /// What its tasks hold together, within [`TaskEngine::limit_memory`].
    memory: Arc<Budget>,
    /// Their memory counted together against what the process's memory cgroup leaves them (a
    /// shim's is its pod's cgroup, which the kubelet limits to the pod's containers and
    /// overhead): a task whose growth would pass it ends as by its own limit, instead of the
    /// kernel ending the process and every task in it.
    in_cgroup: Arc<NodeMemory>,
}

impl std::fmt::Debug for TaskEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let images = self.images.lock().map(|i| i.len()).unwrap_or(0);
        f.debug_struct("TaskEngine")
            .field("images", &images)
            .finish_non_exhaustive()
    }
}

impl TaskEngine {
    /// An engine whose compiled artefacts are kept in `cache_dir` (a directory only root may
    /// write, else the cache is off), or only in memory.
    pub fn new(cache_dir: Option<&Path>) -> Result<TaskEngine, LoadError> {
        let engine = Engine::new(
            cache_dir.map(Path::to_path_buf),
            GuestSockets::Host,
            Default::default(),
            // A pod's process runs its containers for as long as they live: code that starts
            // on baseline code would keep it.
            false,
        )
        .map_err(|e| LoadError::Compile {
            path: PathBuf::new(),
            message: format!("cannot start the engine: {e:#}"),
        })?;
        Ok(TaskEngine {
            engine: Arc::new(engine),
            images: Mutex::new(HashMap::new()),
            memory: Budget::new(u64::MAX),
            in_cgroup: Arc::new(NodeMemory::in_cgroup(u64::MAX)),
        })
    }

    /// Caps the memory all of this engine's tasks hold together (their linear memories,
    /// tables and socket buffers), beside each task's own limit: a task whose growth does not
    /// fit ends as by its own limit ([`TaskExit::oom`]). The process's memory cgroup caps them
    /// too, without this. A cap below what is in use takes nothing back: growth fails until
    /// enough is freed.
    pub fn limit_memory(&self, bytes: u64) {
        self.memory.cap(bytes);
    }

    /// Bytes this engine's tasks hold now.
    pub fn memory_used(&self) -> u64 {
        self.memory.used()
    }

    /// A task of `wasm` (a module or component; `name` names it in errors), compiled unless
    /// this engine or its cache has it. Blocking: compiling takes milliseconds to seconds.
    pub fn task(&self, name: &Path, wasm: &[u8], options: TaskOptions) -> Result<Task, LoadError> {
        let key: [u8; 32] = Sha256::digest(wasm).into();
        let cached = self
            .images
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        let image = match cached {
            Some(image) => image,
            None => {
                let image = Arc::new(self.engine.load_bytes(name, wasm)?);
                self.images
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, image.clone());
                image
            }
        };
        Ok(Task::with(
            self.engine.clone(),
            image,
            options,
            self.memory.clone(),
            self.in_cgroup.clone(),
        ))
    }
}

/// One container's guest, ready to run (see the [module docs](self)).
pub struct Task {
    sandbox: Arc<Sandbox>,
    cpu: Arc<CpuLimit>,
    // The engine's epoch ticker runs while the engine lives.
    _engine: Arc<Engine>,
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
    fn with(
        engine: Arc<Engine>,
        image: Arc<Image>,
        options: TaskOptions,
        together: Arc<Budget>,
        in_cgroup: Arc<NodeMemory>,
    ) -> Task {
        let names = PodNames {
            hostname: String::new(),
            dns: Arc::new(crate::spec::Dns {
                ndots: 1,
                node_resolver: true,
                ..crate::spec::Dns::default()
            }),
        };
        // Always a CPU limit, unlimited unless set, so that a resize can set one.
        let cpu = CpuLimit::new(
            options
                .cpu_share
                .filter(|f| *f > 0.0 && f.is_finite())
                .unwrap_or(f64::INFINITY),
        );
        let sandbox = Arc::new(Sandbox {
            image,
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
            budget: Budget::within(options.memory_limit.unwrap_or(u64::MAX), Some(together)),
            cpu: Some(cpu.clone()),
            term: TermSignal::default(),
            kill: Default::default(),
            net: NodeNetwork::new(Egress::Allow, None)
                .create_pod(names)
                .expect("a new network has every address free"),
            host_sockets: true,
            http: HttpServe {
                ports: vec![options.http_port.unwrap_or(DEFAULT_PORT)],
                serving: options.serving,
            },
            activity: engine.activity().clone(),
            memory: PodMemory::new(in_cgroup),
            meter: Meter::new(),
            stdin: None,
        });
        Task {
            sandbox,
            cpu,
            _engine: engine,
        }
    }

    /// Whether the guest imports `wasmpod:pod/termination` (TERM lets it finish).
    pub fn handles_term(&self) -> bool {
        self.sandbox.image.handles_term()
    }

    /// A handle that delivers TERM to the running task.
    pub fn terminator(&self) -> Terminator {
        Terminator(self.sandbox.term.clone())
    }

    /// Runs the guest's entry point to its end (an HTTP handler: serves until TERM). Why it
    /// ended, when that is more than its exit code (a trap), is the last line of its stderr;
    /// it returns once its output is written.
    pub async fn run(&self, io: TaskIo) -> TaskExit {
        let handles_term = self.handles_term();
        let stopped = async {
            // A guest that does not handle TERM stops at once, as TERM's default action does.
            if handles_term {
                std::future::pending::<()>().await;
            }
            self.sandbox.term.delivered().await;
        };
        let stderr = Shared::new(io.stderr);
        let exit = tokio::select! {
            exit = self.sandbox.clone().run_with_stdin(io.stdout, stderr.clone(), io.stdin) => exit,
            () = stopped => crate::container::Exit::code(EXIT_TERMINATED),
        };
        tell(&stderr, exit.message.as_deref()).await;
        drop(stderr);
        TaskIo::written(io.written).await;
        TaskExit {
            code: exit.code,
            oom: exit.oom,
            message: exit.message,
        }
    }

    /// Runs `command` in a fresh instance: the export `command[0]` names (a probe such as
    /// `readiness`, or any exported function) when the guest has it, else the entry point with
    /// `command` as its argv. Same mounts, environment, network and memory budget as
    /// [`Task::run`]; the instance's memory is its own.
    pub async fn exec(&self, command: &[String], io: TaskIo) -> TaskExit {
        let stderr = Shared::new(io.stderr);
        let (code, message) = self
            .sandbox
            .exec_streamed(command, io.stdin, io.stdout, stderr.clone())
            .await;
        tell(&stderr, message.as_deref()).await;
        drop(stderr);
        TaskIo::written(io.written).await;
        TaskExit {
            code,
            // An exec's end by the memory limit is its 137 and its message; `oom` is the
            // container's own end (`run`).
            oom: false,
            message,
        }
    }

    /// What the task used so far.
    pub fn usage(&self) -> TaskUsage {
        TaskUsage {
            cpu: self.sandbox.meter.cpu(),
            memory: self.sandbox.budget.used(),
            memory_limit: self.sandbox.budget.limit(),
        }
    }

    /// Changes the task's limits while it runs: the memory limit (refused below what it holds)
    /// and the CPU share (a share of one core; `f64::INFINITY` for none).
    pub fn resize(
        &self,
        memory_limit: Option<u64>,
        cpu_share: Option<f64>,
    ) -> Result<(), ResizeError> {
        if let Some(share) = cpu_share
            && (share.is_nan() || share <= 0.0)
        {
            return Err(ResizeError::Cpu(share));
        }
        if let Some(limit) = memory_limit {
            self.sandbox
                .budget
                .set_limit(limit)
                .map_err(|used| ResizeError::BelowUsage { limit, used })?;
        }
        if let Some(share) = cpu_share {
            self.cpu.set_share(share);
        }
        Ok(())
    }
}
