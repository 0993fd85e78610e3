//! `spec.affinity.nodeAffinity`: validated as the API server validates node selector terms, and
//! matched against the node as the scheduler's NodeAffinity filter does. On a node of its own,
//! `preferredDuringScheduling...` terms only score, so they are validated and have no effect.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as k8s;

use super::errors::{FieldError, FieldPath};
use super::names::check_subdomain;

/// A label key's name part, or a non-empty label value: at most 63 alphanumerics, '-', '_' or
/// '.', starting and ending alphanumeric.
pub(super) fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name of at most 63
/// alphanumerics, '-', '_' or '.', starting and ending alphanumeric.
pub(super) fn check_qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let name_ok = !name.is_empty() && is_name_part(name);
    let prefix_ok = prefix.is_none_or(|p| !p.is_empty() && check_subdomain(p).is_ok());
    if name_ok && prefix_ok {
        Ok(())
    } else {
        Err(format!(
            "Invalid value: {key:?}: name part must consist of alphanumeric characters, '-', '_' \
             or '.', and must start and end with an alphanumeric character (an optional prefix \
             is a DNS subdomain followed by '/')"
        ))
    }
}

fn check_requirement(
    r: &k8s::NodeSelectorRequirement,
    at: &FieldPath,
    field: bool,
    errors: &mut Vec<FieldError>,
) {
    let values = r.values.as_deref().unwrap_or_default();
    if field {
        if r.key != "metadata.name" {
            errors.push(FieldError::unsupported(
                at.child("key"),
                format!(
                    "Unsupported value: {:?}: supported values: \"metadata.name\"",
                    r.key
                ),
            ));
        }
        match r.operator.as_str() {
            "In" | "NotIn" if values.len() == 1 => {}
            "In" | "NotIn" => errors.push(FieldError::required(
                at.child("values"),
                "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
            )),
            other => errors.push(FieldError::unsupported(
                at.child("operator"),
                format!("Invalid value: {other:?}: not a valid selector operator"),
            )),
        }
        return;
    }
    if let Err(why) = check_qualified_name(&r.key) {
        errors.push(FieldError::invalid(at.child("key"), why));
    }
    match r.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => errors.push(FieldError::required(
            at.child("values"),
            "must be specified when `operator` is 'In' or 'NotIn'",
        )),
        "Exists" | "DoesNotExist" if !values.is_empty() => errors.push(FieldError::invalid(
            at.child("values"),
            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        )),
        "Gt" | "Lt" if values.len() != 1 || values[0].parse::<i64>().is_err() => {
            errors.push(FieldError::invalid(
                at.child("values"),
                "must be specified single value when `operator` is 'Lt' or 'Gt', an integer",
            ))
        }
        "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {}
        other => errors.push(FieldError::unsupported(
            at.child("operator"),
            format!("Invalid value: {other:?}: not a valid selector operator"),
        )),
    }
}

/// A preferred term's `weight`: 1 to 100, as the API server requires.
pub(super) fn check_weight(at: &FieldPath, weight: i32, errors: &mut Vec<FieldError>) {
    if !(1..=100).contains(&weight) {
        errors.push(FieldError::invalid(
            at,
            format!("Invalid value: {weight}: must be in the range 1-100"),
        ));
    }
}

fn check_term(term: &k8s::NodeSelectorTerm, at: &FieldPath, errors: &mut Vec<FieldError>) {
    for (j, r) in term.match_expressions.iter().flatten().enumerate() {
        check_requirement(r, &at.child("matchExpressions").index(j), false, errors);
    }
    for (j, r) in term.match_fields.iter().flatten().enumerate() {
        check_requirement(r, &at.child("matchFields").index(j), true, errors);
    }
}

/// Checks `spec.affinity`; returns the required node selector terms (`None`: no requirement).
pub(super) fn check_affinity(
    affinity: Option<&k8s::Affinity>,
    errors: &mut Vec<FieldError>,
) -> Option<Vec<k8s::NodeSelectorTerm>> {
    let node = affinity?.node_affinity.as_ref()?;
    let at = FieldPath::new("spec")
        .child("affinity")
        .child("nodeAffinity");
    let preferred = at.child("preferredDuringSchedulingIgnoredDuringExecution");
    for (i, p) in node
        .preferred_during_scheduling_ignored_during_execution
        .iter()
        .flatten()
        .enumerate()
    {
        check_weight(&preferred.index(i).child("weight"), p.weight, errors);
        check_term(
            &p.preference,
            &preferred.index(i).child("preference"),
            errors,
        );
    }
    let required = node
        .required_during_scheduling_ignored_during_execution
        .as_ref()?;
    let terms_at = at
        .child("requiredDuringSchedulingIgnoredDuringExecution")
        .child("nodeSelectorTerms");
    if required.node_selector_terms.is_empty() {
        errors.push(FieldError::required(
            terms_at.clone(),
            "Required value: must have at least one node selector term",
        ));
    }
    for (i, term) in required.node_selector_terms.iter().enumerate() {
        check_term(term, &terms_at.index(i), errors);
    }
    Some(required.node_selector_terms.clone())
}

