//! The scheduler's victim selection on one node, as a pure function of what the node holds.

use std::cmp::Reverse;

use super::usage::Usage;
use crate::spec::Requests;

/// What victim selection found.
pub(super) enum Choice {
    Victims(Vec<u64>),
    /// The pod fits once the pods already stopping have left.
    WaitForLeaving,
    None,
}

/// An admitted pod, as victim selection sees it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Occupant {
    pub(super) key: u64,
    pub(super) priority: i32,
    pub(super) requests: Requests,
    /// Stopping for good already: its room counts as free.
    pub(super) leaving: bool,
}

/// The scheduler's victim selection on one node. `used` is what the node's pods hold; `fits`
/// says whether the preemptor fits beside a usage. If the pods already leaving make room, wait
/// for them; else if removing every pod of lower priority makes it fit, remove them, then
/// reprieve as many as possible, most important first (higher priority, then older: a smaller
/// key); the rest are the victims.
pub(super) fn select_victims(
    fits: impl Fn(Usage) -> bool,
    used: Usage,
    priority: i32,
    others: &[Occupant],
) -> Choice {
    let mut base = used;
    let mut candidates = Vec::new();
    for o in others {
        if o.leaving {
            base = base.minus(o.requests);
        } else if o.priority < priority {
            candidates.push((Reverse(o.priority), o.key, o.requests));
        }
    }
    if fits(base) {
        return Choice::WaitForLeaving;
    }
    for (_, _, requests) in &candidates {
        base = base.minus(*requests);
    }
    if !fits(base) {
        return Choice::None;
    }
    candidates.sort_unstable_by_key(|&(p, k, _)| (p, k));
    let mut victims = Vec::new();
    for (_, k, requests) in candidates {
        let kept = base.plus(requests);
        if fits(kept) {
            base = kept;
        } else {
            victims.push(k);
        }
    }
    Choice::Victims(victims)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(key: u64, priority: i32, memory: u64) -> Occupant {
        Occupant {
            key,
            priority,
            requests: Requests {
                memory,
                cpu_milli: 0,
                containers: 1,
            },
            leaving: false,
        }
    }

    fn used(pods: &[Occupant]) -> Usage {
        pods.iter()
            .fold(Usage::default(), |u, p| u.plus(p.requests))
    }

    /// Victim selection as a table: a node of 1,000 bytes, a preemptor needing `need` at
    /// priority 100.
    #[test]
    fn victim_selection() {
        let fits = |need: u64| move |u: Usage| u.memory + need <= 1000;
        let choose =
            |need: u64, pods: &[Occupant]| select_victims(fits(need), used(pods), 100, pods);
        let victims = |c: Choice| match c {
            Choice::Victims(v) => Some(v),
            _ => None,
        };
        // The lowest priority pods that make room, reprieving the most important first.
        let pods = [pod(1, 1, 300), pod(2, 5, 300), pod(3, 10, 300)];
        assert_eq!(victims(choose(200, &pods)), Some(vec![1]));
        assert_eq!(victims(choose(500, &pods)), Some(vec![2, 1]));
        // Equal or higher priority is never a victim.
        let pods = [pod(1, 100, 600), pod(2, 200, 300)];
        assert!(matches!(choose(200, &pods), Choice::None));
        // Among equals, the older (smaller key) is reprieved first.
        let pods = [pod(1, 1, 400), pod(2, 1, 400)];
        assert_eq!(victims(choose(400, &pods)), Some(vec![2]));
        // Room that pods already leaving will free: wait for them, no new victims.
        let mut leaving = pod(1, 1, 600);
        leaving.leaving = true;
        assert!(matches!(
            choose(500, &[leaving, pod(2, 1, 300)]),
            Choice::WaitForLeaving
        ));
        // Not even every lower-priority pod is enough.
        assert!(matches!(
            choose(900, &[pod(1, 1, 100), pod(2, 500, 500)]),
            Choice::None
        ));
    }
}
