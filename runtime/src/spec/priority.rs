//! `PriorityClass` objects given alongside pods (in a pod's YAML file or `--config` files). They
//! belong to the node, which resolves `spec.priorityClassName` with them at admission.

use std::path::Path;

use k8s_openapi::api::scheduling::v1::PriorityClass;
use serde_json::Value;

use super::load::read_bounded;
use super::yaml::documents;
use super::{FieldError, InvalidPod, check_subdomain};

/// The highest value a user's PriorityClass may have; higher ones are Kubernetes' own.
const HIGHEST_USER_PRIORITY: i32 = 1_000_000_000;

/// Whether a YAML document is a `scheduling.k8s.io/v1` PriorityClass.
pub(super) fn is_priority_class(doc: &Value) -> bool {
    doc.get("apiVersion").and_then(Value::as_str) == Some("scheduling.k8s.io/v1")
        && doc.get("kind").and_then(Value::as_str) == Some("PriorityClass")
}

/// Reads every `PriorityClass` document of a YAML file (other documents are skipped), checked as
/// the API server checks them: a DNS-1123 subdomain name, a value of at most 1,000,000,000, and a
/// `preemptionPolicy` of `PreemptLowerPriority` or `Never`.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let file = std::env::temp_dir().join(format!("classes-{}.yaml", std::process::id()));
/// std::fs::write(&file, "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\n\
///     metadata: {name: high}\nvalue: 1000\npreemptionPolicy: Never\n")?;
/// let classes = wasmpod::read_priority_classes(&file)?;
/// assert_eq!(classes[0].value, 1000);
/// # Ok(()) }
/// ```
pub fn read_priority_classes(path: &Path) -> Result<Vec<PriorityClass>, InvalidPod> {
    let in_file = |errors| InvalidPod {
        file: Some(path.to_owned()),
        errors,
    };
    let text = read_bounded(path).map_err(|e| in_file(vec![e]))?;
    let docs = documents(&text).map_err(|e| in_file(e.errors))?;
    let mut errors = Vec::new();
    let classes = classes(&docs, &mut errors);
    if errors.is_empty() {
        Ok(classes)
    } else {
        Err(in_file(errors))
    }
}

/// The `PriorityClass` documents among a file's `docs`, checked (see [`read_priority_classes`]).
pub(super) fn classes(docs: &[Value], errors: &mut Vec<FieldError>) -> Vec<PriorityClass> {
    let mut classes = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        if !is_priority_class(doc) {
            continue;
        }
        let at = format!("document {}", i + 1);
        let class: PriorityClass = match serde_path_to_error::deserialize(doc) {
            Ok(class) => class,
            Err(e) => {
                errors.push(FieldError::invalid(
                    format!("{at}.{}", e.path()),
                    e.into_inner().to_string(),
                ));
                continue;
            }
        };
        check(&class, &at, errors);
        classes.push(class);
    }
    classes
}

fn check(class: &PriorityClass, at: &str, errors: &mut Vec<FieldError>) {
    match class.metadata.name.as_deref() {
        None => errors.push(FieldError::required(
            format!("{at}.metadata.name"),
            "required value",
        )),
        Some(name) => {
            if let Err(why) = check_subdomain(name) {
                errors.push(FieldError::invalid(
                    format!("{at}.metadata.name"),
                    format!("invalid value {name:?}: {why}"),
                ));
            }
        }
    }
    if class.value > HIGHEST_USER_PRIORITY {
        errors.push(FieldError::invalid(
            format!("{at}.value"),
            format!(
                "invalid value {}: must be no greater than {HIGHEST_USER_PRIORITY}",
                class.value
            ),
        ));
    }
    if let Some(policy) = class.preemption_policy.as_deref()
        && !matches!(policy, "PreemptLowerPriority" | "Never")
    {
        errors.push(FieldError::unsupported(
            format!("{at}.preemptionPolicy"),
            format!(
                "unsupported value {policy:?}: supported values: \"Never\", \"PreemptLowerPriority\""
            ),
        ));
    }
}
