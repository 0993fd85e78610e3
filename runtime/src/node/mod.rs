//! The node: one wasmtime engine and the pods running on it.

mod registry;
mod scheduler;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::PodStatus;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use tokio::sync::{mpsc, oneshot, watch};

use crate::engine::{Engine, Image, LoadError, Pull};
use crate::events::{EventStream, Journal};
use crate::memory::{NodeMemory, PodMemory};
use crate::network::publish::{PortMapping, publish};
use crate::network::{Egress, NodeNetwork};
use crate::output::{LogBook, LogLimits, LogOptions, Logs, OutputLine};
use crate::paths::{ClaimError, PodPaths};
use crate::spec::PodSpec;
use crate::supervisor::{BackoffOptions, Msg, NodeContext, PodSetup, PodTask, Snapshot};
pub(crate) use scheduler::Seat;

/// Why a node or a pod could not be created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The wasmtime engine could not be set up.
    #[error("cannot start the wasm engine: {0}")]
    Engine(String),
    /// A container's module cannot be loaded.
    #[error("{field}: {source}")]
    Image {
        /// The field naming the module, e.g. `spec.containers[0].image`.
        field: String,
        /// Why.
        #[source]
        source: LoadError,
    },
    /// A pod of that name exists on the node and is not being deleted (or is being created).
    #[error("pod {namespace}/{name} already exists")]
    AlreadyExists {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
    },
    /// The pod names a PriorityClass the node does not have.
    #[error("spec.priorityClassName: no PriorityClass with name {0} was found")]
    UnknownPriorityClass(String),
    /// The node's PriorityClasses are inconsistent (two of one name, two global defaults).
    #[error("PriorityClass {name}: {message}")]
    PriorityClass {
        /// The class.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// A preview1 module declares ports, but only components have sockets.
    #[error(
        "{field}: the container is a WASI preview1 module, which has no sockets; build it as a \
         component (wasm32-wasip2) to serve ports"
    )]
    NoSockets {
        /// The field declaring the ports, e.g. `spec.containers[0].ports`.
        field: String,
    },
    /// A published port cannot be opened on the host (taken, or an address the host lacks).
    #[error("{what}: {source}")]
    Publish {
        /// The field or option and the host address, e.g.
        /// `spec.containers[0].ports[0].hostPort: cannot listen on 127.0.0.1:8080`.
        what: String,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// The log asked for does not exist (no such container, not started yet, no previous
    /// instance); the message says which, as `kubectl logs` does.
    #[error("{0}")]
    NoLogs(String),
    /// Another pod (in this process, or in another one using the same state dir) has this
    /// `metadata.uid`.
    #[error("metadata.uid: {0:?} is in use by another pod sharing this state dir")]
    UidInUse(String),
    /// A file or directory of the node's state could not be made.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
}

/// The settings of a [`Node`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeOptions {
    /// Where pods keep their logs and `emptyDir` volumes.
    pub state_dir: PathBuf,
    /// Where compiled modules are cached; `None` disables the on-disk cache.
    pub cache_dir: Option<PathBuf>,
    /// The crash-loop backoff.
    pub backoff: BackoffOptions,
    /// The most linear memory one container instance may use, in bytes.
    pub memory_limit: u64,
    /// Whether pods may reach addresses outside the node's pod network.
    pub egress: Egress,
    /// The node's name (`spec.nodeName` in the downward API); default the host's name.
    pub node_name: String,
    /// How many terminated pods (Succeeded or Failed, not deleted) the node keeps, with their
    /// status and logs; past it the oldest are deleted. Kubernetes' default is 12,500.
    pub terminated_pods_kept: usize,
    /// What the node has for pods' requests; a pod that does not fit waits, Pending.
    pub allocatable: Allocatable,
    /// When the linear memory all guests hold exceeds this many bytes, pods using more than
    /// they request are evicted (the kubelet's order). `None`: the allocatable memory less
    /// 100 MiB (Kubernetes' default `memory.available<100Mi`), or less a tenth if that is smaller.
    pub eviction_threshold: Option<u64>,
    /// The PriorityClasses pods may name in `spec.priorityClassName`.
    pub priority_classes: Vec<PriorityClass>,
    /// How large containers' logs may grow (the kubelet's rotation settings).
    pub log_limits: LogLimits,
}

