//! Eviction under memory pressure, as the kubelet does it: when the guests' memory crosses the
//! node's threshold, one pod at a time above its memory request is evicted (lowest priority
//! first, then furthest above its request), each waited for, until the node is below it.

use std::cmp::Reverse;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{PodHandle, QUIET, Scheduler, State};

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

    /// The kubelet's ranking under memory pressure: pods using more than they request, lowest
    /// priority first, then the most above its request. Pods within their requests are never
    /// chosen.
    pub(super) fn pressure_victim(&self) -> Option<(PodHandle, String)> {
        let mut inner = self.lock();
        let (_, _, key) = inner
            .entries
            .iter()
            .filter_map(|(&key, e)| {
                let State::Admitted { leaving: false } = e.state else {
                    return None;
                };
                let used = e.pod.memory.used();
                let excess = used.checked_sub(e.pod.requests.memory)?;
                (excess > 0).then_some((e.pod.priority, Reverse(excess), key))
            })
            .min()?;
        let entry = inner.entries.get_mut(&key)?;
        entry.state = State::Admitted { leaving: true };
        let message = format!(
            "The node was low on resource: memory. Threshold quantity: {}, in use: {}. \
             Pod {} was using {}, request is {}, has larger consumption of memory.",
            mib(self.memory.threshold()),
            mib(self.memory.used()),
            entry.pod.handle.name(),
            mib(entry.pod.memory.used()),
            mib(entry.pod.requests.memory),
        );
        Some((entry.pod.handle.clone(), message))
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
