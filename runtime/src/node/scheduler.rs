//! Admission for one node: what the scheduler and the kubelet's admission do for a cluster of
//! one. A pod is admitted when its requests fit in what the node has left; otherwise it waits,
//! Pending, in priority order. A waiting pod that may preempt, and that would fit once lower
//! priority pods are gone, has the fewest such pods of the lowest priority deleted for it (the
//! scheduler's victim selection); it starts when they are gone. Under memory pressure, pods are
//! evicted in the kubelet's order.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

mod eviction;
mod placement;
mod victims;

use super::{Allocatable, PodHandle};
use crate::memory::{NodeMemory, PodMemory};
use crate::spec::{PodSpec, Requests};
use crate::supervisor::AdmissionSeat;
pub(crate) use placement::SPREAD_LABEL;
use victims::{Occupant, select_victims};

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
    /// Why the node can never take the pod (its `nodeName` or `nodeSelector`), in the
    /// scheduler's words; these do not change.
    pub unselected: Option<String>,
}

enum State {
    /// Waiting for room; `nominated` once victims were chosen for it.
    Pending {
        nominated: bool,
        message: Option<String>,
    },
    /// Counted against the node; `leaving` once it is stopping for good.
    Admitted { leaving: bool },
}

struct Entry {
    pod: Candidate,
    state: State,
}

/// Resources in use (or reserved).
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    memory: u64,
    cpu_milli: u64,
    pods: u64,
    containers: u64,
}

impl Usage {
    fn plus(self, r: Requests) -> Usage {
        Usage {
            memory: self.memory.saturating_add(r.memory),
            cpu_milli: self.cpu_milli.saturating_add(r.cpu_milli),
            pods: self.pods + 1,
            containers: self.containers.saturating_add(r.containers),
        }
    }

    fn add(self, other: Usage) -> Usage {
        Usage {
            memory: self.memory.saturating_add(other.memory),
            cpu_milli: self.cpu_milli.saturating_add(other.cpu_milli),
            pods: self.pods + other.pods,
            containers: self.containers.saturating_add(other.containers),
        }
    }

    fn minus(self, r: Requests) -> Usage {
        Usage {
            memory: self.memory.saturating_sub(r.memory),
            cpu_milli: self.cpu_milli.saturating_sub(r.cpu_milli),
            pods: self.pods.saturating_sub(1),
            containers: self.containers.saturating_sub(r.containers),
        }
    }
}

#[derive(Default)]
struct Inner {
    entries: HashMap<u64, Entry>,
    /// The pending pods, in the order they are considered: highest priority, then oldest.
    pending: BTreeSet<(Reverse<i32>, u64)>,
    /// The admitted pods' requests.
    used: Usage,
    /// How many admitted pods have a required anti-affinity (which every pending pod is then
    /// checked against).
    repelling: usize,
}

pub(crate) struct Scheduler {
    inner: Mutex<Inner>,
    allocatable: Allocatable,
    node_name: String,
    node_labels: Arc<BTreeMap<String, String>>,
    memory: Arc<NodeMemory>,
    next_key: AtomicU64,
    evicting: AtomicBool,
    /// No eviction victim was found: do not look again before then.
    quiet_until: Mutex<Option<Instant>>,
    /// Runs after a pod was released (the node's garbage collection).
    after_release: OnceLock<Box<dyn Fn() + Send + Sync>>,
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
            inner: Mutex::default(),
            allocatable,
            node_name,
            node_labels,
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

