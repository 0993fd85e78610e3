//! Admission for one node: what the scheduler and the kubelet's admission do for a cluster of
//! one. A pod is admitted when its requests fit in what the node has left; otherwise it waits,
//! Pending, in priority order. A waiting pod that may preempt, and that would fit once lower
//! priority pods are gone, has the fewest such pods of the lowest priority deleted for it (the
//! scheduler's victim selection); it starts when they are gone. Under memory pressure, pods are
//! evicted in the kubelet's order.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use tokio::time::Instant;

mod eviction;
mod placement;
mod queue;
mod usage;
mod victims;

use super::{Allocatable, PodHandle};
use crate::memory::{NodeMemory, PodMemory};
use crate::spec::{PodSpec, Requests};
use crate::supervisor::AdmissionSeat;
pub(crate) use placement::SPREAD_LABEL;
use queue::{Action, Queue, Seated};

/// What runs after a pod's release, with the pod.
type ReleaseHook = Box<dyn Fn(&PodHandle) + Send + Sync>;

/// The scheduler's reason for a node whose labels do not match a pod's `nodeSelector`.
pub(crate) const NOT_SELECTED: &str = "node(s) didn't match Pod's node affinity/selector";
/// The scheduler's reason for a node other than the pod's `nodeName`.
pub(crate) const NOT_NAMED: &str = "node(s) didn't match the requested node name";

/// How long the node waits before looking for eviction victims again after finding none.
const QUIET: Duration = Duration::from_millis(100);

/// What admission knows of a pod.
pub(crate) struct Candidate {
    pub handle: PodHandle,
    /// Its labels and placement constraints, for the pods admitted after it and for itself.
    pub spec: Arc<PodSpec>,
    pub priority: i32,
    /// `preemptionPolicy` is not `Never`.
    pub preempts: bool,
    pub requests: Requests,
    pub memory: Arc<PodMemory>,
}

/// A pod admission holds: where its verdicts go, and the memory it uses.
struct Pod {
    handle: PodHandle,
    memory: Arc<PodMemory>,
}

/// The decision's data and the pods it is about.
struct Inner {
    queue: Queue,
    pods: HashMap<u64, Pod>,
}

/// Admission: the [`Queue`]'s decisions, told to the pods under one lock (so that each pod
/// hears them in the order they were made).
pub(crate) struct Scheduler {
    inner: Mutex<Inner>,
    memory: Arc<NodeMemory>,
    next_key: AtomicU64,
    evicting: AtomicBool,
    /// No eviction victim was found: do not look again before then.
    quiet_until: Mutex<Option<Instant>>,
    /// Runs after a pod was released (the node's garbage collection).
    after_release: OnceLock<ReleaseHook>,
}

/// A pod's place in admission, held by its supervisor.
pub(crate) struct Seat {
    scheduler: Weak<Scheduler>,
    key: u64,
}

impl Seat {
    /// Which pod the seat is for, in the scheduler's queue.
    pub(crate) fn key(&self) -> u64 {
        self.key
    }
}

impl AdmissionSeat for Seat {
    fn leaving(&self) {
        if let Some(s) = self.scheduler.upgrade() {
            s.leaving(self.key);
        }
    }

    fn release(&self) {
        if let Some(s) = self.scheduler.upgrade() {
            s.release(self.key);
        }
    }
}

impl Scheduler {
    pub(crate) fn new(
        allocatable: Allocatable,
        node_name: String,
        node_labels: Arc<BTreeMap<String, String>>,
        memory: Arc<NodeMemory>,
    ) -> Arc<Scheduler> {
        let scheduler = Arc::new(Scheduler {
            inner: Mutex::new(Inner {
                queue: Queue::new(allocatable, node_name, node_labels),
                pods: HashMap::new(),
            }),
            memory: memory.clone(),
            next_key: AtomicU64::new(1),
            evicting: AtomicBool::new(false),
            quiet_until: Mutex::new(None),
            after_release: OnceLock::new(),
        });
        let weak = Arc::downgrade(&scheduler);
        memory.on_pressure(move || {
            if let Some(s) = weak.upgrade() {
                s.alarm();
            }
        });
        scheduler
    }

