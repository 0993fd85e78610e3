//! What the supervisor publishes about its pod, shared with the pod's handle: the latest
//! status, for readers and for watchers of each change, and a separate signal for the pod's end,
//! so that a caller waiting for the end is not woken at every step before it (each wake-up of a
//! parked thread is a system call on both sides, and on a VM the wake of an idle vCPU).

use std::sync::{RwLock, RwLockReadGuard};

use k8s_openapi::api::core::v1 as k8s;
use tokio::sync::Notify;

use super::view::StatusView;
use crate::signal::Signal;

/// What the supervisor publishes about its pod.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    /// The pod's status, once published.
    pub published: Option<StatusView>,
    /// Every container has stopped for good and the phase is terminal.
    pub finished: bool,
    /// The pod is gone (its last event, `Deleted`, was recorded).
    pub deleted: bool,
}

impl Snapshot {
    /// The pod's status (empty before the supervisor's first publication).
    pub(crate) fn status(&self) -> k8s::PodStatus {
        self.published
            .as_ref()
            .map_or_else(Default::default, StatusView::status)
    }
}

/// The pod's published snapshot and the signal of its end.
#[derive(Debug, Default)]
pub(crate) struct Board {
    snapshot: RwLock<Snapshot>,
    /// Changes with each snapshot published.
    changes: Signal,
    /// Notified when a snapshot that is finished or deleted is published.
    ended: Notify,
}

impl Board {
    /// Publishes `snapshot`: its watchers are woken, and those waiting for the end if it is one.
    pub(crate) fn publish(&self, snapshot: Snapshot) {
        let ended = snapshot.finished || snapshot.deleted;
        let old = std::mem::replace(
            &mut *self.snapshot.write().unwrap_or_else(|e| e.into_inner()),
            snapshot,
        );
        self.changes.bump();
        drop(old); // after the lock: readers do not wait for it
        if ended {
            self.ended.notify_waiters();
        }
    }

    /// Marks the pod finished and deleted, if it is not already (its supervisor is gone).
    pub(crate) fn close(&self) {
        let changed = {
            let mut s = self.snapshot.write().unwrap_or_else(|e| e.into_inner());
            let changed = !(s.finished && s.deleted);
            s.finished = true;
            s.deleted = true;
            changed
        };
        if changed {
            self.changes.bump();
            self.ended.notify_waiters();
        }
    }

    /// The latest snapshot.
    pub(crate) fn borrow(&self) -> RwLockReadGuard<'_, Snapshot> {
        self.snapshot.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until `done` holds of the latest snapshot, looking again at each one published,
    /// and returns what `then` makes of it.
    pub(crate) async fn wait_for<T>(
        &self,
        mut done: impl FnMut(&Snapshot) -> bool,
        then: impl FnOnce(&Snapshot) -> T,
    ) -> T {
        loop {
            // Read before the look, so a snapshot published between the two is not missed.
            let seen = self.changes.version();
            {
                let s = self.borrow();
                if done(&s) {
                    return then(&s);
                }
            }
            self.changes.changed(seen).await;
        }
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
                let s = self.borrow();
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
    use crate::events::Phase;

    fn snapshot(phase: Phase, finished: bool) -> Snapshot {
        let localhost = std::net::IpAddr::from([127, 0, 0, 1]);
        Snapshot {
            published: Some(StatusView {
                phase,
                conditions: Default::default(),
                containers: Default::default(),
                start_time: None,
                nominated: None,
                qos: "BestEffort",
                pod_ip: localhost,
                host_ip: localhost,
                failure: None,
            }),
            finished,
            deleted: false,
        }
    }

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
                board.wait_end(done, |s| s.status().phase).await
            }
        });
        tokio::task::yield_now().await;
        assert_eq!(checks.load(Ordering::Relaxed), 1);
        board.publish(snapshot(Phase::Running, false));
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        // Not woken: the status was checked once, before the step.
        assert_eq!(checks.load(Ordering::Relaxed), 1);
        board.publish(snapshot(Phase::Succeeded, true));
        assert_eq!(waiter.await.unwrap().as_deref(), Some("Succeeded"));
        assert_eq!(checks.load(Ordering::Relaxed), 2);
        // A waiter that comes after the end returns at once; closing again changes nothing.
        board.close();
        assert!(board.wait_end(|s| s.deleted, |s| s.finished).await);
    }
}
