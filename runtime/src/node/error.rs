//! Why a node or a pod could not be made.

use std::path::PathBuf;

use crate::engine::LoadError;

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
    /// The pod names a RuntimeClass the node does not have.
    #[error("spec.runtimeClassName: RuntimeClass {0:?} not found")]
    UnknownRuntimeClass(String),
    /// The pod's RuntimeClass names a handler this node does not run.
    #[error(
        "spec.runtimeClassName: RuntimeClass {class:?} has handler {handler:?}: no runtime for \
         {handler:?} is configured (this node runs wasmpod, wasmtime, wasm, spin, \
         wasmtime-spin-v2, wasmedge and crun)"
    )]
    UnknownRuntimeHandler {
        /// The class.
        class: String,
        /// Its handler.
        handler: String,
    },
    /// The pod's `spec.priority` or `spec.preemptionPolicy` is not what its PriorityClass gives
    /// (the message is the API server's).
    #[error("{0}")]
    PriorityMismatch(String),
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
    /// The pod can never be admitted on this node (another `nodeName`, unmatched selectors, or
    /// requests beyond everything the node has); the message is the scheduler's.
    #[error("{0}")]
    NeverFits(String),
    /// Another pod (in this process, or in another one using the same state dir) has this
    /// `metadata.uid`.
    #[error("metadata.uid: {0:?} is in use by another pod sharing this state dir")]
    UidInUse(String),
    /// Every address of the node's pod network (10.88.0.0/13) is some pod's.
    #[error("the node's pod network has no free address: its {0} pod IPs are all in use")]
    PodNetworkFull(u32),
    /// An artifact could not be pulled ([`crate::Node::pull_artifact`]).
    #[error("{reference}: {message}")]
    Artifact {
        /// The artifact's reference.
        reference: String,
        /// Why, as a person reads it.
        message: String,
        /// The registry answered, and the artifact is not one to take: unsigned or wrongly
        /// signed, or larger than the limit (rather than the registry unreachable).
        refused: bool,
    },
    /// The pod asks for the host's network (`spec.hostNetwork`) on a node that does not allow it.
    #[error(
        "spec.hostNetwork: this node does not run pods on the host's network (allow it with \
         --allow-host-network, NodeOptions::allow_host_network)"
    )]
    HostNetwork,
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

pub use crate::supervisor::ContainerError;

/// Why a command run in a container ([`crate::PodHandle::exec`]) did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// It could not run.
    #[error(transparent)]
    Container(#[from] ContainerError),
    /// It ran and failed: its exit code or result, or its trap, with what it printed.
    #[error("{0}")]
    Failed(String),
}
