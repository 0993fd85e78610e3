//! # wasmpod-agent
//!
//! The node agent: a long-running [`Agent`] that holds a wasmpod [`Node`]'s pods
//! across time and restarts, and serves the part of the Kubernetes API that `kubectl` needs to
//! drive them (`wasmpod serve`).
//!
//! - The API: HTTPS with a bearer token, JSON, the API server's `Status` errors;
//!   pods (with logs), ConfigMaps, Secrets, Namespaces, PriorityClasses, Events and the Node,
//!   with kubectl's tables, watches and selectors.
//! - The store: every object in an embedded, crash-safe database (redb) under the state dir; what
//!   the API acknowledged survives `kill -9`.
//! - The kubelet: runs the stored pods on the node, writes back their status and events, and
//!   after a restart brings them back with their uids, restart counts and logs.
//! - Static pods: the manifests of a directory ([`AgentOptions::manifests`]) run as pods.
//! - A fleet source ([`AgentOptions::source`]): the objects of an OCI artifact in Flux's format,
//!   polled from a registry, checked whole (and signed, when given a key), kept across restarts.
//!
//! ```no_run
//! # async fn example() -> Result<(), wasmpod_agent::Error> {
//! use wasmpod_agent::{Agent, AgentOptions};
//!
//! let agent = Agent::start(AgentOptions::default()).await?;
//! println!("KUBECONFIG={}", agent.kubeconfig().display());
//! agent.stopped().await;
//! # Ok(()) }
//! ```

mod api;
mod body;
mod bounds;
mod clock;
mod credentials;
mod kubelet;
mod manifests;
mod metrics;
mod object;
mod ready;
mod server;
mod source;
mod status;
mod store;
mod tokens;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use tokio::sync::watch;
use wasmpod::{Node, NodeOptions};

pub use source::SourceOptions;

/// How an agent is set up.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AgentOptions {
    /// The node's options; its state dir holds the agent's too (`agent/`: the store, the
    /// credentials and the kubeconfig).
    pub node: NodeOptions,
    /// Where the API listens (default `127.0.0.1:6443`; port 0 picks a free one).
    pub listen: SocketAddr,
    /// Where relative image paths of pods are resolved (default: the current directory).
    pub images_dir: PathBuf,
    /// The static pods' manifests directory (the kubelet's `staticPodPath`), if any.
    pub manifests: Option<PathBuf>,
    /// How often the manifests directory is read (default 1 s).
    pub manifests_every: std::time::Duration,
    /// Whether pods sent through the API may have `hostPath` volumes (default no, as the Pod
    /// Security Standards' baseline: such a pod reads and writes the host's files). Static pods,
    /// which only the host's own user can place, always may.
    pub allow_host_path: bool,
    /// How often the containers' and the node's CPU and memory are read for `kubectl top`
    /// (metrics-server's resolution, default 15 s; at least 100 ms): the CPU shown is the rate
    /// between the last two readings.
    pub metrics_resolution: std::time::Duration,
    /// Where the node's desired state comes from beside the API, if anywhere.
    pub source: Option<SourceOptions>,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            node: NodeOptions::default(),
            listen: SocketAddr::from(([127, 0, 0, 1], 6443)),
            images_dir: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            manifests: None,
            manifests_every: std::time::Duration::from_secs(1),
            allow_host_path: false,
            metrics_resolution: metrics::RESOLUTION,
            source: None,
        }
    }
}

impl AgentOptions {
    /// Sets [`AgentOptions::node`].
    pub fn node(mut self, node: NodeOptions) -> Self {
        self.node = node;
        self
    }

    /// Sets [`AgentOptions::listen`].
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Sets [`AgentOptions::manifests`]: the directory of static pod manifests.
    pub fn manifests(mut self, dir: impl Into<PathBuf>) -> Self {
        self.manifests = Some(dir.into());
        self
    }

    /// Sets [`AgentOptions::allow_host_path`].
    pub fn allow_host_path(mut self, allow: bool) -> Self {
        self.allow_host_path = allow;
        self
    }

    /// Sets [`AgentOptions::metrics_resolution`].
    pub fn metrics_resolution(mut self, every: std::time::Duration) -> Self {
        self.metrics_resolution = every;
        self
    }

