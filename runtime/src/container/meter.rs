//! Memory accounting: the linear memory each pod's instances hold, and the node's total, kept by
//! the instances' resource limiters as memories grow and stores drop. Crossing the node's
//! threshold raises its alarm (the node starts evicting, see `node::scheduler`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The guests' memory on a node.
pub(crate) struct NodeMemory {
    used: AtomicU64,
    threshold: u64,
    alarm: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl NodeMemory {
    pub(crate) fn new(threshold: u64) -> NodeMemory {
        NodeMemory {
            used: AtomicU64::new(0),
            threshold,
            alarm: OnceLock::new(),
        }
    }

    /// Sets what runs when a growth leaves the guests using more than the threshold.
    pub(crate) fn on_pressure(&self, alarm: impl Fn() + Send + Sync + 'static) {
        let _ = self.alarm.set(Box::new(alarm));
    }

    /// Bytes of linear memory the guests hold.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    pub(crate) fn threshold(&self) -> u64 {
        self.threshold
    }

    pub(crate) fn under_pressure(&self) -> bool {
        self.used() > self.threshold
    }
}

/// The memory of one pod's instances (main, probes, hooks).
pub(crate) struct PodMemory {
    used: AtomicU64,
    node: Arc<NodeMemory>,
}

impl PodMemory {
    pub(crate) fn new(node: Arc<NodeMemory>) -> Arc<PodMemory> {
        Arc::new(PodMemory {
            used: AtomicU64::new(0),
            node,
        })
    }

    /// Bytes of linear memory the pod's instances hold.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    fn grow(&self, bytes: u64) {
        self.used.fetch_add(bytes, Ordering::Relaxed);
        let total = self.node.used.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if total > self.node.threshold
            && let Some(alarm) = self.node.alarm.get()
        {
            alarm();
        }
    }

    fn release(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
        self.node.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// What one store's memories hold, given back when the store drops.
pub(crate) struct Charge {
    pod: Arc<PodMemory>,
    bytes: u64,
}

impl Charge {
    pub(crate) fn new(pod: Arc<PodMemory>) -> Charge {
        Charge { pod, bytes: 0 }
    }

    /// A memory grew from `current` to `desired` bytes.
    pub(crate) fn grew(&mut self, current: usize, desired: usize) {
        let delta = desired.saturating_sub(current) as u64;
        self.bytes += delta;
        self.pod.grow(delta);
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.pod.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_return_when_stores_drop_and_the_alarm_rings_past_the_threshold() {
        let node = Arc::new(NodeMemory::new(100));
        let rang = Arc::new(AtomicU64::new(0));
        let counter = rang.clone();
        node.on_pressure(move || {
            counter.fetch_add(1, Ordering::Relaxed);
        });
        let pod = PodMemory::new(node.clone());
        let mut a = Charge::new(pod.clone());
        a.grew(0, 60);
        let mut b = Charge::new(pod.clone());
        b.grew(0, 30);
        assert_eq!((pod.used(), node.used()), (90, 90));
        assert_eq!(rang.load(Ordering::Relaxed), 0);
        b.grew(30, 50);
        assert_eq!(rang.load(Ordering::Relaxed), 1);
        assert!(node.under_pressure());
        drop(b);
        assert_eq!((pod.used(), node.used()), (60, 60));
        drop(a);
        assert_eq!(node.used(), 0);
    }
}
