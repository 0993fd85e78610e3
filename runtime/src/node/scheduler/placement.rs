//! The scheduler's PodTopologySpread and InterPodAffinity filters, for a cluster of this one
//! node: a pod's topology spread constraints, pod affinity and anti-affinity, and the
//! anti-affinity of the pods already admitted, evaluated against those pods.
//!
//! With one node there is one topology domain per key, the node's own (when it has the key), so:
//! - a spread constraint counts the admitted, not terminating, pods of the pod's namespace its
//!   selector matches; the skew is that count, plus one if the pod matches itself, minus the
//!   global minimum, which is that same count unless `minDomains` asks for more domains than
//!   the one there is, when it is 0;
//! - a node that `nodeAffinityPolicy`/`nodeTaintsPolicy` would leave out of the count is one the
//!   pod's own node affinity or taint filter already refused;
//! - pod affinity needs a matching pod on the node (with the key), except for the first pod of
//!   a group: when no pod matches any term and the pod matches all of its own terms.

use std::collections::BTreeMap;

use crate::spec::PodSpec;

/// The scheduler's reasons, as it words them.
const SPREAD: &str = "node(s) didn't match pod topology spread constraints";
pub(crate) const SPREAD_LABEL: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";
const AFFINITY: &str = "node(s) didn't match pod affinity rules";
const ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
const EXISTING_ANTI_AFFINITY: &str = "node(s) didn't satisfy existing pods anti-affinity rules";

/// A pod admitted to the node, as the filters see it.
pub(super) struct Admitted<'a> {
    pub spec: &'a PodSpec,
    /// Stopping for good (the scheduler's `deletionTimestamp`).
    pub leaving: bool,
}

/// Why `pod` may not join `admitted` on a node with `node_labels`, or `None`.
pub(super) fn refusal(
    pod: &PodSpec,
    admitted: &[Admitted<'_>],
    node_labels: &BTreeMap<String, String>,
) -> Option<&'static str> {
    let (namespace, labels) = (pod.namespace.as_str(), &pod.labels);
    for c in &pod.scheduling().placement.spread {
        if !node_labels.contains_key(&c.topology_key) {
            return Some(SPREAD_LABEL);
        }
        let Some(selector) = &c.selector else {
            continue;
        };
        let matching = admitted
            .iter()
            .filter(|a| {
                !a.leaving && a.spec.namespace == namespace && selector.matches(&a.spec.labels)
            })
            .count() as u64;
        let own = u64::from(selector.matches(labels));
        let min = if c.min_domains > 1 { 0 } else { matching };
        if (matching + own).saturating_sub(min) > u64::from(c.max_skew) {
            return Some(SPREAD);
        }
    }
    let on_node = |t: &crate::spec::PodTerm| node_labels.contains_key(&t.topology_key);
    let any_match = |t: &crate::spec::PodTerm| {
        admitted
            .iter()
            .any(|a| t.matches(&a.spec.namespace, &a.spec.labels))
    };
    let affinity = &pod.scheduling().placement.affinity;
    if !affinity.iter().all(|t| on_node(t) && any_match(t)) {
        let first_of_group = !affinity.iter().any(|t| on_node(t) && any_match(t))
            && affinity.iter().all(|t| t.matches(namespace, labels));
        if !first_of_group {
            return Some(AFFINITY);
        }
    }
    if pod
        .scheduling()
        .placement
        .anti_affinity
        .iter()
        .any(|t| on_node(t) && any_match(t))
    {
        return Some(ANTI_AFFINITY);
    }
    let repelled = admitted.iter().any(|a| {
        a.spec
            .scheduling()
            .placement
            .anti_affinity
            .iter()
            .any(|t| on_node(t) && t.matches(namespace, labels))
    });
    repelled.then_some(EXISTING_ANTI_AFFINITY)
}
