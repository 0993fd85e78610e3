//! What the API server checks and completes in the objects beside pods: ConfigMaps and
//! Secrets (their keys; a Secret's `stringData` written into `data`), Namespaces, and
//! PriorityClasses (value, reserved names, one global default).

use serde_json::{Value, json};

use super::objects::invalid;
use super::resources::Resource;
use crate::status::ApiError;
use crate::store::Store;

/// Checks and completes a ConfigMap, Secret, Namespace or PriorityClass as the API server would.
pub(super) fn check_object(
    store: &Store,
    resource: &Resource,
    name: &str,
    body: &mut Value,
) -> Result<(), ApiError> {
    let bad = |field: &str, message: String| invalid(resource.kind, name, field, message);
    // The keys of a data map, checked as the API server checks config keys.
    let check_keys = |body: &Value, field: &str| {
        let keys = body
            .get(field)
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.keys());
        for k in keys {
            let ok = !k.is_empty()
                && k.len() <= 253
                && k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
                && k != "."
                && k != "..";
            if !ok {
                return Err(bad(
                    &format!("{field}[{k}]"),
                    format!(
                        "Invalid value: {k:?}: a valid config key must consist of alphanumeric \
                         characters, '-', '_' or '.'"
                    ),
                ));
            }
        }
        Ok(())
    };
    match resource.name {
        "configmaps" => {
            serde_json::from_value::<wasmpod::k8s_openapi::api::core::v1::ConfigMap>(body.clone())
                .map_err(|e| bad("", e.to_string()))?;
            check_keys(body, "data")?;
            check_keys(body, "binaryData")?;
        }
        "secrets" => {
            // stringData is written into data, as the API server does.
            if let Some(strings) = body.get("stringData").and_then(Value::as_object).cloned() {
                use base64::Engine as _;
                if !body.get("data").is_some_and(Value::is_object) {
                    body["data"] = json!({});
                }
                for (k, v) in strings {
                    let v = v.as_str().ok_or_else(|| {
                        bad(&format!("stringData[{k}]"), "must be a string".into())
                    })?;
                    body["data"][k] = json!(base64::engine::general_purpose::STANDARD.encode(v));
                }
                if let Some(o) = body.as_object_mut() {
                    o.remove("stringData");
                }
            }
            if body.get("type").is_none_or(|t| t == "") {
                body["type"] = json!("Opaque");
            }
            serde_json::from_value::<wasmpod::k8s_openapi::api::core::v1::Secret>(body.clone())
                .map_err(|e| bad("data", e.to_string()))?;
            check_keys(body, "data")?;
        }
        "namespaces" => {
            body["status"] = json!({"phase": "Active"});
        }
        "serviceaccounts" => {
            serde_json::from_value::<wasmpod::k8s_openapi::api::core::v1::ServiceAccount>(
                body.clone(),
            )
            .map_err(|e| bad("", e.to_string()))?;
        }
        "priorityclasses" => {
            let class: wasmpod::k8s_openapi::api::scheduling::v1::PriorityClass =
                serde_json::from_value(body.clone()).map_err(|e| bad("value", e.to_string()))?;
            if class.value > 1_000_000_000 {
                return Err(bad(
                    "value",
                    format!(
                        "Invalid value: {}: must be no greater than 1000000000",
                        class.value
                    ),
                ));
            }
            if name.starts_with("system-") {
                return Err(bad(
                    "metadata.name",
                    format!(
                        "Invalid value: {name:?}: priority class names with 'system-' prefix are reserved"
                    ),
                ));
            }
            if let Some(p) = &class.preemption_policy
                && !matches!(p.as_str(), "Never" | "PreemptLowerPriority")
            {
                return Err(bad(
                    "preemptionPolicy",
                    format!(
                        "Unsupported value: {p:?}: supported values: \"Never\", \"PreemptLowerPriority\""
                    ),
                ));
            }
            if class.global_default == Some(true) {
                let (_, all) = store.list("priorityclasses", None);
                if let Some(other) = all.iter().find(|c| {
                    c["globalDefault"] == true
                        && c.pointer("/metadata/name").and_then(Value::as_str) != Some(name)
                }) {
                    return Err(bad(
                        "globalDefault",
                        format!(
                            "Invalid value: true: globalDefault {} already exists",
                            other
                                .pointer("/metadata/name")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                        ),
                    ));
                }
            }
            if body.get("preemptionPolicy").is_none() {
                body["preemptionPolicy"] = json!("PreemptLowerPriority");
            }
        }
        "runtimeclasses" => {
            let class: wasmpod::k8s_openapi::api::node::v1::RuntimeClass =
                serde_json::from_value(body.clone()).map_err(|e| bad("handler", e.to_string()))?;
            let h = &class.handler;
            let label = !h.is_empty()
                && h.len() <= 63
                && h.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !h.starts_with('-')
                && !h.ends_with('-');
            if !label {
                return Err(bad(
                    "handler",
                    format!(
                        "Invalid value: {h:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
                    ),
                ));
            }
            // The RuntimeClass admission adds the overhead to every pod of the class; the
            // node's admission does not count it.
            if class.overhead.is_some() {
                return Err(bad(
                    "overhead",
                    "Forbidden: not supported by wasmpod: a pod's overhead is not counted by this \
                     node; leave it out"
                        .into(),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}