/// What a node has for pods: the sum of the requests of the pods it runs stays within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Allocatable {
    /// Bytes of memory; default the machine's memory.
    pub memory: u64,
    /// Thousandths of a core; default 1000 per core the process may use.
    pub cpu_milli: u64,
    /// Pods at once (not counting terminated ones); default what the process's memory-mapping
    /// limit (`vm.max_map_count`) holds at six mappings per instance.
    pub pods: u64,
}

impl Allocatable {
    /// Memory, CPU and pod count as the machine allows.
    pub fn from_machine() -> Allocatable {
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|info| {
                let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
                let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
                Some(kib * 1024)
            })
            .unwrap_or(4 << 30);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let max_map_count = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(65_530);
        Allocatable {
            memory,
            cpu_milli: cores * 1000,
            pods: (max_map_count.saturating_sub(4096) / 6).max(1),
        }
    }

    /// Sets [`Allocatable::memory`].
    pub fn memory(mut self, bytes: u64) -> Self {
        self.memory = bytes;
        self
    }

    /// Sets [`Allocatable::cpu_milli`].
    pub fn cpu_milli(mut self, milli: u64) -> Self {
        self.cpu_milli = milli;
        self
    }

    /// Sets [`Allocatable::pods`].
    pub fn pods(mut self, pods: u64) -> Self {
        self.pods = pods;
        self
    }
}

impl Default for NodeOptions {
    fn default() -> Self {
        let state = dirs::state_dir()
            .or_else(dirs::cache_dir)
            .unwrap_or_else(std::env::temp_dir);
        NodeOptions {
            state_dir: state.join("wasmpod"),
            cache_dir: dirs::cache_dir().map(|d| d.join("wasmpod")),
            backoff: BackoffOptions::default(),
            memory_limit: 1 << 30,
            egress: Egress::Allow,
            node_name: host_name(),
            terminated_pods_kept: 12_500,
            allocatable: Allocatable::from_machine(),
            eviction_threshold: None,
            priority_classes: Vec::new(),
            log_limits: LogLimits::default(),
        }
    }
}

impl NodeOptions {
    /// Sets [`NodeOptions::state_dir`].
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = dir.into();
        self
    }

    /// Sets [`NodeOptions::cache_dir`].
    pub fn cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cache_dir = dir;
        self
    }

    /// Sets [`NodeOptions::memory_limit`].
    pub fn memory_limit(mut self, bytes: u64) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// Sets [`NodeOptions::node_name`].
    pub fn node_name(mut self, name: impl Into<String>) -> Self {
        self.node_name = name.into();
        self
    }

    /// Sets [`NodeOptions::terminated_pods_kept`].
    pub fn terminated_pods_kept(mut self, n: usize) -> Self {
        self.terminated_pods_kept = n;
        self
    }

    /// Sets [`NodeOptions::egress`].
    pub fn egress(mut self, egress: Egress) -> Self {
        self.egress = egress;
        self
    }

    /// Sets [`NodeOptions::allocatable`].
    pub fn allocatable(mut self, allocatable: Allocatable) -> Self {
        self.allocatable = allocatable;
        self
    }

    /// Sets [`NodeOptions::eviction_threshold`].
    pub fn eviction_threshold(mut self, bytes: u64) -> Self {
        self.eviction_threshold = Some(bytes);
        self
    }

    /// Adds PriorityClasses (see [`crate::read_priority_classes`] to read them from YAML).
    pub fn priority_classes(mut self, classes: impl IntoIterator<Item = PriorityClass>) -> Self {
        self.priority_classes.extend(classes);
        self
    }

    /// Sets [`NodeOptions::backoff`].
    pub fn backoff(mut self, backoff: BackoffOptions) -> Self {
        self.backoff = backoff;
        self
    }

    /// Sets [`NodeOptions::log_limits`].
    pub fn log_limits(mut self, limits: LogLimits) -> Self {
        self.log_limits = limits;
        self
    }
}

