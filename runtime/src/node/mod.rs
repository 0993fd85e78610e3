//! The node: one wasmtime engine and the pods running on it.

mod registry;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::PodStatus;
use tokio::sync::{mpsc, oneshot, watch};

use crate::engine::{Engine, Image, LoadError, Pull};
use crate::events::{EventStream, Journal};
use crate::network::publish::{PortMapping, publish};
use crate::network::{Egress, NodeNetwork};
use crate::output::OutputLine;
use crate::spec::PodSpec;
use crate::supervisor::{BackoffOptions, Msg, NodeContext, PodSetup, PodTask, Snapshot};

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

    /// Sets [`NodeOptions::backoff`].
    pub fn backoff(mut self, backoff: BackoffOptions) -> Self {
        self.backoff = backoff;
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
    terminated_pods_kept: usize,
}

impl Node {
    /// Builds a node: sets up the engine and its compile cache.
    pub fn new(options: NodeOptions) -> Result<Node, Error> {
        let engine =
            Engine::new(options.cache_dir.clone()).map_err(|e| Error::Engine(format!("{e:#}")))?;
        std::fs::create_dir_all(&options.state_dir).map_err(|source| Error::Io {
            path: options.state_dir.clone(),
            source,
        })?;
        let context = NodeContext {
            engine,
            backoff: options.backoff,
            network: NodeNetwork::new(options.egress),
            node_name: options.node_name,
            memory_limit: usize::try_from(options.memory_limit).unwrap_or(usize::MAX),
        };
        Ok(Node {
            context: Arc::new(context),
            state_dir: options.state_dir,
            pods: Arc::default(),
            terminated_pods_kept: options.terminated_pods_kept,
        })
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
    /// Terminated pods beyond [`NodeOptions::terminated_pods_kept`] are deleted, oldest first.
    pub async fn create_pod(&self, spec: PodSpec, options: PodOptions) -> Result<PodHandle, Error> {
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
        let created = self.start_pod(spec, options).await;
        match &created {
            Ok(pod) => self.pods.insert(&namespace, &name, pod.clone()),
            Err(_) => self.pods.release(&namespace, &name),
        }
        for gone in self.pods.collect_garbage(self.terminated_pods_kept) {
            tokio::spawn(async move {
                gone.deleted().await;
                if let Err(e) = std::fs::remove_dir_all(gone.dir()) {
                    tracing::warn!(dir = %gone.dir().display(), "cannot remove a collected pod: {e}");
                }
            });
        }
        created
    }

    async fn start_pod(&self, spec: PodSpec, options: PodOptions) -> Result<PodHandle, Error> {
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
        let pod_dir = self
            .state_dir
            .join("pods")
            .join(format!("{}_{}_{}", spec.namespace, spec.name, uid));
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
        let setup = PodSetup {
            uid: uid.clone(),
            pod_dir: pod_dir.clone(),
            images,
            tap: options.output,
            net,
            published,
        };
        let channels =
            PodTask::spawn(spec.clone(), self.context.clone(), setup).map_err(|source| {
                Error::Io {
                    path: pod_dir.clone(),
                    source,
                }
            })?;
        Ok(PodHandle {
            inner: Arc::new(PodShared {
                deleting: Default::default(),
                name: spec.name.clone(),
                uid,
                pod_dir,
                tx: channels.tx,
                journal: channels.journal,
                snapshot: channels.snapshot,
            }),
        })
    }
}

struct PodShared {
    /// `delete` was called.
    deleting: std::sync::atomic::AtomicBool,
    name: String,
    uid: String,
    pod_dir: PathBuf,
    tx: mpsc::UnboundedSender<Msg>,
    journal: Arc<Journal>,
    snapshot: watch::Receiver<Snapshot>,
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

    /// The CRI-format log file of a container's instance (`restart` = its restart count then).
    pub fn log_file(&self, container: &str, restart: i32) -> PathBuf {
        crate::output::log_file(&self.inner.pod_dir.join("logs"), container, restart)
    }

    /// The pod's own directory under the node's state dir.
    pub fn dir(&self) -> &Path {
        &self.inner.pod_dir
    }
}
