//! Memory accounting: each container's budget (its limit, shared by its instances' memories and
//! tables and its sockets' buffers), and the memory each pod's instances hold and the node's
//! total, kept by the instances' resource limiters as memories grow and stores drop. Crossing
//! the node's threshold raises its alarm (the node starts evicting, see `node::scheduler`).

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

/// One container's memory budget (`resources.limits.memory`): its instances' linear memories
/// and tables, and what the host holds for it (socket buffers), all against one limit. Every
/// instance of the container (the entry point, probes, hooks, `exec`) draws from it, as every
/// process of a Linux container counts in its cgroup.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: u64,
    used: AtomicU64,
}

impl Budget {
    pub(crate) fn new(limit: u64) -> Arc<Budget> {
        Arc::new(Budget {
            limit,
            used: AtomicU64::new(0),
        })
    }

    /// Takes `bytes` from the budget if they fit.
    fn take(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Bytes in use.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// Holds `bytes` of the budget until the reservation drops; `None` if they do not fit.
    pub(crate) fn reserve(self: &Arc<Self>, bytes: u64) -> Option<Reservation> {
        self.take(bytes).then(|| Reservation {
            budget: self.clone(),
            bytes,
        })
    }
}

/// Bytes of a container's budget held by something the host made for it (a socket's buffers).
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

/// What one store's memories and tables hold: taken from its container's budget and counted
/// for its pod and node, given back when the store drops.
pub(crate) struct Charge {
    pod: Arc<PodMemory>,
    budget: Arc<Budget>,
    bytes: u64,
}

impl Charge {
    pub(crate) fn new(pod: Arc<PodMemory>, budget: Arc<Budget>) -> Charge {
        Charge {
            pod,
            budget,
            bytes: 0,
        }
    }

    /// A memory or table grows by `bytes`: false (and nothing taken) if the budget has no room.
    pub(crate) fn grow(&mut self, bytes: u64) -> bool {
        if !self.budget.take(bytes) {
            return false;
        }
        self.bytes += bytes;
        self.pod.grow(bytes);
        true
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.pod.release(self.bytes);
        self.budget.give_back(self.bytes);
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
        let budget = Budget::new(u64::MAX);
        let mut a = Charge::new(pod.clone(), budget.clone());
        assert!(a.grow(60));
        let mut b = Charge::new(pod.clone(), budget.clone());
        assert!(b.grow(30));
        assert_eq!((pod.used(), node.used()), (90, 90));
        assert_eq!(rang.load(Ordering::Relaxed), 0);
        assert!(b.grow(20));
        assert_eq!(rang.load(Ordering::Relaxed), 1);
        assert!(node.under_pressure());
        drop(b);
        assert_eq!((pod.used(), node.used()), (60, 60));
        drop(a);
        assert_eq!(node.used(), 0);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn one_budget_bounds_every_store_and_reservation_of_a_container() {
        let node = Arc::new(NodeMemory::new(u64::MAX));
        let pod = PodMemory::new(node);
        let budget = Budget::new(100);
        let mut a = Charge::new(pod.clone(), budget.clone());
        let mut b = Charge::new(pod.clone(), budget.clone());
        assert!(a.grow(40));
        assert!(b.grow(40));
        assert!(!b.grow(30), "past the budget");
        let socket = budget.reserve(20).unwrap();
        assert!(budget.reserve(1).is_none());
        assert_eq!(pod.used(), 80, "refused growth is not counted");
        drop(socket);
        drop(a);
        assert!(b.grow(60));
        drop(b);
        assert_eq!(budget.used(), 0);
    }
}
