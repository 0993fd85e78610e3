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

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::sync::watch;
use tokio_util::sync::PollSender;
use wasmtime_wasi::cli::{AsyncStdinStream, StdoutStream};

use crate::container::{
    CpuLimit, DEFAULT_PORT, EXIT_TERMINATED, HttpServe, Meter, Preopen, Sandbox, Shared,
};
use crate::engine::{Engine, Image};
use crate::host::{GuestSockets, TermSignal};
use crate::memory::{Budget, NodeMemory, PodMemory};
use crate::network::{NodeNetwork, PodNames};
use crate::spec::Serving;
use crate::{Egress, FieldError, LoadError};

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
    /// How an HTTP handler component serves (`wasmpod.dev/http-*` annotations).
    serving: Serving,
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

    /// Takes the pod's `wasmpod.dev/http-*` annotations, as a pod's do in a node
    /// (`http-max-concurrency`, `http-request-timeout`), and [`HTTP_PORT`]: how an HTTP handler
    /// component serves. A bad value is an error that names the annotation.
    pub fn annotations(
        mut self,
        annotations: &BTreeMap<String, String>,
    ) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        self.serving = crate::spec::serving::check(annotations, &mut errors);
        if let Some(value) = annotations.get(HTTP_PORT) {
            match value.trim().parse::<u16>() {
                Ok(port) if port > 0 => self.http_port = Some(port),
                _ => errors.push(FieldError::invalid(
                    format!("metadata.annotations[{HTTP_PORT}]"),
                    format!("invalid value {value:?}: must be a port from 1 to 65535"),
                )),
            }
        }
        if errors.is_empty() {
            Ok(self)
        } else {
            Err(errors)
        }
    }
}

/// The pod annotation that sets the TCP port its HTTP handler components are served on
/// (`"8000"`; 8080 without it).
pub const HTTP_PORT: &str = "wasmpod.dev/http-port";

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
    /// The container ended because it reached its memory limit (`Task::run` only: an exec that
    /// did ends with 137 and says so in its message).
    pub oom: bool,
    /// Why it ended, when that is more than its exit code (a trap, a mount that failed).
    pub message: Option<String>,
}

/// What a task used so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskUsage {
    /// The CPU time its instances ran (entry point, execs, HTTP requests).
    pub cpu: Duration,
    /// Its working set: linear memories, tables and socket buffers, in bytes.
    pub memory: u64,
    /// Its memory limit in bytes (`u64::MAX` without one).
    pub memory_limit: u64,
}

/// Writes why an instance ended, after what it wrote, to its stderr: where the kubelet looks
/// for it (`terminationMessagePolicy: FallbackToLogsOnError`).
async fn tell(stderr: &Shared<Output>, message: Option<&str>) {
    let Some(message) = message else {
        return;
    };
    // Written and flushed before the stream is dropped (which would drop what it still holds).
    let line = Bytes::from(format!("wasmpod: {message}\n"));
    let _ = stderr.p2_stream().blocking_write_and_flush(line).await;
}

/// Why a task's limits could not be changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ResizeError {
    /// The new memory limit is below what the task holds (memory is never taken back).
    #[error("the memory limit {limit} bytes is below the {used} bytes the container holds")]
    BelowUsage {
        /// The limit asked for.
        limit: u64,
        /// The bytes in use.
        used: u64,
    },
    /// A CPU share that is not a positive number.
    #[error("the CPU limit {0} is not a positive share of a core")]
    Cpu(f64),
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

type Output = Box<dyn StdoutStream + Sync>;

/// A task's stdio for one run or exec: empty stdin and discarded output unless given.
pub struct TaskIo {
    stdin: Option<AsyncStdinStream>,
    stdout: Output,
    stderr: Output,
    /// Each writer's task, done once it has written everything.
    written: Vec<tokio::sync::oneshot::Receiver<()>>,
}

