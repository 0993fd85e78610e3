//! Label selectors of pod terms and spread constraints, as the API server validates them, and
//! `matchLabelKeys`/`mismatchLabelKeys` merged into them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::spec::affinity::{check_qualified_name, is_name_part};
use crate::spec::errors::{FieldError, FieldPath};

/// A label selector's requirements, all of which a pod's labels must meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Selector(Vec<Requirement>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Selector {
    /// Whether `labels` meet every requirement (an empty selector matches every pod).
    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| {
            let value = labels.get(&r.key);
            match r.op {
                Op::In => value.is_some_and(|v| r.values.contains(v)),
                Op::NotIn => value.is_none_or(|v| !r.values.contains(v)),
                Op::Exists => value.is_some(),
                Op::DoesNotExist => value.is_none(),
            }
        })
    }
}

/// A `LabelSelector` as the API server validates it.
pub(super) fn selector(
    s: &LabelSelector,
    at: &FieldPath,
    errors: &mut Vec<FieldError>,
) -> Selector {
    let mut requirements = Vec::new();
    for (key, value) in s.match_labels.iter().flatten() {
        let kat = at.child("matchLabels");
        if let Err(why) = check_qualified_name(key) {
            errors.push(FieldError::invalid(kat.clone(), why));
        }
        if let Err(why) = check_label_value(value) {
            errors.push(FieldError::invalid(
                kat,
                format!("Invalid value: {value:?}: {why}"),
            ));
        }
        requirements.push(Requirement {
            key: key.clone(),
            op: Op::In,
            values: vec![value.clone()],
        });
    }
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        let eat = at.child("matchExpressions").index(i);
        if let Err(why) = check_qualified_name(&e.key) {
            errors.push(FieldError::invalid(eat.child("key"), why));
        }
        let values = e.values.clone().unwrap_or_default();
        let op = match e.operator.as_str() {
            "In" => Op::In,
            "NotIn" => Op::NotIn,
            "Exists" => Op::Exists,
            "DoesNotExist" => Op::DoesNotExist,
            other => {
                errors.push(FieldError::unsupported(
                    eat.child("operator"),
                    format!("Invalid value: {other:?}: not a valid selector operator"),
                ));
                continue;
            }
        };
        match op {
            Op::In | Op::NotIn if values.is_empty() => errors.push(FieldError::required(
                eat.child("values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            Op::Exists | Op::DoesNotExist if !values.is_empty() => {
                errors.push(FieldError::invalid(
                    eat.child("values"),
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                ))
            }
            _ => {}
        }
        requirements.push(Requirement {
            key: e.key.clone(),
            op,
            values,
        });
    }
    Selector(requirements)
}

/// A label value: empty, or at most 63 alphanumerics, '-', '_' or '.', starting and ending
/// alphanumeric.
pub(in crate::spec) fn check_label_value(v: &str) -> Result<(), &'static str> {
    if v.is_empty() || is_name_part(v) {
        Ok(())
    } else {
        Err(
            "a valid label value must be 63 characters or less, consist of alphanumerics, '-', \
             '_' or '.', and start and end with an alphanumeric",
        )
    }
}

/// `matchLabelKeys` (`negate`: `mismatchLabelKeys`): for each key the pod has, `key in (value)`
/// (`notin`) joins the selector.
pub(super) fn merge_label_keys(
    keys: &[String],
    negate: bool,
    written: Option<&LabelSelector>,
    selector: Option<&mut Selector>,
    labels: &BTreeMap<String, String>,
    at: &FieldPath,
    errors: &mut Vec<FieldError>,
) {
    if keys.is_empty() {
        return;
    }
    let Some(selector) = selector else {
        errors.push(FieldError::invalid(
            at,
            "must not be specified when labelSelector is not set",
        ));
        return;
    };
    for (i, key) in keys.iter().enumerate() {
        if let Err(why) = check_qualified_name(key) {
            errors.push(FieldError::invalid(at.index(i), why));
            continue;
        }
        if keys[..i].contains(key) {
            errors.push(FieldError::duplicate(
                at.index(i),
                format!("Duplicate value: {key:?}"),
            ));
            continue;
        }
        let in_selector = written.is_some_and(|s| {
            s.match_labels.as_ref().is_some_and(|m| m.contains_key(key))
                || s.match_expressions.iter().flatten().any(|e| e.key == *key)
        });
        if in_selector {
            errors.push(FieldError::invalid(
                at.index(i),
                format!("Invalid value: {key:?}: exists in both matchLabelKeys and labelSelector"),
            ));
            continue;
        }
        if let Some(value) = labels.get(key) {
            selector.0.push(Requirement {
                key: key.clone(),
                op: if negate { Op::NotIn } else { Op::In },
                values: vec![value.clone()],
            });
        }
    }
}