/// The machine's host name, or `localhost`.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Options for one pod.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct PodOptions {
    /// Receives every line the pod's containers write, as they write it. A slow receiver slows
    /// the writers down; nothing is dropped.
    pub output: Option<mpsc::Sender<OutputLine>>,
    /// Extra published ports (`run --publish`): host address → container port on the pod IP.
    /// `hostPort` fields of the pod are published too.
    pub publish: Vec<(SocketAddr, u16)>,
}

impl PodOptions {
    /// Publishes `container_port` of the pod on `host` (adds to [`PodOptions::publish`]).
    pub fn publish(mut self, host: SocketAddr, container_port: u16) -> Self {
        self.publish.push((host, container_port));
        self
    }

    /// Sets [`PodOptions::output`].
    pub fn output(mut self, tx: mpsc::Sender<OutputLine>) -> Self {
        self.output = Some(tx);
        self
    }
}

/// A node: runs pods in this process, on one shared wasmtime engine.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use wasmpod::{Node, NodeOptions, PodOptions, PodSpec};
///
/// let node = Node::new(NodeOptions::default())?;
/// let spec = PodSpec::from_file("examples/hello/pod.yaml".as_ref())?;
/// let pod = node.create_pod(spec, PodOptions::default()).await?;
/// let status = pod.wait().await;
/// println!("{}", status.phase.unwrap_or_default());
/// pod.delete(None);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Node {
    context: Arc<NodeContext>,
    state_dir: PathBuf,
    pods: Arc<registry::Registry>,
    scheduler: Arc<scheduler::Scheduler>,
    memory: Arc<NodeMemory>,
    priorities: Arc<Priorities>,
}

/// A pod's priority and whether it may preempt.
#[derive(Debug, Clone, Copy)]
struct Priority {
    value: i32,
    preempts: bool,
}

/// The node's PriorityClasses by name, and the priority of a pod that names none.
struct Priorities {
    classes: std::collections::HashMap<String, Priority>,
    default: Priority,
}

impl Priorities {
    fn new(list: &[PriorityClass]) -> Result<Priorities, Error> {
        let mut classes = std::collections::HashMap::new();
        let mut default: Option<(&str, Priority)> = None;
        for class in list {
            let name = class.metadata.name.as_deref().unwrap_or_default();
            let fail = |message: String| Error::PriorityClass {
                name: name.to_owned(),
                message,
            };
            let priority = Priority {
                value: class.value,
                preempts: class.preemption_policy.as_deref() != Some("Never"),
            };
            if class.global_default == Some(true) {
                if let Some((other, _)) = default {
                    return Err(fail(format!(
                        "globalDefault: only one PriorityClass can be the global default; \
                         {other} already is"
                    )));
                }
                default = Some((name, priority));
            }
            if classes.insert(name.to_owned(), priority).is_some() {
                return Err(fail("given twice".into()));
            }
        }
        // Without a global default, a pod without a class has priority 0.
        let zero = Priority {
            value: 0,
            preempts: true,
        };
        Ok(Priorities {
            classes,
            default: default.map_or(zero, |(_, p)| p),
        })
    }

    fn of(&self, spec: &PodSpec) -> Result<Priority, Error> {
        match &spec.priority_class {
            None => Ok(self.default),
            Some(name) => self
                .classes
                .get(name)
                .copied()
                .ok_or_else(|| Error::UnknownPriorityClass(name.clone())),
        }
    }
}

