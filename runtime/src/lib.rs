//! # wasmpod
//!
//! Runs Kubernetes Pods whose containers are WASI programs, in one process, on wasmtime.
//!
//! A [`PodSpec`] is made from Pod YAML (parsed into the Kubernetes types and validated into
//! what wasmpod honours); a [`Node`] runs it with the kubelet's semantics: init containers in
//! order, sidecars, restart policies with crash-loop backoff, phases and conditions, graceful
//! termination. Each pod reports what happens as an [`EventStream`] and a Kubernetes `PodStatus`;
//! its containers' logs are kept and read back with [`PodHandle::logs`].
//!
//! The node admits pods as the scheduler and kubelet would for a cluster of one: a pod whose
//! requests do not fit in its [`Allocatable`] resources waits, Pending; pending pods go by
//! priority (`PriorityClass`es, see [`read_priority_classes`]), may preempt lower-priority pods,
//! and pods above their memory requests are evicted when the guests' memory crosses
//! [`NodeOptions::eviction_threshold`].
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use wasmpod::{Node, NodeOptions, PodOptions, PodSpec};
//!
//! let node = Node::new(NodeOptions::default())?;
//! let pod = node.create_pod(PodSpec::from_file("pod.yaml".as_ref())?, PodOptions::default()).await?;
//! let mut events = pod.events();
//! tokio::spawn(async move {
//!     while let Some(event) = events.next().await {
//!         println!("{}", serde_json::to_string(&event).unwrap());
//!     }
//! });
//! let status = pod.wait().await;
//! assert_eq!(status.phase.as_deref(), Some("Succeeded"));
//! pod.delete(None);
//! pod.deleted().await;
//! # Ok(()) }
//! ```
//!
//! A node's pods run as tasks of the tokio runtime it is used from. A pod created from outside
//! the runtime's workers (from the thread `Runtime::block_on` runs on) takes its first steps on
//! the caller's thread, until it waits or its guest's first time slice ends, and wakes no worker
//! before then: on two workers a one-line pod ends about 70 µs after it is created there (67–71
//! µs over ten runs), and about 57 µs after it is created from a task on the runtime (2-core VM,
//! 2026-11-29, `--bench startup`).

mod cgroup;
mod container;
mod eager;
mod engine;
mod events;
mod host;
mod images;
mod memory;
mod network;
mod node;
mod output;
mod paths;
mod signal;
mod spec;
mod supervisor;
pub mod task;
mod volumes;

pub use container::{ContainerStdin, ContainerUsage, ExecOutput};
#[cfg(feature = "compiler")]
pub use engine::compile;
pub use engine::{AddressSpace, CompileTarget, LoadError};
pub use events::{Event, EventStream, EventType, Phase as PodPhase, Reason};
pub use images::{Artifact, ArtifactLayer, ImageGc, InvalidKey, PullProgress, VerifyKey};
pub use network::{Egress, KUBERNETES_SERVICE, PodConnection};
pub use node::{
    Allocatable, ContainerError, Error, ExecError, Node, NodeOptions, PodHandle, PodOptions,
};
pub use output::{LogLimits, LogOptions, Logs, OutputLine, Stream};
pub use spec::Role as ContainerRole;
pub use spec::{
    FieldError, FieldErrorKind, InvalidPod, PodFiles, PodSpec, TOKEN_AUDIENCE, TOKEN_EXPIRATION,
    check_metadata_map, read_documents, read_priority_classes,
};
pub use supervisor::BackoffOptions;

/// The Kubernetes API types wasmpod speaks (`Pod`, `PodStatus`, ...), re-exported.
pub use k8s_openapi;