    /// Sets [`AgentOptions::source`].
    pub fn source(mut self, source: SourceOptions) -> Self {
        self.source = Some(source);
        self
    }

    /// Sets [`AgentOptions::images_dir`].
    pub fn images_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.images_dir = dir.into();
        self
    }
}

/// Why an agent could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or directory of the agent's state.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The TLS credentials could not be made or read.
    #[error("{}: {message}", path.display())]
    Credentials {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The store could not be opened.
    #[error("the store {}: {message}", path.display())]
    Store {
        /// The database file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The node could not be made.
    #[error(transparent)]
    Node(#[from] wasmpod::Error),
    /// The API's address cannot be listened on.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A running node agent. Dropping it does not stop it; [`Agent::stop`] does.
#[derive(Debug)]
pub struct Agent {
    addr: SocketAddr,
    kubeconfig: PathBuf,
    /// What a client of the API trusts and presents: the CA (PEM) and the token.
    ca_pem: String,
    token: String,
    kubelet: Arc<kubelet::Kubelet>,
    stop: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    /// The metrics sampler, which holds the store too.
    sampler: tokio::task::JoinHandle<()>,
    /// What the fleet source is doing, when there is one.
    source: Option<Arc<std::sync::Mutex<source::SourceStatus>>>,
}

/// Stores the `default` ServiceAccount of namespace `ns` unless it has one, as the service
/// account controller makes it.
pub(crate) fn ensure_default_account(
    store: &store::Store,
    ns: &str,
) -> Result<(), status::ApiError> {
    if store.get("serviceaccounts", ns, "default").is_some() {
        return Ok(());
    }
    let object = json!({
        "kind": "ServiceAccount", "apiVersion": "v1",
        "metadata": {"name": "default", "namespace": ns, "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": clock::now()},
    });
    store
        .create(
            "serviceaccounts",
            ns,
            "default",
            object::Object::from_value(object)?,
        )
        .map(|_| ())
}

/// The namespaces a cluster starts with.
const NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

impl Agent {
    /// Opens the store, brings back its pods, and starts serving the API.
    pub async fn start(options: AgentOptions) -> Result<Agent, Error> {
        let dir = options.node.state_dir.join("agent");
        let node_name = options.node.node_name.clone();
        let listener = tokio::net::TcpListener::bind(options.listen)
            .await
            .map_err(|source| Error::Listen {
                addr: options.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Listen {
            addr: options.listen,
            source,
        })?;
        let credentials = credentials::Credentials::load_or_make(&dir, addr, &node_name)?;
        let path = dir.join("store.redb");
        let store = store::Store::open(&path, &api::resources::stored()).map_err(|message| {
            Error::Store {
                path: path.clone(),
                message,
            }
        })?;
        let store = Arc::new(store);
        for ns in NAMESPACES {
            if store.get("namespaces", "", ns).is_none() {
                let object = json!({
                    "kind": "Namespace", "apiVersion": "v1",
                    "metadata": {"name": ns, "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": clock::now()},
                    "status": {"phase": "Active"},
                });
                object::Object::from_value(object)
                    .and_then(|object| store.create("namespaces", "", ns, object))
                    .map_err(|e| Error::Store {
                        path: path.clone(),
                        message: e.message,
                    })?;
            }
        }
        let (_, namespaces) = store.list("namespaces", None);
        for ns in namespaces.iter().map(|n| n.name()) {
            ensure_default_account(&store, ns).map_err(|e| Error::Store {
                path: path.clone(),
                message: e.message,
            })?;
        }
        let tokens = Arc::new(tokens::Tokens::load_or_make(&dir)?);
        let classes: Vec<_> = store
            .list("priorityclasses", None)
            .1
            .iter()
            .filter_map(|o| serde_json::from_value(o.to_value()).ok())
            .collect();
        let mut node_options = options.node.clone();
        node_options.priority_classes.extend(classes);
        // Pods come from the network: machine code runs only from directories the operator
        // named, never from wherever a pod's image path points.
        node_options.precompiled_dirs.get_or_insert_with(Vec::new);
        // Pods reach the API as the `kubernetes` Service.
        let api_host = match addr.ip() {
            ip if ip.is_unspecified() && ip.is_ipv4() => std::net::Ipv4Addr::LOCALHOST.into(),
            ip if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
            ip => ip,
        };
        node_options.api_server = Some(SocketAddr::new(api_host, addr.port()));
        // The Node's InternalIP: pods' `status.hostIP`, a host-network pod's IP.
        let node_ip = match addr.ip() {
            ip if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
            ip => ip,
        };
        node_options.host_ip = node_ip;
        let node = Node::new(node_options)?;
        let address = node_ip.to_string();
        let kubelet = Arc::new(
            kubelet::Kubelet::new(
                node,
                node_name,
                store.clone(),
                options.images_dir.clone(),
                address,
                credentials.ca_pem.clone(),
                tokens.clone(),
            )
            .keeping_node_meta_in(&dir),
        );
        kubelet.sync_runtime_classes();
        kubelet.publish_root_ca().map_err(|e| Error::Store {
            path: path.clone(),
            message: e.message,
        })?;
        kubelet.restore();
        let metrics = Arc::new(metrics::Metrics::default());
        let api = Arc::new(api::Api::new(
            store,
            kubelet.clone(),
            credentials.token.clone(),
            options.allow_host_path,
            metrics.clone(),
            tokens,
        ));
        let (stop, stopped) = watch::channel(false);
        let every = options
            .metrics_resolution
            .max(std::time::Duration::from_millis(100));
        let sampler = tokio::spawn(metrics::sample(
            metrics,
            kubelet.clone(),
            every,
            stopped.clone(),
        ));
        if let Some(dir) = options.manifests.clone() {
            let every = options
                .manifests_every
                .max(std::time::Duration::from_millis(100));
            tokio::spawn(manifests::watch(api.clone(), dir, every, stopped.clone()));
        }
        let source = options.source.clone().map(|options| {
            let status = Arc::default();
            tokio::spawn(source::run(
                api.clone(),
                options,
                dir.clone(),
                Arc::clone(&status),
                stopped.clone(),
            ));
            status
        });
        let server = tokio::spawn(server::serve(
            listener,
            credentials.tls.clone(),
            api,
            stopped,
        ));
        tracing::info!(%addr, kubeconfig = %credentials.kubeconfig.display(), "serving the API");
        Ok(Agent {
            addr,
            kubeconfig: credentials.kubeconfig,
            ca_pem: credentials.ca_pem,
            token: credentials.token,
            kubelet,
            stop,
            server,
            sampler,
            source,
        })
    }

    /// The address the API listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The kubeconfig that reaches this agent (`KUBECONFIG=... kubectl get pods`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Waits until every pod the store held when the agent started runs again (made on the
    /// node again, and a container of it started, or waiting for a reason other than being made,
    /// or the pod ended), at most `limit`. Returns how many do not run again yet.
    pub async fn restored(&self, limit: std::time::Duration) -> usize {
        let mut restoring = self.kubelet.restoring();
        let _ = tokio::time::timeout(limit, restoring.wait_for(|n| *n == 0)).await;
        *restoring.borrow()
    }

    /// Asks the API for the `default` Namespace as a client does (TLS to the listening
    /// address, the token, a read of the store): `Ok` when it answers within `limit`, else
    /// why not.
    pub async fn answers(&self, limit: std::time::Duration) -> Result<(), String> {
        ready::ask(self.addr, &self.ca_pem, &self.token, limit).await
    }

    /// What the fleet source is doing, for a person: the revision the node runs from it and
    /// any trouble (`None` without a source).
    pub fn source_status(&self) -> Option<String> {
        let status = self.source.as_ref()?;
        let status = status.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let running = status
            .running
            .unwrap_or_else(|| "no revision yet".to_owned());
        Some(match status.trouble {
            Some(trouble) => format!("source: {running}; {trouble}"),
            None => format!("source: {running}"),
        })
    }

    /// How many pods the node runs.
    pub fn pod_count(&self) -> usize {
        self.kubelet.pod_count()
    }

    /// Stops serving the API, ending its open connections (watches, followed logs, sessions).
    /// The pods' state stays in the store: the next start brings them back.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.server.await;
        // Once this returns the API and the sampler no longer hold the store: another agent may
        // open it when no pod is running (a running pod's supervision holds it until it ends).
        let _ = self.sampler.await;
    }

    /// Waits until the server has stopped.
    pub async fn stopped(&self) {
        let mut rx = self.stop.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }
}
