//! Admission's decision as data: the pods the node knows (pending in priority order, or
//! admitted), what the admitted ones hold, and the node's allocatable resources; each change
//! (a pod submitted, leaving, released) returns the [`Action`]s it leads to, which the
//! [`Scheduler`](super::Scheduler) then tells the pods. No handles, no clock, no locks: the
//! decision is table-tested alone.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::placement;
use super::usage::Usage;
use super::victims::{Choice, Occupant, select_victims};
use crate::node::Allocatable;
use crate::spec::{PodSpec, Requests};

/// What admission decides a pod by.
pub(super) struct Seated {
    /// Its name, namespace, labels and placement constraints.
    pub(super) spec: Arc<PodSpec>,
    pub(super) priority: i32,
    /// `preemptionPolicy` is not `Never`.
    pub(super) preempts: bool,
    pub(super) requests: Requests,
    /// Why the node can never take the pod (its `nodeName` or `nodeSelector`), in the
    /// scheduler's words.
    pub(super) unselected: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Waiting for room; `nominated` once victims were chosen for it; the message it was told.
    Pending {
        nominated: bool,
        message: Option<String>,
    },
    /// Counted against the node; `leaving` once it is stopping for good.
    Admitted { leaving: bool },
}

struct Entry {
    pod: Seated,
    state: State,
}

impl Entry {
    /// Whether the pod has anti-affinity terms, which the placement of every pod checks.
    fn repels(&self) -> bool {
        let placement = &self.pod.spec.scheduling().placement;
        !placement.anti_affinity.is_empty()
    }
}

/// What admission tells a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    /// It is admitted: counted against the node, and it starts.
    Admit(u64),
    /// It stays Pending for this reason (said once per reason); `nominated` when pods were
    /// preempted for it (the node is its nominated node).
    Unschedulable {
        key: u64,
        message: String,
        nominated: bool,
    },
    /// It is preempted for another pod, with this message, and deleted.
    Preempt { key: u64, message: String },
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

/// The node's pods and what they hold, as admission decides with them.
pub(super) struct Queue {
    allocatable: Allocatable,
    node_name: String,
    node_labels: Arc<BTreeMap<String, String>>,
    entries: HashMap<u64, Entry>,
    /// The pending pods, in the order they are considered: highest priority, then oldest.
    pending: BTreeSet<(Reverse<i32>, u64)>,
    /// The admitted pods' requests.
    used: Usage,
    /// How many admitted pods have a required anti-affinity (which every pending pod is then
    /// checked against).
    repelling: usize,
}

impl Queue {
    /// The node's labels changed: each pending pod is matched again (`unselected` says why the
    /// node can never take it now), and what fits is admitted, as the scheduler requeues
    /// unschedulable pods when a node changes.
    pub(super) fn relabel(
        &mut self,
        labels: Arc<BTreeMap<String, String>>,
        unselected: impl Fn(&PodSpec) -> Option<String>,
    ) -> Vec<Action> {
        self.node_labels = labels;
        for (_, key) in &self.pending {
            if let Some(entry) = self.entries.get_mut(key) {
                entry.pod.unselected = unselected(&entry.pod.spec);
            }
        }
        self.schedule()
    }

    pub(super) fn new(
        allocatable: Allocatable,
        node_name: String,
        node_labels: Arc<BTreeMap<String, String>>,
    ) -> Queue {
        Queue {
            allocatable,
            node_name,
            node_labels,
            entries: HashMap::new(),
            pending: BTreeSet::new(),
            used: Usage::default(),
            repelling: 0,
        }
    }

    pub(super) fn allocatable(&self) -> Allocatable {
        self.allocatable
    }

    /// The node's name: the one a pod is nominated for when pods are preempted for it.
    pub(super) fn node_name(&self) -> &str {
        &self.node_name
    }

    /// Queues pod `key` (keys grow with age) and admits what fits.
    pub(super) fn submit(&mut self, key: u64, pod: Seated) -> Vec<Action> {
        let state = State::Pending {
            nominated: false,
            message: None,
        };
        self.pending.insert((Reverse(pod.priority), key));
        self.entries.insert(key, Entry { pod, state });
        self.schedule()
    }

    /// An admitted pod is stopping for good: its room counts as free for preemption.
    pub(super) fn leaving(&mut self, key: u64) {
        if let Some(Entry {
            state: State::Admitted { leaving },
            ..
        }) = self.entries.get_mut(&key)
        {
            *leaving = true;
        }
    }

    /// Frees the pod's room and admits what fits then; `None` for a pod it does not hold (a
    /// second release).
    pub(super) fn release(&mut self, key: u64) -> Option<Vec<Action>> {
        let entry = self.entries.remove(&key)?;
        match entry.state {
            State::Admitted { .. } => {
                self.used = self.used.minus(entry.pod.requests);
                if entry.repels() {
                    self.repelling -= 1;
                }
            }
            State::Pending { .. } => {
                self.pending.remove(&(Reverse(entry.pod.priority), key));
            }
        }
        Some(self.schedule())
    }

    /// The pod's requests (zero for one it does not hold).
    pub(super) fn requests(&self, key: u64) -> Requests {
        self.entries
            .get(&key)
            .map_or(Requests::default(), |e| e.pod.requests)
    }

