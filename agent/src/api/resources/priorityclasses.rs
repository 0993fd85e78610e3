//! PriorityClasses: value, reserved names, one global default; the node resolves pods'
//! `priorityClassName` with them.

use serde_json::{Value, json};

use super::{Column, Fields, RW, Resource, Strategy, created, name};
use crate::kubelet::Kubelet;
use crate::object::Object;
use crate::status::ApiError;
use crate::store::Store;

pub(crate) static PRIORITY_CLASSES: Resource = Resource {
    name: "priorityclasses",
    singular: "priorityclass",
    kind: "PriorityClass",
    group: "scheduling.k8s.io",
    namespaced: false,
    short_names: &["pc"],
    verbs: RW,
    subresources: &[],
    strategy: &PriorityClasses,
};

struct PriorityClasses;

impl Strategy for PriorityClasses {
    fn prepare(&self, store: &Store, name: &str, body: &mut Fields) -> Result<(), ApiError> {
        let bad = |field: &str, message: String| {
            ApiError::field_invalid(PRIORITY_CLASSES.kind, name, field, message)
        };
        let class: wasmpod::k8s_openapi::api::scheduling::v1::PriorityClass =
            serde_json::from_value(Value::Object(body.clone()))
                .map_err(|e| bad("value", e.to_string()))?;
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
            if let Some(other) = all
                .iter()
                .find(|c| c.field("globalDefault") == Some(json!(true)) && c.name() != name)
            {
                return Err(bad(
                    "globalDefault",
                    format!(
                        "Invalid value: true: globalDefault {} already exists",
                        other.name()
                    ),
                ));
            }
        }
        body.entry("preemptionPolicy")
            .or_insert_with(|| json!("PreemptLowerPriority"));
        Ok(())
    }

    fn changed(&self, kubelet: &Kubelet) -> Result<(), ApiError> {
        kubelet.sync_priority_classes()
    }

    fn columns(&self) -> &'static [Column] {
        &[
            Column("Name", "string", 0),
            Column("Value", "integer", 0),
            Column("Global-Default", "boolean", 0),
            Column("Age", "string", 0),
        ]
    }

    fn cells(&self, object: &Object, now: jiff::Timestamp) -> Vec<Value> {
        let o = object.fields();
        let global = o.get("globalDefault").and_then(Value::as_bool);
        vec![
            name(object),
            o.get("value").cloned().unwrap_or(json!(0)),
            json!(global.unwrap_or(false)),
            created(object, now),
        ]
    }
}