impl Node {
    /// Builds a node: sets up the engine and its compile cache.
    pub fn new(options: NodeOptions) -> Result<Node, Error> {
        raise_fd_limit();
        crate::volumes::remove_orphans();
        let engine =
            Engine::new(options.cache_dir.clone()).map_err(|e| Error::Engine(format!("{e:#}")))?;
        std::fs::create_dir_all(&options.state_dir).map_err(|source| Error::Io {
            path: options.state_dir.clone(),
            source,
        })?;
        let priorities = Priorities::new(&options.priority_classes)?;
        let allocatable = options.allocatable;
        let threshold = options.eviction_threshold.unwrap_or_else(|| {
            let margin = (100 << 20u64).min(allocatable.memory / 10);
            allocatable.memory - margin
        });
        let memory = Arc::new(NodeMemory::new(threshold));
        let scheduler =
            scheduler::Scheduler::new(allocatable, options.node_name.clone(), memory.clone());
        // Terminated pods are collected whenever a pod stops for good (the only time their
        // number grows).
        let pods: Arc<registry::Registry> = Arc::default();
        let (registry, keep) = (Arc::downgrade(&pods), options.terminated_pods_kept);
        scheduler.after_release(move || {
            if let Some(pods) = registry.upgrade() {
                pods.sweep(keep);
            }
        });
        let context = NodeContext {
            engine,
            backoff: options.backoff,
            network: NodeNetwork::new(options.egress),
            node_name: options.node_name,
            memory_limit: usize::try_from(options.memory_limit).unwrap_or(usize::MAX),
            log_limits: options.log_limits,
        };
        Ok(Node {
            context: Arc::new(context),
            state_dir: options.state_dir,
            pods,
            scheduler,
            memory,
            priorities: Arc::new(priorities),
        })
    }

    /// What the node has for pods' requests.
    pub fn allocatable(&self) -> Allocatable {
        self.scheduler.allocatable()
    }

    /// Whether the pod could ever be admitted: `Err` says which of its requests is larger than
    /// everything the node has (such a pod would stay Pending forever).
    pub fn check_fits(&self, spec: &PodSpec) -> Result<(), String> {
        let has = self.scheduler.allocatable();
        let wants = spec.requests();
        if wants.memory > has.memory {
            return Err(format!(
                "0/1 nodes are available: 1 Insufficient memory. The pod requests {} bytes and \
                 the node has {} allocatable: it can never be scheduled",
                wants.memory, has.memory
            ));
        }
        if wants.cpu_milli > has.cpu_milli {
            return Err(format!(
                "0/1 nodes are available: 1 Insufficient cpu. The pod requests {}m and the node \
                 has {}m allocatable: it can never be scheduled",
                wants.cpu_milli, has.cpu_milli
            ));
        }
        if has.pods == 0 {
            return Err("the node admits no pods (allocatable pods is 0)".into());
        }
        Ok(())
    }

    /// Bytes of linear memory the node's guests hold now.
    pub fn memory_in_use(&self) -> u64 {
        self.memory.used()
    }

    /// Checks that every container's module can be loaded, compiling it (or taking it from the
    /// cache) as needed. [`Node::create_pod`] does this too.
    pub async fn load_images(&self, spec: &PodSpec) -> Result<(), Error> {
        self.preload(spec).await.map(drop)
    }

    async fn preload(&self, spec: &PodSpec) -> Result<Vec<(Arc<Image>, Pull)>, Error> {
        let mut images = Vec::new();
        for (field, path) in spec.images() {
            if let Some(image) = self.context.engine.loaded(path) {
                images.push((image, Pull::Present));
                continue;
            }
            let (context, file) = (self.context.clone(), path.to_owned());
            let loaded = tokio::task::spawn_blocking(move || context.engine.load(&file))
                .await
                .map_err(|e| Error::Engine(e.to_string()))?;
            images.push(loaded.map_err(|source| Error::Image { field, source })?);
        }
        Ok(images)
    }