impl std::fmt::Debug for TaskIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskIo")
            .field("stdin", &self.stdin.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for TaskIo {
    fn default() -> Self {
        TaskIo::new()
    }
}

/// The most bytes of a guest's output one write passes on, and how many such chunks wait for a
/// writer that is slow to take them (then the guest waits).
const OUTPUT_CHUNK: usize = 64 << 10;
const PIPE_CHUNKS: usize = 16;
/// How long a task's end waits for its output to be written (a reader that does not read is
/// not waited for longer).
const WRITTEN_WAIT: Duration = Duration::from_secs(2);

impl TaskIo {
    /// No input, output discarded.
    pub fn new() -> TaskIo {
        TaskIo {
            stdin: None,
            stdout: Box::new(tokio::io::empty()),
            stderr: Box::new(tokio::io::empty()),
            written: Vec::new(),
        }
    }

    /// The process's own stdout and stderr (no input).
    pub fn inherit() -> TaskIo {
        TaskIo {
            stdin: None,
            stdout: Box::new(tokio::io::stdout()),
            stderr: Box::new(tokio::io::stderr()),
            written: Vec::new(),
        }
    }

    /// Reads the guest's stdin from `reader`.
    pub fn stdin(mut self, reader: impl AsyncRead + Send + Sync + 'static) -> Self {
        self.stdin = Some(AsyncStdinStream::new(reader));
        self
    }

    /// Writes the guest's stdout to `writer` (from a task on the current async runtime).
    pub fn stdout(mut self, writer: impl AsyncWrite + Send + Unpin + 'static) -> Self {
        let (pipe, written) = Pipe::new(writer);
        self.stdout = Box::new(pipe);
        self.written.push(written);
        self
    }

    /// Writes the guest's stderr to `writer` (from a task on the current async runtime).
    pub fn stderr(mut self, writer: impl AsyncWrite + Send + Unpin + 'static) -> Self {
        let (pipe, written) = Pipe::new(writer);
        self.stderr = Box::new(pipe);
        self.written.push(written);
        self
    }

    /// After the guest's streams are gone: waits (a while at most) until the writers have
    /// written what it wrote.
    async fn written(written: Vec<tokio::sync::oneshot::Receiver<()>>) {
        let all = async {
            for w in written {
                let _ = w.await;
            }
        };
        let _ = tokio::time::timeout(WRITTEN_WAIT, all).await;
    }
}

/// One stdout or stderr of a task: every stream the guest opens on it (a component opens one
/// per write, a preview1 module one for all) sends what it writes, in order, through a channel
/// to one async task that owns the writer. A writer that fails (its reader is gone) is dropped
/// and what comes after is discarded: a guest never waits on it. The writer closes when the
/// task's streams are all gone.
#[derive(Clone)]
struct Pipe(mpsc::Sender<Bytes>);

impl Pipe {
    fn new(
        mut writer: impl AsyncWrite + Send + Unpin + 'static,
    ) -> (Pipe, tokio::sync::oneshot::Receiver<()>) {
        let (tx, mut rx) = mpsc::channel::<Bytes>(PIPE_CHUNKS);
        let (done, written) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            while let Some(bytes) = rx.recv().await {
                if writer.write_all(&bytes).await.is_err() {
                    return;
                }
            }
            let _ = writer.flush().await;
            drop(writer);
            let _ = done.send(());
        });
        (Pipe(tx), written)
    }
}

impl wasmtime_wasi::cli::IsTerminal for Pipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Pipe {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(PipeWriter(PollSender::new(self.0.clone())))
    }
}

struct PipeWriter(PollSender<Bytes>);

impl AsyncWrite for PipeWriter {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let n = buf.len().min(OUTPUT_CHUNK);
        if std::task::ready!(self.0.poll_reserve(cx)).is_ok() {
            let _ = self.0.send_item(Bytes::copy_from_slice(&buf[..n]));
        }
        std::task::Poll::Ready(Ok(n))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
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
    term: Arc<watch::Sender<bool>>,
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
        let (term, term_rx) = watch::channel(false);
        let names = PodNames {
            hostname: String::new(),
            dns: crate::spec::Dns {
                ndots: 1,
                node_resolver: true,
                ..crate::spec::Dns::default()
            },
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
            term: TermSignal(term_rx),
            kill: Default::default(),
            net: NodeNetwork::new(Egress::Allow, None).create_pod(names),
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
            term: Arc::new(term),
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
        Terminator(self.term.clone())
    }

    /// Runs the guest's entry point to its end (an HTTP handler: serves until TERM). Why it
    /// ended, when that is more than its exit code (a trap), is the last line of its stderr;
    /// it returns once its output is written.
    pub async fn run(&self, io: TaskIo) -> TaskExit {
        let mut term = self.term.subscribe();
        let handles_term = self.handles_term();
        let stopped = async {
            // A guest that does not handle TERM stops at once, as TERM's default action does.
            let _ = term.wait_for(|t| *t && !handles_term).await;
        };
        let stderr = Shared::new(io.stderr);
        let exit = tokio::select! {
            exit = self.sandbox.run_with_stdin(io.stdout, stderr.clone(), io.stdin) => exit,
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
