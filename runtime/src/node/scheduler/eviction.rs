//! Eviction under memory pressure, as the kubelet does it: when the guests' memory crosses the
//! node's threshold, one pod at a time above its memory request is evicted (lowest priority
//! first, then furthest above its request), each waited for, until the node is below it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::{PodHandle, QUIET, Scheduler};

impl Scheduler {
    /// A growth left the guests above the threshold: start evicting unless already at it.
    pub(super) fn alarm(self: Arc<Self>) {
        let quiet = *self.quiet_until.lock().unwrap_or_else(|e| e.into_inner());
        if quiet.is_some_and(|t| Instant::now() < t) || self.evicting.swap(true, Ordering::AcqRel) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(self.evict())),
            Err(_) => self.evicting.store(false, Ordering::Release),
        }
    }

    /// Evicts one pod at a time, each once the previous one has stopped, while the guests use
    /// more than the threshold and a pod uses more than it requested.
    pub(super) async fn evict(self: Arc<Self>) {
        loop {
            let mut stuck = false;
            while self.memory.under_pressure() {
                let Some((victim, message)) = self.pressure_victim() else {
                    stuck = true;
                    break;
                };
                tracing::warn!(pod = victim.name(), "{message}");
                victim.evict(message);
                victim.wait().await;
            }
            self.evicting.store(false, Ordering::Release);
            if stuck {
                tracing::warn!(
                    used = self.memory.used(),
                    threshold = self.memory.threshold(),
                    "the node is under memory pressure, but every pod is within its requests"
                );
                *self.quiet_until.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(Instant::now() + QUIET);
                return;
            }
            // A growth while this task was finishing found it busy: look again.
            if !self.memory.under_pressure() || self.evicting.swap(true, Ordering::AcqRel) {
                return;
            }
        }
    }

    /// The pod to evict under memory pressure (the queue's ranking, by each pod's memory
    /// now), marked leaving, and the kubelet's message for it.
    pub(super) fn pressure_victim(&self) -> Option<(PodHandle, String)> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let pods = &inner.pods;
        let key = inner
            .queue
            .pressure_victim(|key| pods.get(&key).map_or(0, |p| p.memory.used()))?;
        let pod = pods.get(&key)?;
        let message = format!(
            "The node was low on resource: memory. Threshold quantity: {}, in use: {}. \
             Pod {} was using {}, request is {}, has larger consumption of memory.",
            mib(self.memory.threshold()),
            mib(self.memory.used()),
            pod.handle.name(),
            mib(pod.memory.used()),
            mib(inner.queue.requests(key).memory),
        );
        Some((pod.handle.clone(), message))
    }
}

/// Bytes as the kubelet prints memory quantities (`Ki`, `Mi`, `Gi` when exact).
pub(super) fn mib(bytes: u64) -> String {
    match bytes {
        0 => "0".into(),
        b if b % (1 << 30) == 0 => format!("{}Gi", b >> 30),
        b if b % (1 << 20) == 0 => format!("{}Mi", b >> 20),
        b if b % (1 << 10) == 0 => format!("{}Ki", b >> 10),
        b => b.to_string(),
    }
}
