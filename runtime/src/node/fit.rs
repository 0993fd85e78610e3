//! Whether a pod can ever be on this node, in the scheduler's words: its `nodeName`,
//! `nodeSelector` and required node affinity against the node's labels, its tolerations
//! against the node's taints, its requests against what the node has.

use super::{Error, Node, scheduler};
use crate::PodSpec;

impl Node {
    /// Whether the pod could ever be admitted: `Err` says why not (another `nodeName`, a
    /// `nodeSelector` the node's labels do not match, or a request is larger than everything the node has; such a pod
    /// would stay Pending forever).
    pub fn check_fits(&self, spec: &PodSpec) -> Result<(), Error> {
        if let Some(why) = self.unselected(spec) {
            return Err(Error::NeverFits(format!(
                "0/1 nodes are available: 1 {why}: it can never be scheduled"
            )));
        }
        let has = self.scheduler.allocatable();
        let wants = spec.requests();
        if wants.memory > has.memory {
            return Err(Error::NeverFits(format!(
                "0/1 nodes are available: 1 Insufficient memory. The pod requests {} bytes and \
                 the node has {} allocatable: it can never be scheduled",
                wants.memory, has.memory
            )));
        }
        if wants.cpu_milli > has.cpu_milli {
            return Err(Error::NeverFits(format!(
                "0/1 nodes are available: 1 Insufficient cpu. The pod requests {}m and the node \
                 has {}m allocatable: it can never be scheduled",
                wants.cpu_milli, has.cpu_milli
            )));
        }
        if has.pods == 0 {
            return Err(Error::NeverFits(
                "the node admits no pods (allocatable pods is 0)".into(),
            ));
        }
        Ok(())
    }

    /// Why the node can never take the pod, in the scheduler's words: another `nodeName`, a
    /// `nodeSelector` or required node affinity its labels do not match, an untolerated taint.
    pub(super) fn unselected(&self, spec: &PodSpec) -> Option<String> {
        if spec
            .node_name
            .as_ref()
            .is_some_and(|n| *n != self.context.node_name)
        {
            return Some(scheduler::NOT_NAMED.into());
        }
        let labels = self.labels();
        let scheduling = spec.scheduling();
        let matches = scheduling
            .node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && scheduling.node_affinity.as_ref().is_none_or(|terms| {
                crate::spec::terms_match(terms, &labels, &self.context.node_name)
            });
        if !matches {
            return Some(scheduler::NOT_SELECTED.into());
        }
        let untolerated = self
            .taints
            .iter()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .find(|t| !scheduling.tolerations.iter().any(|tol| tolerates(tol, t)));
        if let Some(t) = untolerated {
            return Some(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                t.key,
                t.value.as_deref().unwrap_or_default()
            ));
        }
        // Extended resources (a GPU, hugepages): the node advertises none.
        if !scheduling.extended_resources.is_empty() {
            let lacking: Vec<String> = scheduling
                .extended_resources
                .iter()
                .map(|r| format!("Insufficient {r}"))
                .collect();
            return Some(lacking.join(", 1 "));
        }
        // A node without a spread constraint's key never has it.
        scheduling
            .placement
            .spread
            .iter()
            .any(|c| !labels.contains_key(&c.topology_key))
            .then(|| scheduler::SPREAD_LABEL.to_owned())
    }

    /// How long the pod may stay on the node given its tolerations of the node's `NoExecute`
    /// taints (the taint eviction controller's `getMinTolerationTime`): the least
    /// `tolerationSeconds` among the tolerations used (0 or less: at once), `None` for ever.
    pub(super) fn no_execute_limit(&self, spec: &PodSpec) -> Option<std::time::Duration> {
        self.taints
            .iter()
            .filter(|t| t.effect == "NoExecute")
            .filter_map(|t| {
                spec.scheduling()
                    .tolerations
                    .iter()
                    .find(|tol| tolerates(tol, t))
            })
            .filter_map(|tol| tol.toleration_seconds)
            .min()
            .map(|s| {
                std::time::Duration::from_secs(s.max(0).unsigned_abs())
                    .min(crate::spec::MAX_DURATION)
            })
    }
}

/// Whether a toleration matches a taint (the scheduler's `ToleratesTaint`): the same effect (or
/// any, when empty), and `Exists` with the same key (or any key, when empty) or `Equal` with the
/// same key and value.
fn tolerates(
    tol: &k8s_openapi::api::core::v1::Toleration,
    taint: &k8s_openapi::api::core::v1::Taint,
) -> bool {
    let effect = tol.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = tol.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match tol.operator.as_deref() {
        Some("Exists") => true,
        _ => tol.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Taint, Toleration};

    use super::tolerates;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: Some(value.into()),
            effect: effect.into(),
            ..Taint::default()
        }
    }

    fn toleration(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        Toleration {
            key: opt(key),
            operator: opt(operator),
            value: opt(value),
            effect: opt(effect),
            toleration_seconds: None,
        }
    }

    /// The scheduler's `ToleratesTaint`, as a table.
    #[test]
    fn tolerations_match_taints() {
        let t = taint("dedicated", "wasm", "NoSchedule");
        let rows = [
            (toleration("dedicated", "Equal", "wasm", "NoSchedule"), true),
            (toleration("dedicated", "", "wasm", "NoSchedule"), true),
            (toleration("dedicated", "Equal", "wasm", ""), true),
            (toleration("dedicated", "Exists", "", ""), true),
            (toleration("", "Exists", "", ""), true),
            (toleration("", "Exists", "", "NoSchedule"), true),
            (toleration("", "Exists", "", "NoExecute"), false),
            (toleration("dedicated", "Equal", "gpu", "NoSchedule"), false),
            (toleration("other", "Exists", "", ""), false),
            (
                toleration("dedicated", "Equal", "wasm", "PreferNoSchedule"),
                false,
            ),
        ];
        for (i, (tol, expected)) in rows.iter().enumerate() {
            assert_eq!(tolerates(tol, &t), *expected, "row {i}: {tol:?}");
        }
    }
}
