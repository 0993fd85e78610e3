//! The node: one wasmtime engine and the pods running on it.

mod error;
mod fit;
mod handle;
mod images;
mod options;
mod priorities;
mod registry;
mod runtime_classes;
mod scheduler;

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::scheduling::v1::PriorityClass;

use crate::engine::{Engine, Image, Pull};
use crate::memory::{NodeMemory, PodMemory};
use crate::network::NodeNetwork;
use crate::network::publish::{PortMapping, publish};
use crate::paths::{ClaimError, PodPaths};
use crate::spec::PodSpec;
use crate::supervisor::{NodeContext, PodSetup, PodTask};
pub use error::{ContainerError, Error, ExecError};
pub use handle::PodHandle;
use handle::PodShared;
pub use options::{Allocatable, NodeOptions, PodOptions};
use priorities::{Priorities, Priority};

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
    priorities: Arc<std::sync::RwLock<Arc<Priorities>>>,
    runtime_classes: Arc<std::sync::RwLock<Arc<runtime_classes::RuntimeClasses>>>,
    labels: Arc<std::sync::RwLock<Arc<std::collections::BTreeMap<String, String>>>>,
    taints: Arc<[k8s_openapi::api::core::v1::Taint]>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("node_name", &self.context.node_name)
            .field("state_dir", &self.state_dir)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// Builds a node: sets up the engine and its compile cache.
    pub fn new(options: NodeOptions) -> Result<Node, Error> {
        raise_fd_limit();
        let labels = Arc::new(options.all_labels());
        let taints: Arc<[_]> = options.taints.clone().into();
        crate::volumes::remove_orphans();
        let machine_code = crate::engine::MachineCode {
            dirs: options.precompiled_dirs.clone(),
            // Where guests write: volumes under the state dir, RAM-backed emptyDirs.
            never: vec![options.state_dir.clone(), crate::volumes::shm_root()],
        };
        let engine_of = |sockets| {
            Engine::new(
                options.cache_dir.clone(),
                sockets,
                machine_code.clone(),
                options.tiered_compilation,
            )
            .map_err(|e| Error::Engine(format!("{e:#}")))
        };
        let engine = engine_of(crate::host::GuestSockets::Pod)?;
        // Host-network pods' components have the host's sockets: an engine of their own, made
        // only on a node that allows them.
        let host_engine = match options.allow_host_network {
            true => Some(engine_of(crate::host::GuestSockets::Host)?),
            false => None,
        };
        std::fs::create_dir_all(&options.state_dir)
            .and_then(|()| crate::paths::make_private_trees(&options.state_dir))
            .map_err(|source| Error::Io {
                path: options.state_dir.clone(),
                source,
            })?;
        let priorities = Priorities::new(&options.priority_classes)?;
        let allocatable = options.allocatable;
        let threshold = options.eviction_threshold.unwrap_or_else(|| {
            let margin = (100 << 20u64).min(allocatable.memory / 10);
            allocatable.memory - margin
        });
        let memory = Arc::new(NodeMemory::in_cgroup(threshold));
        let scheduler = scheduler::Scheduler::new(
            allocatable,
            options.node_name.clone(),
            labels.clone(),
            memory.clone(),
        );
        // Terminated pods are collected whenever a pod stops for good (the only time their
        // number grows).
        let pods: Arc<registry::Registry> = Arc::default();
        let (registry, keep) = (Arc::downgrade(&pods), options.terminated_pods_kept);
        scheduler.after_release(move |pod| {
            if let Some(pods) = registry.upgrade() {
                pods.stopped(pod, keep);
            }
        });
        let images_root = options.image_dir.clone().unwrap_or_else(|| {
            options
                .cache_dir
                .as_ref()
                .unwrap_or(&options.state_dir)
                .join("images")
        });
        let images = crate::images::Images::new(
            &images_root,
            &options.insecure_registries,
            &options.precompiled_registries,
            options.registry_config.as_deref(),
            options.image_gc,
            crate::images::SignaturePolicy::new(&options.signed_images),
        );
        let context = NodeContext {
            images: Arc::new(images),
            engine,
            host_engine,
            backoff: options.backoff,
            network: NodeNetwork::new(options.egress, options.api_server),
            node_name: options.node_name,
            host_ip: options.host_ip,
            memory_limit: usize::try_from(options.memory_limit).unwrap_or(usize::MAX),
            log_limits: options.log_limits,
        };
        Ok(Node {
            labels: Arc::new(std::sync::RwLock::new(labels)),
            taints,
            context: Arc::new(context),
            state_dir: options.state_dir,
            pods,
            scheduler,
            memory,
            priorities: Arc::new(std::sync::RwLock::new(Arc::new(priorities))),
            runtime_classes: Arc::default(),
        })
    }

    /// Replaces the node's PriorityClasses (a node agent's API changed them). Pods created from
    /// now on resolve their `priorityClassName` against these; running pods keep their priority.
    /// The classes are checked as [`Node::new`] checks [`NodeOptions::priority_classes`].
    pub fn set_priority_classes(&self, classes: &[PriorityClass]) -> Result<(), Error> {
        let priorities = Arc::new(Priorities::new(classes)?);
        *self.priorities.write().unwrap_or_else(|e| e.into_inner()) = priorities;
        Ok(())
    }

    /// Replaces the node's RuntimeClasses (a node agent's API changed them). A pod's
    /// `runtimeClassName` must be one of the names built in (`wasmpod`, `wasmtime`, `wasm`,
    /// `spin`, `wasmtime-spin-v2`, `wasmedge`, `crun`) or a class here whose handler is one of
    /// them; running pods are not affected.
    pub fn set_runtime_classes(&self, classes: &[k8s_openapi::api::node::v1::RuntimeClass]) {
        let classes = Arc::new(runtime_classes::RuntimeClasses::new(classes));
        *self
            .runtime_classes
            .write()
            .unwrap_or_else(|e| e.into_inner()) = classes;
    }

    /// Checks a pod's `runtimeClassName` as [`Node::create_pod`] does: `Err` is
    /// [`Error::UnknownRuntimeClass`] or [`Error::UnknownRuntimeHandler`].
    pub fn check_runtime_class(&self, class: Option<&str>) -> Result<(), Error> {
        self.runtime_classes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .check(class)
    }

    /// Waits until the modules that started on baseline code are optimized and their code is
    /// in the compile cache ([`NodeOptions::tiered_compilation`]): what a process about to exit
    /// does for its next run.
    pub async fn optimized(&self) {
        let context = self.context.clone();
        let _ = tokio::task::spawn_blocking(move || {
            context.engine.wait_for_optimizing();
            if let Some(engine) = &context.host_engine {
                engine.wait_for_optimizing();
            }
        })
        .await;
    }

    /// How the node's instances use the process's address space (chosen from the space there
    /// is: compact on a small address space or under an `RLIMIT_AS`).
    pub fn address_space(&self) -> crate::AddressSpace {
        crate::AddressSpace::of_process()
    }

    /// What the node has for pods' requests.
    pub fn allocatable(&self) -> Allocatable {
        self.scheduler.allocatable()
    }

    /// The node's labels: the kubelet's own and [`NodeOptions::labels`], or what
    /// [`Node::set_labels`] made them.
    pub fn labels(&self) -> Arc<std::collections::BTreeMap<String, String>> {
        self.labels
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Replaces the node's labels (`kubectl label node`): pending pods and pods admitted from
    /// now on are matched against them (their `nodeSelector`, required node affinity and
    /// topology keys), and a pending pod they now select is admitted if it fits; pods already
    /// running stay, as the kubelet leaves them.
    pub fn set_labels(&self, labels: std::collections::BTreeMap<String, String>) {
        let publish = || {
            let labels = Arc::new(labels);
            *self
                .labels
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = labels.clone();
            labels
        };
        self.scheduler
            .relabel(publish, |spec| self.unselected(spec));
    }

    /// The node's taints.
    pub fn taints(&self) -> &[k8s_openapi::api::core::v1::Taint] {
        &self.taints
    }

    /// Bytes of linear memory the node's guests hold now.
    pub fn memory_in_use(&self) -> u64 {
        self.memory.used()
    }

    /// The log of instance `restart` of a container of a pod this node no longer runs, read back
    /// from its file under the state dir: a node agent's pod that had ended before the agent
    /// restarted. The files stay until the pod's directory is removed (a pod of the same UID
    /// runs again, or the pod is collected); a missing file reads as empty.
    pub fn past_logs(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        container: &str,
        restart: i32,
    ) -> Result<crate::Logs, Error> {
        let dir = crate::paths::log_dir(&self.state_dir, namespace, name, uid)
            .and_then(|dir| crate::paths::component(container).map(|_| dir))
            .map_err(|e| Error::NoLogs(e.to_string()))?;
        let book = std::sync::Arc::new(crate::output::LogBook::finished(dir.into()));
        Ok(crate::Logs::open(book, container, restart, true))
    }

    /// Removes what a pod this node no longer runs left under the state dir: its logs, and its
    /// volumes and UID lock unless a live process holds the lock (a node agent removes a deleted
    /// pod's files, as the kubelet does).
    pub fn remove_pod_files(&self, namespace: &str, name: &str, uid: &str) -> Result<(), Error> {
        crate::paths::remove_left(&self.state_dir, namespace, name, uid).map_err(|e| match e {
            ClaimError::Io { path, source } => Error::Io { path, source },
            other => Error::Io {
                path: self.state_dir.clone(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, other.to_string()),
            },
        })
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
    ///
    /// Called from outside the runtime's workers (the thread `Runtime::block_on` runs on), it
    /// returns once the pod has taken its first steps on that thread: until its tasks wait or a
    /// guest's first time slice (about a millisecond) ends. A pod that ends at once has ended by
    /// then.
    pub async fn create_pod(&self, spec: PodSpec, options: PodOptions) -> Result<PodHandle, Error> {
        let priorities = self
            .priorities
            .read()
            .map_or_else(|e| e.into_inner().clone(), |p| p.clone());
        let priority = priorities.of(&spec)?;
        self.check_runtime_class(spec.scheduling().runtime_class.as_deref())?;
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
        let images = match self.preload(&spec).await {
            Ok(images) => images,
            Err(e) => {
                self.pods.release(&namespace, &name);
                return Err(e);
            }
        };
        // The pod's first steps are taken here, once it is in the registry, when the caller is
        // not one of the runtime's workers.
        crate::eager::scope(|| {
            let created = self.start_pod(spec, images, options, priority);
            match &created {
                Ok(pod) => self.pods.insert(&namespace, &name, pod.clone()),
                Err(_) => self.pods.release(&namespace, &name),
            }
            created
        })
    }

    fn start_pod(
        &self,
        spec: PodSpec,
        images: Vec<Option<(Arc<Image>, Pull)>>,
        options: PodOptions,
        priority: Priority,
    ) -> Result<PodHandle, Error> {
        for (c, image) in spec.containers.iter().zip(&images) {
            if let Some((image, _)) = image
                && !c.ports.is_empty()
                && matches!(**image, Image::Module { .. })
            {
                return Err(Error::NoSockets {
                    field: format!("{}.ports", c.field),
                });
            }
        }
        let fresh = spec.uid.is_none();
        let uid: Arc<str> = spec
            .uid
            .as_deref()
            .map_or_else(|| uuid::Uuid::new_v4().to_string().into(), Arc::from);
        // Volumes under `pods/<uid>`, logs under `logs/` as the kubelet lays out
        // `/var/log/pods` (`<namespace>_<pod>_<uid>/<container>/<restart>.log`); a pod without
        // volumes makes no directory under `pods/`.
        let paths = PodPaths::claim(&self.state_dir, &spec.namespace, &spec.name, &uid, fresh)
            .map_err(|e| match e {
                ClaimError::InUse(uid) => Error::UidInUse(uid),
                ClaimError::BadComponent(part) => Error::Io {
                    path: self.state_dir.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("{part:?} cannot be part of a path"),
                    ),
                },
                ClaimError::Io { path, source } => Error::Io { path, source },
            })?;
        let pod_dir = paths.pod_dir_path().clone();
        let net = self
            .context
            .network
            .create_pod(crate::network::PodNames {
                hostname: spec.hostname.clone(),
                dns: spec.dns.clone(),
            })
            .ok_or(Error::PodNetworkFull(crate::network::POD_IPS))?;
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
        let net_handle = net.clone();
        let spec = Arc::new(spec);
        let seat = self.scheduler.seat();
        let key = seat.key();
        let memory = PodMemory::new(self.memory.clone());
        let setup = PodSetup {
            uid: uid.clone(),
            paths,
            images,
            tap: options.output,
            resume: options.resume,
            net,
            published,
            memory: memory.clone(),
        };
        let requests = spec.requests();
        let (mut task, channels) =
            PodTask::prepare(spec.clone(), self.context.clone(), setup, Box::new(seat)).map_err(
                |source| Error::Io {
                    path: pod_dir.to_path_buf(),
                    source,
                },
            )?;
        let handle = PodHandle {
            inner: Arc::new(PodShared {
                deleting: Default::default(),
                seq: Default::default(),
                name: spec.name.clone(),
                uid,
                pod_dir,
                tx: channels.tx,
                journal: channels.journal,
                board: channels.board,
                logs: channels.logs,
                meters: channels.meters,
                net: net_handle,
            }),
        };
        let candidate = scheduler::Candidate {
            handle: handle.clone(),
            spec: spec.clone(),
            priority: priority.value,
            preempts: priority.preempts,
            requests,
            memory,
        };
        let no_execute = self.no_execute_limit(&spec);
        if self
            .scheduler
            .submit(key, candidate, |spec| self.unselected(spec))
        {
            task.admit();
        }
        task.spawn();
        if let Some(limit) = no_execute {
            let pod = handle.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = tokio::time::sleep(limit) => pod.taint_evicted(),
                    () = pod.deleted() => {}
                }
            });
        }
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
