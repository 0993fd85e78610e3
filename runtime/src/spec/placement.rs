//! Where a pod may run relative to other pods: `affinity.podAffinity`, `podAntiAffinity` and
//! `topologySpreadConstraints`, validated as the API server validates them into a [`Placement`]
//! that the node's admission evaluates against the pods it runs (as the scheduler's
//! InterPodAffinity and PodTopologySpread filters do for a cluster of this one node).
//!
//! Only what filters is kept: `preferred...` terms and `ScheduleAnyway` constraints only score
//! nodes, and a node of its own has nothing to rank, so they are validated and have no effect.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as k8s;

use super::affinity::{check_qualified_name, check_weight};
use super::errors::{FieldError, FieldPath};
use super::names::check_label;

mod selector;

pub(crate) use selector::Selector;
pub(super) use selector::check_label_value;
use selector::{merge_label_keys, selector};

/// The namespaces a term looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Namespaces {
    /// These (the pod's own when the term names none).
    Listed(Vec<String>),
    /// Every namespace (`namespaceSelector: {}`).
    All,
    /// These, and those a `namespaceSelector` on the `kubernetes.io/metadata.name` label (which
    /// every namespace has) selects.
    Selected(Vec<String>, Selector),
}

/// The label Kubernetes gives every namespace: its name.
const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";

impl Namespaces {
    pub(crate) fn contains(&self, namespace: &str) -> bool {
        match self {
            Namespaces::Listed(list) => list.iter().any(|n| n == namespace),
            Namespaces::All => true,
            Namespaces::Selected(list, selector) => {
                list.iter().any(|n| n == namespace)
                    || selector.matches(&BTreeMap::from([(
                        NAMESPACE_NAME.to_owned(),
                        namespace.to_owned(),
                    )]))
            }
        }
    }
}

/// A required pod (anti-)affinity term, with `matchLabelKeys`/`mismatchLabelKeys` merged into
/// its selector from the pod's own labels (as the API server merges them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodTerm {
    /// `None`: no `labelSelector`, which matches no pod.
    pub selector: Option<Selector>,
    pub namespaces: Namespaces,
    pub topology_key: String,
}

impl PodTerm {
    /// Whether a pod of `namespace` with `labels` is one the term is about.
    pub(crate) fn matches(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.namespaces.contains(namespace)
            && self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }
}

/// A `whenUnsatisfiable: DoNotSchedule` topology spread constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Spread {
    pub max_skew: u32,
    /// `minDomains` (1 when unset).
    pub min_domains: u32,
    pub topology_key: String,
    /// With `matchLabelKeys` merged in; `None` matches no pod.
    pub selector: Option<Selector>,
}

/// The constraints on a pod's placement that depend on the node's other pods.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Placement {
    pub affinity: Vec<PodTerm>,
    pub anti_affinity: Vec<PodTerm>,
    pub spread: Vec<Spread>,
}

impl Placement {
    /// No constraint.
    pub(crate) const NONE: Placement = Placement {
        affinity: Vec::new(),
        anti_affinity: Vec::new(),
        spread: Vec::new(),
    };

    pub(crate) fn is_empty(&self) -> bool {
        self.affinity.is_empty() && self.anti_affinity.is_empty() && self.spread.is_empty()
    }
}

/// Checks `spec.affinity.podAffinity`, `podAntiAffinity` and `spec.topologySpreadConstraints`
/// of a pod of `namespace` with `labels`.
pub(super) fn check(
    spec: &k8s::PodSpec,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    errors: &mut Vec<FieldError>,
) -> Placement {
    let at = FieldPath::new("spec").child("affinity");
    let affinity = spec.affinity.as_ref();
    let pod_affinity = affinity.and_then(|a| a.pod_affinity.as_ref());
    let anti = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
    let terms = |required: Option<&Vec<k8s::PodAffinityTerm>>,
                 preferred: Option<&Vec<k8s::WeightedPodAffinityTerm>>,
                 at: FieldPath,
                 errors: &mut Vec<FieldError>| {
        let pat = at.child("preferredDuringSchedulingIgnoredDuringExecution");
        for (i, w) in preferred.into_iter().flatten().enumerate() {
            check_weight(&pat.index(i).child("weight"), w.weight, errors);
            pod_term(
                &w.pod_affinity_term,
                &pat.index(i).child("podAffinityTerm"),
                namespace,
                labels,
                errors,
            );
        }
        let rat = at.child("requiredDuringSchedulingIgnoredDuringExecution");
        too_many(&rat, required.map_or(0, Vec::len), errors);
        too_many(&pat, preferred.map_or(0, Vec::len), errors);
        required
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, t)| pod_term(t, &rat.index(i), namespace, labels, errors))
            .collect::<Vec<_>>()
    };
    let affinity_terms = terms(
        pod_affinity.and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        }),
        pod_affinity.and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        }),
        at.child("podAffinity"),
        errors,
    );
    let anti_terms = terms(
        anti.and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        }),
        anti.and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        }),
        at.child("podAntiAffinity"),
        errors,
    );
    Placement {
        affinity: affinity_terms,
        anti_affinity: anti_terms,
        spread: spread_constraints(
            spec.topology_spread_constraints
                .as_deref()
                .unwrap_or_default(),
            labels,
            errors,
        ),
    }
}

