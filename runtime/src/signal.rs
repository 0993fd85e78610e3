//! A change counter that tasks wait on: what a `watch` channel does when the value it would carry
//! is kept elsewhere (a pod's journal, its log book, its published status) or is one flag (TERM).
//!
//! Every sleeping pod keeps a few of these. tokio's `watch` channel keeps eight wait lists for
//! its receivers and one for its sender (about 0.3 KiB each time); a [`Signal`] keeps a counter
//! and one wait list (40 bytes). Its waiters are few (a pod's watchers, a guest waiting for
//! TERM), so one list serves them.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

/// A counter of changes, and the tasks waiting for the next one.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    version: AtomicU64,
    waiters: Notify,
}

impl Signal {
    /// Records a change (made before this call) and wakes every waiter.
    pub(crate) fn bump(&self) {
        self.version.fetch_add(1, Ordering::AcqRel);
        self.waiters.notify_waiters();
    }

    /// The number of changes so far.
    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Waits until the number of changes is other than `seen` (a [`Signal::version`] read
    /// before looking at what changes), and returns it. Cancel-safe.
    pub(crate) async fn changed(&self, seen: u64) -> u64 {
        loop {
            let notified = self.waiters.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check: a change made between the two wakes this waiter.
            notified.as_mut().enable();
            let now = self.version();
            if now != seen {
                return now;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// A change made on another thread between a waiter's look and its wait is not lost, and
    /// every waiter sees the last change.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiters_see_every_change_made_after_their_look() {
        for _ in 0..200 {
            let signal = Arc::new(Signal::default());
            let waiters: Vec<_> = (0..4)
                .map(|_| {
                    let signal = signal.clone();
                    tokio::spawn(async move {
                        let mut seen = signal.version();
                        while seen < 50 {
                            seen = signal.changed(seen).await;
                        }
                        seen
                    })
                })
                .collect();
            let bumper = signal.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    bumper.bump();
                    std::hint::spin_loop();
                }
            });
            for w in waiters {
                let seen = tokio::time::timeout(Duration::from_secs(5), w)
                    .await
                    .expect("a waiter missed a change")
                    .unwrap();
                assert_eq!(seen, 50);
            }
        }
    }

    /// A waiter whose look is already out of date returns at once.
    #[tokio::test]
    async fn a_stale_look_returns_at_once() {
        let signal = Signal::default();
        let seen = signal.version();
        signal.bump();
        assert_eq!(signal.changed(seen).await, seen + 1);
    }
}