    /// The node's pods that are not deleted yet, oldest first.
    pub fn pods(&self) -> Vec<PodHandle> {
        self.pods.list()
    }

    /// Creates a pod and starts it. Every container's module is loaded first: a module that
    /// cannot be loaded is an error and nothing starts.
    ///
    /// At most one pod of a name runs at a time: while a pod of the same namespace and name is
    /// being deleted, the new one waits until every container of the old one has stopped and it
    /// is gone; a pod of that name that is not being deleted is [`Error::AlreadyExists`].
    /// Terminated pods beyond [`NodeOptions::terminated_pods_kept`] are deleted, oldest first,
    /// whenever a pod stops for good.
    pub async fn create_pod(&self, spec: PodSpec, options: PodOptions) -> Result<PodHandle, Error> {
        let priority = self.priorities.of(&spec)?;
        loop {
            match self.pods.reserve(&spec.namespace, &spec.name) {
                registry::Reserve::Reserved => break,
                registry::Reserve::Wait(old) => old.deleted().await,
                registry::Reserve::Taken => {
                    return Err(Error::AlreadyExists {
                        namespace: spec.namespace.clone(),
                        name: spec.name.clone(),
                    });
                }
            }
        }
        let (namespace, name) = (spec.namespace.clone(), spec.name.clone());
        let created = self.start_pod(spec, options, priority).await;
        match &created {
            Ok(pod) => self.pods.insert(&namespace, &name, pod.clone()),
            Err(_) => self.pods.release(&namespace, &name),
        }
        created
    }

    async fn start_pod(
        &self,
        spec: PodSpec,
        options: PodOptions,
        priority: Priority,
    ) -> Result<PodHandle, Error> {
        let images = self.preload(&spec).await?;
        for (c, (image, _)) in spec.containers.iter().zip(&images) {
            if !c.ports.is_empty() && matches!(**image, Image::Module { .. }) {
                return Err(Error::NoSockets {
                    field: format!("{}.ports", c.field),
                });
            }
        }
        let uid = spec
            .uid
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        // Volumes under `pods/<uid>`, logs under `logs/` as the kubelet lays out
        // `/var/log/pods` (`<namespace>_<pod>_<uid>/<container>/<restart>.log`); a pod without
        // volumes makes no directory under `pods/`.
        let paths = PodPaths::claim(&self.state_dir, &spec.namespace, &spec.name, &uid).map_err(
            |e| match e {
                ClaimError::InUse(uid) => Error::UidInUse(uid),
                ClaimError::BadComponent(part) => Error::Io {
                    path: self.state_dir.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("{part:?} cannot be part of a path"),
                    ),
                },
                ClaimError::Io { path, source } => Error::Io { path, source },
            },
        )?;
        let (pod_dir, log_dir) = (paths.pod_dir.clone(), paths.log_dir.clone());
        let net = self.context.network.create_pod(&spec.hostname);
        let mut ports: Vec<PortMapping> = spec
            .host_ports()
            .filter_map(|(origin, p)| {
                Some(PortMapping {
                    host: p.host?,
                    container_port: p.port,
                    origin,
                })
            })
            .collect();
        ports.extend(options.publish.iter().map(|&(host, port)| PortMapping {
            host,
            container_port: port,
            origin: format!("--publish {}:{port}", host.port()),
        }));
        let published =
            publish(&net, &ports).map_err(|(what, source)| Error::Publish { what, source })?;
        let spec = Arc::new(spec);
        let seat = self.scheduler.seat();
        let memory = PodMemory::new(self.memory.clone());
        let setup = PodSetup {
            uid: uid.clone(),
            paths,
            images,
            tap: options.output,
            net,
            published,
            memory: memory.clone(),
        };
        let requests = spec.requests();
        let (mut task, channels) =
            PodTask::prepare(spec.clone(), self.context.clone(), setup, seat).map_err(
                |source| Error::Io {
                    path: pod_dir.clone(),
                    source,
                },
            )?;
        let handle = PodHandle {
            inner: Arc::new(PodShared {
                deleting: Default::default(),
                name: spec.name.clone(),
                uid,
                pod_dir,
                log_dir,
                tx: channels.tx,
                journal: channels.journal,
                snapshot: channels.snapshot,
                logs: channels.logs,
            }),
        };
        let candidate = scheduler::Candidate {
            handle: handle.clone(),
            namespace: spec.namespace.clone(),
            priority: priority.value,
            preempts: priority.preempts,
            requests,
            memory,
        };
        if self.scheduler.submit(task.seat(), candidate) {
            task.admit();
        }
        task.spawn();
        Ok(handle)
    }
}