fn pod_term(
    term: &k8s::PodAffinityTerm,
    at: &FieldPath,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    errors: &mut Vec<FieldError>,
) -> Option<PodTerm> {
    let before = errors.len();
    topology_key(&term.topology_key, &at.child("topologyKey"), errors);
    let mut selector = term
        .label_selector
        .as_ref()
        .map(|s| selector(s, &at.child("labelSelector"), errors));
    for (field, negate, keys) in [
        ("matchLabelKeys", false, &term.match_label_keys),
        ("mismatchLabelKeys", true, &term.mismatch_label_keys),
    ] {
        merge_label_keys(
            keys.as_deref().unwrap_or_default(),
            negate,
            term.label_selector.as_ref(),
            selector.as_mut(),
            labels,
            &at.child(field),
            errors,
        );
    }
    let mut listed = Vec::new();
    for (i, ns) in term.namespaces.iter().flatten().enumerate() {
        if let Err(why) = check_label(ns) {
            errors.push(FieldError::invalid(
                at.child("namespaces").index(i),
                format!("Invalid value: {ns:?}: {why}"),
            ));
        }
        listed.push(ns.clone());
    }
    let namespaces = match &term.namespace_selector {
        Some(s)
            if s.match_labels.as_ref().is_none_or(|m| m.is_empty())
                && s.match_expressions.as_ref().is_none_or(|e| e.is_empty()) =>
        {
            Namespaces::All
        }
        Some(s) => {
            let sat = at.child("namespaceSelector");
            let keys = s
                .match_labels
                .iter()
                .flatten()
                .map(|(k, _)| k)
                .chain(s.match_expressions.iter().flatten().map(|e| &e.key));
            for key in keys {
                if key != NAMESPACE_NAME {
                    errors.push(FieldError::not_supported(
                        sat.clone(),
                        format!(
                            "not supported by wasmpod: {key:?}: the node knows a namespace by its \
                             {NAMESPACE_NAME} label only; select on it, list the namespaces in \
                             `namespaces`, or use {{}} for every namespace"
                        ),
                    ));
                }
            }
            Namespaces::Selected(listed, self::selector(s, &sat, errors))
        }
        None if listed.is_empty() => Namespaces::Listed(vec![namespace.to_owned()]),
        None => Namespaces::Listed(listed),
    };
    (errors.len() == before).then(|| PodTerm {
        selector,
        namespaces,
        topology_key: term.topology_key.clone(),
    })
}

/// The most terms or constraints of one kind a pod may have: each is evaluated against every pod
/// of the node whenever the node admits a pod, so their number is bounded (Kubernetes sets no
/// bound; real manifests have a handful).
const MAX_TERMS: usize = 64;

fn too_many(at: &FieldPath, n: usize, errors: &mut Vec<FieldError>) {
    if n > MAX_TERMS {
        errors.push(FieldError::too_large(
            at,
            format!("Too many: {n}: must have at most {MAX_TERMS} items"),
        ));
    }
}

fn topology_key(key: &str, at: &FieldPath, errors: &mut Vec<FieldError>) {
    if key.is_empty() {
        errors.push(FieldError::required(at, "Required value: can not be empty"));
    } else if let Err(why) = check_qualified_name(key) {
        errors.push(FieldError::invalid(at, why));
    }
}