    /// The kubelet's ranking under memory pressure, `used` giving each pod's memory: pods
    /// using more than they request, lowest priority first, then the most above its request.
    /// The one chosen is marked leaving. Pods within their requests are never chosen.
    pub(super) fn pressure_victim(&mut self, used: impl Fn(u64) -> u64) -> Option<u64> {
        let (_, _, key) = self
            .entries
            .iter()
            .filter_map(|(&key, e)| {
                let State::Admitted { leaving: false } = e.state else {
                    return None;
                };
                let excess = used(key).checked_sub(e.pod.requests.memory)?;
                (excess > 0).then_some((e.pod.priority, Reverse(excess), key))
            })
            .min()?;
        self.leaving(key);
        Some(key)
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
    /// for a pod that does not fit and may preempt.
    fn schedule(&mut self) -> Vec<Action> {
        let mut actions = Vec::new();
        // A pod admitted in a pass may be what an earlier pending pod's affinity waited for
        // (the scheduler requeues unschedulable pods when a pod is added): pass again then,
        // while a pass admitted a pod and refused one for its placement.
        while !self.pending.is_empty() && self.schedule_pass(&mut actions) {}
        actions
    }

    /// One pass over the pending pods; returns whether to pass again (a pod was admitted and
    /// one was refused for its placement).
    fn schedule_pass(&mut self, actions: &mut Vec<Action>) -> bool {
        let (mut any, mut unplaced) = (false, false);
        let pending: Vec<(Reverse<i32>, u64)> = self.pending.iter().copied().collect();
        // Room held for nominated pods while their victims stop: lower pods may not take it.
        let mut reserved = Usage::default();
        for (priority, key) in pending {
            let requests = self.entries[&key].pod.requests;
            let message = match self.verdict(key, reserved) {
                Verdict::Admit => {
                    self.pending.remove(&(priority, key));
                    self.used = self.used.plus(requests);
                    let entry = self.entries.get_mut(&key).expect("pending entry");
                    if entry.repels() {
                        self.repelling += 1;
                    }
                    entry.state = State::Admitted { leaving: false };
                    actions.push(Action::Admit(key));
                    any = true;
                    continue;
                }
                Verdict::Hold => {
                    reserved = reserved.plus(requests);
                    continue;
                }
                Verdict::Nominate(victims, message) => {
                    self.entries.get_mut(&key).expect("pending entry").state = State::Pending {
                        nominated: true,
                        message: Some(message.clone()),
                    };
                    actions.push(Action::Unschedulable {
                        key,
                        message,
                        nominated: true,
                    });
                    self.preempt(key, &victims, actions);
                    reserved = reserved.plus(requests);
                    continue;
                }
                Verdict::Wait(message) => message,
                Verdict::Unplaced(message) => {
                    unplaced = true;
                    message
                }
            };
            let entry = self.entries.get_mut(&key).expect("pending entry");
            if let State::Pending {
                nominated,
                message: said,
            } = &mut entry.state
            {
                *nominated = false;
                if said.as_deref() != Some(message.as_str()) {
                    *said = Some(message.clone());
                    actions.push(Action::Unschedulable {
                        key,
                        message,
                        nominated: false,
                    });
                }
            }
        }
        any && unplaced
    }

    /// What becomes of pending pod `key`, with `reserved` held for pods before it.
    fn verdict(&self, key: u64, reserved: Usage) -> Verdict {
        let entry = &self.entries[&key];
        if let Some(why) = &entry.pod.unselected {
            // The scheduler's NodeName and NodeAffinity filters come first; no preemption can
            // help them.
            return Verdict::Wait(format!(
                "0/1 nodes are available: 1 {why}. preemption: 0/1 nodes are available: 1 \
                 Preemption is not helpful for scheduling."
            ));
        }
        let lacking = self.shortfall(self.used.add(reserved), entry.pod.requests);
        if lacking.is_empty() {
            // The inter-pod filters, which come after the resource fit. wasmpod does not
            // preempt for them.
            return match self.placement_refusal(key) {
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
        match self.victims(key, reserved) {
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
    fn placement_refusal(&self, key: u64) -> Option<&'static str> {
        let pod = &self.entries[&key].pod.spec;
        if pod.scheduling().placement.is_empty() && self.repelling == 0 {
            return None;
        }
        let admitted: Vec<placement::Admitted<'_>> = self
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
    fn victims(&self, key: u64, reserved: Usage) -> Choice {
        let preemptor = &self.entries[&key].pod;
        let others: Vec<Occupant> = self
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
        select_victims(fits, self.used.add(reserved), preemptor.priority, &others)
    }

    /// Marks `victims` leaving and says why they are preempted.
    fn preempt(&mut self, preemptor: u64, victims: &[u64], actions: &mut Vec<Action>) {
        let by = &self.entries[&preemptor].pod.spec;
        let message = format!(
            "Preempted by pod {}/{} on node {}",
            by.namespace, by.name, self.node_name
        );
        for &key in victims {
            self.leaving(key);
            actions.push(Action::Preempt {
                key,
                message: message.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests;