    /// New labels of the node: `publish` makes them the node's and returns them, and pending
    /// pods are matched again with `unselected`. Under admission's lock, as [`Self::submit`]
    /// matches a new pod: no pod is matched against labels that are no longer the node's.
    pub(crate) fn relabel(
        &self,
        publish: impl FnOnce() -> Arc<BTreeMap<String, String>>,
        unselected: impl Fn(&PodSpec) -> Option<String>,
    ) {
        let mut inner = self.lock();
        let actions = inner.queue.relabel(publish(), unselected);
        self.tell(&inner, actions, None);
    }

    pub(crate) fn allocatable(&self) -> Allocatable {
        self.lock().queue.allocatable()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A seat for a pod about to be submitted.
    pub(crate) fn seat(self: &Arc<Self>) -> Seat {
        Seat {
            scheduler: Arc::downgrade(self),
            key: self.next_key.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Queues the pod of `seat` (before its supervisor runs) and admits what fits; returns
    /// whether that pod was admitted (it is not told so through its handle). `unselected` says
    /// why the node can never take it (its `nodeName` or `nodeSelector`), in the scheduler's
    /// words, matched under admission's lock (see [`Self::relabel`]).
    pub(crate) fn submit(
        &self,
        key: u64,
        pod: Candidate,
        unselected: impl FnOnce(&PodSpec) -> Option<String>,
    ) -> bool {
        let mut inner = self.lock();
        let seated = Seated {
            unselected: unselected(&pod.spec),
            spec: pod.spec,
            priority: pod.priority,
            preempts: pod.preempts,
            requests: pod.requests,
        };
        let held = Pod {
            handle: pod.handle,
            memory: pod.memory,
        };
        inner.pods.insert(key, held);
        let actions = inner.queue.submit(key, seated);
        self.tell(&inner, actions, Some(key))
    }

    fn leaving(&self, key: u64) {
        self.lock().queue.leaving(key);
    }

    /// Sets what runs after each release, outside admission's lock.
    pub(crate) fn after_release(&self, hook: impl Fn(&PodHandle) + Send + Sync + 'static) {
        let _ = self.after_release.set(Box::new(hook));
    }

    /// Frees the pod's room (once; a second release of the same pod does nothing).
    fn release(&self, key: u64) {
        if let Some(pod) = self.release_seat(key)
            && let Some(hook) = self.after_release.get()
        {
            hook(&pod);
        }
    }

    /// The pod, if it held a seat.
    fn release_seat(&self, key: u64) -> Option<PodHandle> {
        let mut inner = self.lock();
        let actions = inner.queue.release(key)?;
        let held = inner.pods.remove(&key);
        self.tell(&inner, actions, None);
        held.map(|p| p.handle)
    }

    /// Tells the pods what was decided; returns whether `submitting` was admitted (which it
    /// is not told: its creator starts it).
    fn tell(&self, inner: &Inner, actions: Vec<Action>, submitting: Option<u64>) -> bool {
        let mut admitted = false;
        for action in actions {
            match action {
                Action::Admit(key) if Some(key) == submitting => admitted = true,
                Action::Admit(key) => inner.pods[&key].handle.admitted(),
                Action::Unschedulable {
                    key,
                    message,
                    nominated,
                } => {
                    let node = nominated.then(|| inner.queue.node_name().to_owned());
                    inner.pods[&key].handle.unschedulable(message, node);
                }
                Action::Preempt { key, message } => {
                    let handle = &inner.pods[&key].handle;
                    tracing::info!(pod = handle.name(), "{message}");
                    handle.preempted(message);
                    handle.delete(None);
                }
            }
        }
        admitted
    }
}