/// Raises the soft limit on open files to the hard one: each container holds descriptors (its
/// log, its mounts, its sockets), and the usual soft limit of 1,024 is reached by a few hundred.
fn raise_fd_limit() {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit read and write the struct passed, nothing else.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0
                && limit.rlim_cur < limit.rlim_max
            {
                limit.rlim_cur = limit.rlim_max;
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    tracing::warn!("cannot raise the open-file limit");
                }
            }
        }
    }
}

struct PodShared {
    /// `delete` was called.
    deleting: std::sync::atomic::AtomicBool,
    name: String,
    uid: String,
    pod_dir: PathBuf,
    log_dir: PathBuf,
    tx: mpsc::UnboundedSender<Msg>,
    journal: Arc<Journal>,
    snapshot: watch::Receiver<Snapshot>,
    logs: Arc<LogBook>,
}

/// A pod running on a [`Node`]. Cheap to clone.
#[derive(Clone)]
pub struct PodHandle {
    inner: Arc<PodShared>,
}

impl PodHandle {
    /// The pod's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The pod's UID.
    pub fn uid(&self) -> &str {
        &self.inner.uid
    }

    /// The pod's events from the first, followed live until the pod is deleted.
    pub fn events(&self) -> EventStream {
        self.inner.journal.stream()
    }

    /// The pod's current status.
    pub fn status(&self) -> PodStatus {
        self.inner.snapshot.borrow().status.clone()
    }

    /// Waits until the pod has reached a terminal phase with every container stopped, and
    /// returns its status then.
    pub async fn wait(&self) -> PodStatus {
        let mut rx = self.inner.snapshot.clone();
        match rx.wait_for(|s| s.finished).await {
            Ok(s) => s.status.clone(),
            Err(_) => self.status(),
        }
    }

    /// Waits until `check` holds for the pod's status, and returns that status. Returns the last
    /// status if the pod is deleted first.
    pub async fn wait_until(&self, mut check: impl FnMut(&PodStatus) -> bool) -> PodStatus {
        let mut rx = self.inner.snapshot.clone();
        match rx.wait_for(|s| s.deleted || check(&s.status)).await {
            Ok(s) => s.status.clone(),
            Err(_) => self.status(),
        }
    }

    /// Runs `command` in a fresh instance of the running `container`, as an exec probe or hook
    /// does (`kubectl exec`): the export `command[0]` names when the module has it (`liveness`,
    /// `readiness`, `startup`, `post-start`, `pre-stop` name the `wasmpod:pod` exports), else
    /// the entry point with argv = `command`. The instance shares the container's volumes and
    /// environment, not its memory. `Err` says why it failed, with what it printed.
    pub async fn exec(&self, container: &str, command: &[&str]) -> Result<(), String> {
        let (reply, answer) = oneshot::channel();
        let command = command.iter().map(|s| s.to_string()).collect();
        let msg = Msg::Exec {
            container: container.to_owned(),
            command,
            reply,
        };
        self.inner
            .tx
            .send(msg)
            .map_err(|_| format!("pod {} is gone", self.name()))?;
        answer
            .await
            .map_err(|_| format!("pod {} is gone", self.name()))?
    }

