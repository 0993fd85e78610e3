//! Ctrl-C and SIGTERM, for `run` (which deletes its pod) and `serve` (which stops the node).

/// Ctrl-C or SIGTERM deletes the pod gracefully; a second one forces it (grace 0).
/// Ctrl-C and SIGTERM, listened for from before the pod is created: a signal that came before
/// the listener would meet the default action and end wasmpod without deleting the pod.
pub(crate) struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    #[cfg(unix)]
    pub(crate) fn listen() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    #[cfg(not(unix))]
    pub(crate) fn listen() -> std::io::Result<Signals> {
        Ok(Signals {})
    }

    /// The next signal; `None` if signals can no longer be received.
    #[cfg(unix)]
    pub(crate) async fn next(&mut self) -> Option<()> {
        tokio::select! {
            r = self.term.recv() => r,
            r = self.interrupt.recv() => r,
        }
    }

    #[cfg(not(unix))]
    pub(crate) async fn next(&mut self) -> Option<()> {
        tokio::signal::ctrl_c().await.ok()
    }
}
