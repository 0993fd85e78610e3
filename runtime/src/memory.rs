//! Memory accounting: each container's budget (its limit, shared by its instances' memories and
//! tables and its sockets' buffers), and the memory each pod's instances hold and the node's
//! total, kept by the instances' resource limiters as memories grow and stores drop. Crossing
//! the node's threshold raises its alarm (the node starts evicting, see `node::scheduler`); a
//! node in a memory cgroup also refuses a growth past what the cgroup leaves its guests
//! ([`crate::cgroup::Cap`]): that guest ends out of memory, as the kernel would end one
//! container, rather than the kernel ending the process with every pod.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::cgroup::Cap;

/// The guests' memory on a node.
pub(crate) struct NodeMemory {
    used: AtomicU64,
    threshold: u64,
    alarm: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// What the process's memory cgroup leaves the guests; `None`: unbounded.
    cap: Option<Cap>,
}

impl NodeMemory {
    /// The guests' memory, alarmed past `threshold`, with no cap.
    pub(crate) fn new(threshold: u64) -> NodeMemory {
        NodeMemory {
            used: AtomicU64::new(0),
            threshold,
            alarm: OnceLock::new(),
            cap: None,
        }
    }

    /// A node's, or a task engine's: also capped at what the process's memory cgroup leaves
    /// its guests.
    pub(crate) fn in_cgroup(threshold: u64) -> NodeMemory {
        NodeMemory {
            cap: Some(Cap::new()),
            ..NodeMemory::new(threshold)
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

    /// Past how many bytes of guests' memory the node evicts: its threshold, or in a memory
    /// cgroup where the memory left in it runs short, whichever comes first.
    pub(crate) fn threshold(&self) -> u64 {
        self.cap
            .as_ref()
            .map_or(self.threshold, |cap| self.threshold.min(cap.evict_at()))
    }

    pub(crate) fn under_pressure(&self) -> bool {
        self.used() > self.threshold()
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

    /// Counts `bytes` more for the pod and the node: false (nothing counted) past the node's
    /// cap.
    fn grow(&self, bytes: u64) -> bool {
        let before = self.node.used.fetch_add(bytes, Ordering::Relaxed);
        if let Some(cap) = &self.node.cap
            && !cap.allows(before, bytes)
        {
            self.node.used.fetch_sub(bytes, Ordering::Relaxed);
            return false;
        }
        self.used.fetch_add(bytes, Ordering::Relaxed);
        if before.saturating_add(bytes) > self.node.threshold()
            && let Some(alarm) = self.node.alarm.get()
        {
            alarm();
        }
        true
    }

    fn release(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
        self.node.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// One container's memory budget (`resources.limits.memory`): its instances' linear memories
/// and tables, and what the host holds for it (socket buffers), all against one limit. Every
/// instance of the container (the entry point, probes, hooks, `exec`) draws from it, as every
/// process of a Linux container counts in its cgroup. A pod with a pod-level limit has a budget
/// of its own that each container's draws from too, as the pod's cgroup holds its containers'.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: AtomicU64,
    used: AtomicU64,
    /// The pod's budget, when it has one.
    pod: Option<Arc<Budget>>,
}

impl Budget {
    pub(crate) fn new(limit: u64) -> Arc<Budget> {
        Budget::within(limit, None)
    }

    /// A container's budget inside its pod's (`pod`, when the pod has a limit).
    pub(crate) fn within(limit: u64, pod: Option<Arc<Budget>>) -> Arc<Budget> {
        Arc::new(Budget {
            limit: AtomicU64::new(limit),
            used: AtomicU64::new(0),
            pod,
        })
    }

    /// Takes `bytes` from the budget, and from the pod's, if they fit in both.
    fn take(&self, bytes: u64) -> bool {
        let fits = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes)
                    .filter(|&total| total <= self.limit())
            })
            .is_ok();
        if !fits {
            return false;
        }
        if let Some(pod) = &self.pod
            && !pod.take(bytes)
        {
            self.used.fetch_sub(bytes, Ordering::AcqRel);
            return false;
        }
        true
    }

    fn give_back(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
        if let Some(pod) = &self.pod {
            pod.give_back(bytes);
        }
    }

    /// The most bytes it holds.
    pub(crate) fn limit(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }

    /// Changes the limit (a running container's resize); refused, with the bytes in use, when
    /// more than the new limit is in use. Memory already held is never taken back.
    pub(crate) fn set_limit(&self, limit: u64) -> Result<(), u64> {
        let used = self.used();
        if used > limit {
            return Err(used);
        }
        self.limit.store(limit, Ordering::Release);
        Ok(())
    }

    /// Sets the limit even below what is in use (nothing is taken back; growth fails until
    /// enough is freed).
    pub(crate) fn cap(&self, limit: u64) {
        self.limit.store(limit, Ordering::Release);
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
        if !self.pod.grow(bytes) {
            self.budget.give_back(bytes);
            return false;
        }
        self.bytes += bytes;
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
    fn a_pod_budget_bounds_its_containers_together() {
        let node = Arc::new(NodeMemory::new(u64::MAX));
        let pod = PodMemory::new(node);
        let shared = Budget::new(100);
        let (one, two) = (
            Budget::within(80, Some(shared.clone())),
            Budget::within(80, Some(shared.clone())),
        );
        let mut a = Charge::new(pod.clone(), one.clone());
        let mut b = Charge::new(pod.clone(), two.clone());
        assert!(a.grow(60));
        assert!(!a.grow(30), "past its container's budget");
        assert!(!b.grow(50), "fits its container's, not the pod's");
        assert_eq!(two.used(), 0, "a refused growth leaves nothing taken");
        let socket = two.reserve(40).expect("fits both");
        assert_eq!(shared.used(), 100);
        drop(socket);
        drop(a);
        assert_eq!((shared.used(), one.used()), (0, 0));
        assert!(b.grow(80));
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
