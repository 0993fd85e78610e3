//! What a request about one of a running pod's containers can meet.

/// Why a request about one of a running pod's containers (exec, attach, a new image) could not
/// be carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContainerError {
    /// The pod has no container of that name.
    #[error("no container named {0:?}")]
    NoSuchContainer(String),
    /// The container does not run now (waiting, or ended).
    #[error("container {0:?} is not running")]
    NotRunning(String),
    /// The container reads an empty stdin: it does not have `stdin: true`.
    #[error("container {0} does not have stdin: true (it reads an empty stdin)")]
    NoStdin(String),
    /// The pod's supervisor has ended (the pod was deleted).
    #[error("pod {0} is gone")]
    PodGone(String),
}