    pub(crate) fn allocatable(&self) -> Allocatable {
        self.allocatable
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
    /// whether that pod was admitted (it is not told so through its handle).
    pub(crate) fn submit(&self, key: u64, pod: Candidate) -> bool {
        let mut inner = self.lock();
        let state = State::Pending {
            nominated: false,
            message: None,
        };
        inner.pending.insert((Reverse(pod.priority), key));
        inner.entries.insert(key, Entry { pod, state });
        self.schedule(&mut inner, Some(key))
    }

    fn leaving(&self, key: u64) {
        if let Some(Entry {
            state: State::Admitted { leaving },
            ..
        }) = self.lock().entries.get_mut(&key)
        {
            *leaving = true;
        }
    }

    /// Sets what runs after each release, outside admission's lock.
    pub(crate) fn after_release(&self, hook: impl Fn() + Send + Sync + 'static) {
        let _ = self.after_release.set(Box::new(hook));
    }

    /// Frees the pod's room (once; a second release of the same pod does nothing).
    fn release(&self, key: u64) {
        if self.release_seat(key)
            && let Some(hook) = self.after_release.get()
        {
            hook();
        }
    }

    /// Whether the pod held a seat.
    fn release_seat(&self, key: u64) -> bool {
        let mut inner = self.lock();
        let Some(entry) = inner.entries.remove(&key) else {
            return false;
        };
        match entry.state {
            State::Admitted { .. } => {
                inner.used = inner.used.minus(entry.pod.requests);
                if !entry.pod.spec.placement.anti_affinity.is_empty() {
                    inner.repelling -= 1;
                }
            }
            State::Pending { .. } => {
                inner.pending.remove(&(Reverse(entry.pod.priority), key));
            }
        }
        self.schedule(&mut inner, None);
        true
    }

    /// What `requests` lacks with `used` taken, in the scheduler's words; empty when it fits.
    fn shortfall(&self, used: Usage, requests: Requests) -> Vec<&'static str> {
        let after = used.plus(requests);
        let a = &self.allocatable;
        let mut lacking = Vec::new();
        if after.cpu_milli > a.cpu_milli && requests.cpu_milli > 0 {
            lacking.push("Insufficient cpu");
        }
        if after.memory > a.memory && requests.memory > 0 {
            lacking.push("Insufficient memory");
        }
        if after.pods > a.pods {
            lacking.push("Too many pods");
        }
        // An extended resource of wasmpod's, in the scheduler's words for those.
        if after.containers > a.containers && requests.containers > 0 {
            lacking.push("Insufficient wasmpod.dev/containers");
        }
        lacking
    }

    /// Admits the pending pods that fit, highest priority first (then oldest); chooses victims
    /// for a pod that does not fit and may preempt. Returns whether `submitting` was admitted.
    fn schedule(&self, inner: &mut Inner, submitting: Option<u64>) -> bool {
        let mut admitted = false;
        // A pod admitted in a pass may be what an earlier pending pod's affinity waited for
        // (the scheduler requeues unschedulable pods when a pod is added): pass again then,
        // while a pass admitted a pod and refused one for its placement.
        loop {
            let (now, again) = self.schedule_pass(inner, submitting);
            admitted |= now;
            if !again || inner.pending.is_empty() {
                return admitted;
            }
        }
    }

    /// One pass over the pending pods; returns whether `submitting` was admitted, and whether
    /// to pass again (a pod was admitted and one was refused for its placement).
    fn schedule_pass(&self, inner: &mut Inner, submitting: Option<u64>) -> (bool, bool) {
        if inner.pending.is_empty() {
            return (false, false);
        }
        let (mut any, mut unplaced) = (false, false);
        let pending: Vec<(Reverse<i32>, u64)> = inner.pending.iter().copied().collect();
        let mut admitted = false;
        // Room held for nominated pods while their victims stop: lower pods may not take it.
        let mut reserved = Usage::default();
        for (priority, key) in pending {
            let requests = inner.entries[&key].pod.requests;
            let verdict = self.verdict(inner, key, reserved);
            let entry = inner.entries.get_mut(&key).expect("pending entry");
            let message = match verdict {
                Verdict::Admit => {
                    inner.pending.remove(&(priority, key));
                    inner.used = inner.used.plus(requests);
                    if !entry.pod.spec.placement.anti_affinity.is_empty() {
                        inner.repelling += 1;
                    }
                    entry.state = State::Admitted { leaving: false };
                    any = true;
                    if submitting == Some(key) {
                        admitted = true;
                    } else {
                        entry.pod.handle.admitted();
                    }
                    continue;
                }
                Verdict::Hold => {
                    reserved = reserved.plus(requests);
                    continue;
                }
                Verdict::Nominate(victims, message) => {
                    entry.state = State::Pending {
                        nominated: true,
                        message: Some(message.clone()),
                    };
                    entry
                        .pod
                        .handle
                        .unschedulable(message, Some(self.node_name.clone()));
                    self.preempt(inner, key, &victims);
                    reserved = reserved.plus(requests);
                    continue;
                }
                Verdict::Wait(message) => message,
                Verdict::Unplaced(message) => {
                    unplaced = true;
                    message
                }
            };
            if let State::Pending {
                nominated,
                message: said,
            } = &mut entry.state
            {
                *nominated = false;
                if said.as_deref() != Some(message.as_str()) {
                    *said = Some(message.clone());
                    entry.pod.handle.unschedulable(message, None);
                }
            }
        }
        (admitted, any && unplaced)
    }