fn requirement_matches(r: &k8s::NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let compare = |want: std::cmp::Ordering| {
        let (Some(have), Some(bound)) = (value, values.first()) else {
            return false;
        };
        match (have.parse::<i64>(), bound.parse::<i64>()) {
            (Ok(h), Ok(b)) => h.cmp(&b) == want,
            _ => false,
        }
    };
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => compare(std::cmp::Ordering::Greater),
        "Lt" => compare(std::cmp::Ordering::Less),
        _ => false,
    }
}

/// Whether a node with `labels` and `name` satisfies any of `terms` (an empty term matches no
/// node), as the scheduler's NodeAffinity filter decides.
pub(crate) fn terms_match(
    terms: &[k8s::NodeSelectorTerm],
    labels: &BTreeMap<String, String>,
    name: &str,
) -> bool {
    terms.iter().any(|t| {
        let expressions = t.match_expressions.as_deref().unwrap_or_default();
        let fields = t.match_fields.as_deref().unwrap_or_default();
        (!expressions.is_empty() || !fields.is_empty())
            && expressions
                .iter()
                .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
            && fields.iter().all(|r| requirement_matches(r, Some(name)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requirement(key: &str, op: &str, values: &[&str]) -> k8s::NodeSelectorRequirement {
        k8s::NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn term(expressions: Vec<k8s::NodeSelectorRequirement>) -> k8s::NodeSelectorTerm {
        k8s::NodeSelectorTerm {
            match_expressions: Some(expressions),
            match_fields: None,
        }
    }

    #[test]
    fn node_selector_terms_match_as_the_scheduler_does() {
        let labels: BTreeMap<String, String> = [
            ("kubernetes.io/arch", "amd64"),
            ("zone", "a"),
            ("cores", "8"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let r = requirement;
        let rows: &[(Vec<k8s::NodeSelectorTerm>, bool)] = &[
            (vec![term(vec![r("zone", "In", &["a", "b"])])], true),
            (vec![term(vec![r("zone", "NotIn", &["a"])])], false),
            (vec![term(vec![r("gpu", "NotIn", &["x"])])], true),
            (vec![term(vec![r("zone", "Exists", &[])])], true),
            (vec![term(vec![r("gpu", "DoesNotExist", &[])])], true),
            (vec![term(vec![r("cores", "Gt", &["4"])])], true),
            (vec![term(vec![r("cores", "Lt", &["4"])])], false),
            (vec![term(vec![r("zone", "Gt", &["4"])])], false),
            // Within a term: all; across terms: any.
            (
                vec![term(vec![r("zone", "In", &["a"]), r("gpu", "Exists", &[])])],
                false,
            ),
            (
                vec![
                    term(vec![r("gpu", "Exists", &[])]),
                    term(vec![r("zone", "In", &["a"])]),
                ],
                true,
            ),
            // An empty term matches no node.
            (vec![term(vec![])], false),
        ];
        for (i, (terms, want)) in rows.iter().enumerate() {
            assert_eq!(terms_match(terms, &labels, "edge-1"), *want, "row {i}");
        }
        let by_name = k8s::NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![requirement("metadata.name", "In", &["edge-1"])]),
        };
        assert!(terms_match(
            std::slice::from_ref(&by_name),
            &labels,
            "edge-1"
        ));
        assert!(!terms_match(&[by_name], &labels, "edge-2"));
    }

    #[test]
    fn label_keys_are_qualified_names() {
        for good in ["zone", "kubernetes.io/arch", "a.b/c-d_e.f", "x"] {
            assert!(check_qualified_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-zone",
            "zone-",
            "Ex ample",
            "/x",
            "UPPER.io/x",
            &"x".repeat(64),
        ] {
            assert!(check_qualified_name(bad).is_err(), "{bad}");
        }
    }
}