    /// Deletes the pod: its containers are stopped gracefully within `grace` (the pod's
    /// `terminationGracePeriodSeconds` when `None`; zero forces an immediate kill), then its
    /// volumes are removed. Asking again can only shorten the grace period.
    ///
    /// A zero grace period is a forced deletion: containers are killed without TERM or preStop.
    pub fn delete(&self, grace: Option<Duration>) {
        self.inner
            .deleting
            .store(true, std::sync::atomic::Ordering::Release);
        let _ = self.inner.tx.send(Msg::Delete { grace });
    }

    /// Sends the pod's supervisor a message (from the node's admission).
    fn send(&self, msg: Msg) {
        let _ = self.inner.tx.send(msg);
    }

    fn is_deleting(&self) -> bool {
        self.inner
            .deleting
            .load(std::sync::atomic::Ordering::Acquire)
    }

    fn is_deleted(&self) -> bool {
        self.inner.snapshot.borrow().deleted
    }

    fn is_finished(&self) -> bool {
        self.inner.snapshot.borrow().finished
    }

    /// Waits until the pod is deleted.
    pub async fn deleted(&self) {
        let mut rx = self.inner.snapshot.clone();
        let _ = rx.wait_for(|s| s.deleted).await;
    }

    /// A container's log, as `kubectl logs` gives it: the lines of its current (or last)
    /// instance, or of the one before with [`LogOptions::previous`], read from the log file;
    /// with [`LogOptions::follow`], new lines as they are written, until the instance ends.
    ///
    /// ```no_run
    /// # async fn example(pod: wasmpod::PodHandle) -> Result<(), wasmpod::Error> {
    /// use wasmpod::LogOptions;
    ///
    /// let mut logs = pod.logs("app", LogOptions::default().follow())?;
    /// while let Some(line) = logs.next().await {
    ///     println!("{}", line.line);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn logs(&self, container: &str, options: LogOptions) -> Result<Logs, Error> {
        let status = self.status();
        let pod = self.name();
        let c = status
            .init_container_statuses
            .iter()
            .chain(&status.container_statuses)
            .flatten()
            .find(|c| c.name == container)
            .ok_or_else(|| {
                Error::NoLogs(format!("container {container} is not valid for pod {pod}"))
            })?;
        let ran = |s: &Option<k8s_openapi::api::core::v1::ContainerState>| {
            s.as_ref()
                .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
        };
        let has_run = ran(&c.state) || ran(&c.last_state);
        let instance = if options.previous {
            c.restart_count - 1
        } else {
            c.restart_count
        };
        if !has_run || instance < 0 {
            let message = if options.previous {
                format!("previous terminated container \"{container}\" in pod \"{pod}\" not found")
            } else {
                let why = c
                    .state
                    .as_ref()
                    .and_then(|s| s.waiting.as_ref())
                    .and_then(|w| w.reason.clone())
                    .unwrap_or_default();
                format!("container \"{container}\" in pod \"{pod}\" is waiting to start: {why}")
            };
            return Err(Error::NoLogs(message));
        }
        // An instance that has ended has a complete log to come (the writer may not have
        // flushed its last lines yet): read it to its end, as when following.
        let running = c.state.as_ref().is_some_and(|s| s.running.is_some());
        let to_end = options.follow || options.previous || !running;
        Ok(Logs::open(
            self.inner.logs.clone(),
            container,
            instance,
            to_end,
        ))
    }

    /// The CRI-format log file of a container's instance (`restart` = its restart count then).
    pub fn log_file(&self, container: &str, restart: i32) -> PathBuf {
        crate::output::log_file(&self.inner.log_dir, container, restart)
    }

    /// The pod's own directory under the node's state dir, where its volumes are (it exists
    /// only if the pod has volumes); its logs are under `logs/` beside it.
    pub fn dir(&self) -> &Path {
        &self.inner.pod_dir
    }
}
