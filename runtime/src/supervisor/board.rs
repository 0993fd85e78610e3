//! What the supervisor publishes about its pod, shared with the pod's handle: the latest
//! status, for readers and for watchers of each change, and a separate signal for the pod's end,
//! so that a caller waiting for the end is not woken at every step before it (each wake-up of a
//! parked thread is a system call on both sides, and on a VM the wake of an idle vCPU).

use k8s_openapi::api::core::v1 as k8s;
use tokio::sync::{Notify, watch};

/// What the supervisor publishes about its pod.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    pub status: k8s::PodStatus,
    /// Every container has stopped for good and the phase is terminal.
    pub finished: bool,
    /// The pod is gone (its last event, `Deleted`, was recorded).
    pub deleted: bool,
}

/// The pod's published snapshot and the signal of its end.
#[derive(Debug)]
pub(crate) struct Board {
    snapshot: watch::Sender<Snapshot>,
    /// Notified when a snapshot that is finished or deleted is published.
    ended: Notify,
}

impl Default for Board {
    fn default() -> Self {
        Board {
            snapshot: watch::Sender::new(Snapshot::default()),
            ended: Notify::new(),
        }
    }
}

impl Board {
    /// Publishes `snapshot`: its watchers are woken, and those waiting for the end if it is one.
    pub(crate) fn publish(&self, snapshot: Snapshot) {
        let ended = snapshot.finished || snapshot.deleted;
        self.snapshot.send_replace(snapshot);
        if ended {
            self.ended.notify_waiters();
        }
    }

    /// Marks the pod finished and deleted, if it is not already (its supervisor is gone).
    pub(crate) fn close(&self) {
        let changed = self.snapshot.send_if_modified(|s| {
            let changed = !(s.finished && s.deleted);
            s.finished = true;
            s.deleted = true;
            changed
        });
        if changed {
            self.ended.notify_waiters();
        }
    }

    /// The latest snapshot.
    pub(crate) fn borrow(&self) -> watch::Ref<'_, Snapshot> {
        self.snapshot.borrow()
    }

    /// A watcher of every change from now on.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Snapshot> {
        self.snapshot.subscribe()
    }

    /// Waits until `done` holds of a snapshot published as the pod's end (finished or deleted),
    /// or of the latest one, and returns what `then` makes of it. Only the end wakes the
    /// waiter.
    pub(crate) async fn wait_end<T>(
        &self,
        done: impl Fn(&Snapshot) -> bool,
        then: impl FnOnce(&Snapshot) -> T,
    ) -> T {
        let ended = self.ended.notified();
        tokio::pin!(ended);
        loop {
            // Registered before the check, so an end published between the two is not missed.
            ended.as_mut().enable();
            {
                let s = self.snapshot.borrow();
                if done(&s) {
                    return then(&s);
                }
            }
            ended.as_mut().await;
            ended.set(self.ended.notified());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The end wakes a waiter; a step before it neither ends the wait nor wakes it.
    #[tokio::test]
    async fn a_waiter_sees_the_end_and_not_before() {
        use std::sync::atomic::{AtomicUsize, Ordering};

        let board = std::sync::Arc::new(Board::default());
        let checks = std::sync::Arc::new(AtomicUsize::new(0));
        let waiter = tokio::spawn({
            let (board, checks) = (board.clone(), checks.clone());
            async move {
                let done = |s: &Snapshot| {
                    checks.fetch_add(1, Ordering::Relaxed);
                    s.finished
                };
                board.wait_end(done, |s| s.status.phase.clone()).await
            }
        });
        tokio::task::yield_now().await;
        assert_eq!(checks.load(Ordering::Relaxed), 1);
        board.publish(Snapshot {
            status: k8s::PodStatus {
                phase: Some("Running".into()),
                ..Default::default()
            },
            ..Default::default()
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        // Not woken: the status was checked once, before the step.
        assert_eq!(checks.load(Ordering::Relaxed), 1);
        board.publish(Snapshot {
            status: k8s::PodStatus {
                phase: Some("Succeeded".into()),
                ..Default::default()
            },
            finished: true,
            deleted: false,
        });
        assert_eq!(waiter.await.unwrap().as_deref(), Some("Succeeded"));
        assert_eq!(checks.load(Ordering::Relaxed), 2);
        // A waiter that comes after the end returns at once; closing again changes nothing.
        board.close();
        assert!(board.wait_end(|s| s.deleted, |s| s.finished).await);
    }
}