fn spread_constraints(
    list: &[k8s::TopologySpreadConstraint],
    labels: &BTreeMap<String, String>,
    errors: &mut Vec<FieldError>,
) -> Vec<Spread> {
    let at = FieldPath::new("spec").child("topologySpreadConstraints");
    too_many(&at, list.len(), errors);
    let mut kept = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (i, c) in list.iter().enumerate() {
        let at = at.index(i);
        let before = errors.len();
        if c.max_skew <= 0 {
            errors.push(FieldError::invalid(
                at.child("maxSkew"),
                format!("Invalid value: {}: must be greater than zero", c.max_skew),
            ));
        }
        topology_key(&c.topology_key, &at.child("topologyKey"), errors);
        let when = c.when_unsatisfiable.as_str();
        if !matches!(when, "DoNotSchedule" | "ScheduleAnyway") {
            errors.push(FieldError::unsupported(
                at.child("whenUnsatisfiable"),
                format!(
                    "Unsupported value: {when:?}: supported values: \"DoNotSchedule\", \
                     \"ScheduleAnyway\""
                ),
            ));
        }
        if seen.contains(&(c.topology_key.as_str(), when)) {
            errors.push(FieldError::duplicate(
                at.child("{topologyKey, whenUnsatisfiable}"),
                format!("Duplicate value: \"{{{}, {when}}}\"", c.topology_key),
            ));
        }
        seen.push((&c.topology_key, when));
        match c.min_domains {
            Some(n) if n <= 0 => errors.push(FieldError::invalid(
                at.child("minDomains"),
                format!("Invalid value: {n}: must be greater than zero"),
            )),
            Some(n) if when != "DoNotSchedule" => errors.push(FieldError::invalid(
                at.child("minDomains"),
                format!(
                    "Invalid value: {n}: can only use minDomains if \
                     whenUnsatisfiable=DoNotSchedule, not {when}"
                ),
            )),
            _ => {}
        }
        for (field, policy) in [
            ("nodeAffinityPolicy", &c.node_affinity_policy),
            ("nodeTaintsPolicy", &c.node_taints_policy),
        ] {
            if let Some(p) = policy.as_deref()
                && !matches!(p, "Honor" | "Ignore")
            {
                errors.push(FieldError::unsupported(
                    at.child(field),
                    format!("Unsupported value: {p:?}: supported values: \"Honor\", \"Ignore\""),
                ));
            }
        }
        let mut sel = c
            .label_selector
            .as_ref()
            .map(|s| selector(s, &at.child("labelSelector"), errors));
        merge_label_keys(
            c.match_label_keys.as_deref().unwrap_or_default(),
            false,
            c.label_selector.as_ref(),
            sel.as_mut(),
            labels,
            &at.child("matchLabelKeys"),
            errors,
        );
        if errors.len() == before && when == "DoNotSchedule" {
            kept.push(Spread {
                max_skew: c.max_skew.unsigned_abs(),
                min_domains: c.min_domains.map_or(1, i32::unsigned_abs),
                topology_key: c.topology_key.clone(),
                selector: sel,
            });
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn from_yaml(yaml: &str) -> k8s::PodSpec {
        let doc = super::super::yaml::documents(yaml).expect("YAML").remove(0);
        serde_json::from_value(doc).expect("pod spec")
    }

    fn parse(yaml: &str) -> (Placement, Vec<FieldError>) {
        let spec: k8s::PodSpec = from_yaml(yaml);
        let mut errors = Vec::new();
        let own = labels(&[("app", "web"), ("rev", "7")]);
        (check(&spec, "default", &own, &mut errors), errors)
    }

    #[test]
    fn selectors_match_as_label_selectors_do() {
        let (p, errors) = parse(
            "containers: []\n\
             affinity:\n  podAntiAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n\
             \x20   - topologyKey: kubernetes.io/hostname\n      matchLabelKeys: [rev]\n\
             \x20     labelSelector:\n        matchLabels: {app: web}\n\
             \x20       matchExpressions:\n        - {key: tier, operator: NotIn, values: [db]}\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        let term = &p.anti_affinity[0];
        assert_eq!(term.namespaces, Namespaces::Listed(vec!["default".into()]));
        assert!(term.matches("default", &labels(&[("app", "web"), ("rev", "7")])));
        // matchLabelKeys took the pod's own `rev`.
        assert!(!term.matches("default", &labels(&[("app", "web"), ("rev", "6")])));
        assert!(!term.matches(
            "default",
            &labels(&[("app", "web"), ("rev", "7"), ("tier", "db")])
        ));
        assert!(!term.matches("other", &labels(&[("app", "web"), ("rev", "7")])));
    }

    #[test]
    fn bad_terms_and_constraints_name_their_fields() {
        let (p, errors) = parse(
            "containers: []\n\
             affinity:\n  podAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n\
             \x20   - topologyKey: ''\n      namespaceSelector: {matchLabels: {team: a}}\n\
             topologySpreadConstraints:\n\
             - {maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}\n\
             - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway, minDomains: 2}\n\
             - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Always}\n",
        );
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
                "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaceSelector",
                "spec.topologySpreadConstraints[0].maxSkew",
                "spec.topologySpreadConstraints[1].minDomains",
                "spec.topologySpreadConstraints[2].{topologyKey, whenUnsatisfiable}",
                "spec.topologySpreadConstraints[2].nodeTaintsPolicy",
            ]
        );
        assert!(p.is_empty());
    }

    #[test]
    fn the_number_of_terms_is_bounded() {
        let term = "{ topologyKey: zone, labelSelector: { matchLabels: { app: web } } }, ";
        let yaml = format!(
            "containers: []\naffinity:\n  podAntiAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution: [ {} ]\n",
            term.repeat(65)
        );
        let spec: k8s::PodSpec = from_yaml(&yaml);
        let mut errors = Vec::new();
        check(&spec, "default", &labels(&[]), &mut errors);
        assert_eq!(
            errors[0].path,
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        );
        assert!(errors[0].message.contains("at most 64"));
    }

    #[test]
    fn namespaces_are_selected_by_their_name_label() {
        let (p, errors) = parse(
            "containers: []\n\
             affinity:\n  podAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n\
             \x20   - topologyKey: zone\n      namespaces: [listed]\n\
             \x20     labelSelector: { matchLabels: { app: web } }\n\
             \x20     namespaceSelector:\n        matchExpressions:\n\
             \x20       - { key: kubernetes.io/metadata.name, operator: In, values: [a, b] }\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        let web = labels(&[("app", "web")]);
        let term = &p.affinity[0];
        for (ns, want) in [
            ("a", true),
            ("b", true),
            ("listed", true),
            ("default", false),
        ] {
            assert_eq!(term.matches(ns, &web), want, "{ns}");
        }
    }
}