    /// What becomes of pending pod `key`, with `reserved` held for pods before it.
    fn verdict(&self, inner: &Inner, key: u64, reserved: Usage) -> Verdict {
        let entry = &inner.entries[&key];
        if let Some(why) = &entry.pod.unselected {
            // The scheduler's NodeName and NodeAffinity filters come first; no preemption can
            // help them.
            return Verdict::Wait(format!(
                "0/1 nodes are available: 1 {why}. preemption: 0/1 nodes are available: 1 \
                 Preemption is not helpful for scheduling."
            ));
        }
        let lacking = self.shortfall(inner.used.add(reserved), entry.pod.requests);
        if lacking.is_empty() {
            // The inter-pod filters, which come after the resource fit. wasmpod does not
            // preempt for them.
            return match self.placement_refusal(inner, key) {
                None => Verdict::Admit,
                Some(why) => Verdict::Unplaced(format!(
                    "0/1 nodes are available: 1 {why}. preemption: 0/1 nodes are available: 1 \
                     Preemption is not helpful for scheduling."
                )),
            };
        }
        let nominated = matches!(
            entry.state,
            State::Pending {
                nominated: true,
                ..
            }
        );
        let message = format!("0/1 nodes are available: 1 {}.", lacking.join(", 1 "));
        if !entry.pod.preempts {
            return Verdict::Wait(
                message + " preemption: not eligible due to preemptionPolicy=Never.",
            );
        }
        match self.victims(inner, key, reserved) {
            Choice::Victims(victims) => Verdict::Nominate(victims, message),
            // Its victims are still stopping.
            Choice::WaitForLeaving if nominated => Verdict::Hold,
            Choice::WaitForLeaving => Verdict::Wait(
                message + " preemption: waiting for terminating pods to leave the node.",
            ),
            Choice::None => Verdict::Wait(
                message
                    + " preemption: 0/1 nodes are available: 1 No preemption victims found for \
                       incoming pod.",
            ),
        }
    }

    /// Why pending pod `key` may not join the admitted pods (topology spread, pod affinity and
    /// anti-affinity), or `None`.
    fn placement_refusal(&self, inner: &Inner, key: u64) -> Option<&'static str> {
        let pod = &inner.entries[&key].pod.spec;
        if pod.placement.is_empty() && inner.repelling == 0 {
            return None;
        }
        let admitted: Vec<placement::Admitted<'_>> = inner
            .entries
            .values()
            .filter_map(|e| match e.state {
                State::Admitted { leaving } => Some(placement::Admitted {
                    spec: &e.pod.spec,
                    leaving,
                }),
                State::Pending { .. } => None,
            })
            .collect();
        placement::refusal(pod, &admitted, &self.node_labels)
    }

    /// The victims pending pod `key` would need (see [`select_victims`]).
    fn victims(&self, inner: &Inner, key: u64, reserved: Usage) -> Choice {
        let preemptor = &inner.entries[&key].pod;
        let others: Vec<Occupant> = inner
            .entries
            .iter()
            .filter_map(|(&k, e)| match e.state {
                State::Admitted { leaving } => Some(Occupant {
                    key: k,
                    priority: e.pod.priority,
                    requests: e.pod.requests,
                    leaving,
                }),
                State::Pending { .. } => None,
            })
            .collect();
        let fits = |used: Usage| self.shortfall(used, preemptor.requests).is_empty();
        select_victims(fits, inner.used.add(reserved), preemptor.priority, &others)
    }

    fn preempt(&self, inner: &mut Inner, preemptor: u64, victims: &[u64]) {
        let by = &inner.entries[&preemptor].pod;
        let message = format!(
            "Preempted by pod {}/{} on node {}",
            by.spec.namespace,
            by.handle.name(),
            self.node_name
        );
        for key in victims {
            let entry = inner.entries.get_mut(key).expect("victim entry");
            entry.state = State::Admitted { leaving: true };
            tracing::info!(pod = entry.pod.handle.name(), "{message}");
            entry.pod.handle.preempted(message.clone());
            entry.pod.handle.delete(None);
        }
    }

    // ---- eviction under memory pressure --------------------------------------------------------
}

/// What admission does with a pending pod.
enum Verdict {
    Admit,
    /// Keep its room while its victims stop.
    Hold,
    /// Preempt these pods for it.
    Nominate(Vec<u64>, String),
    /// It waits, for this reason.
    Wait(String),
    /// It waits for the pods on the node to change (its placement), for this reason.
    Unplaced(String),
}

enum Choice {
    Victims(Vec<u64>),
    /// The pod fits once the pods already stopping have left.
    WaitForLeaving,
    None,
}
