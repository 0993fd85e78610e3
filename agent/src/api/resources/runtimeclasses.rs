//! RuntimeClasses: a handler that is a DNS label and an overhead of cpu and memory; the node
//! admits pods of a class whose handler it serves, with the class's overhead counted.

use serde_json::{Value, json};

use super::{Column, Fields, RW, Resource, Strategy, created, dns_name, name};
use crate::kubelet::Kubelet;
use crate::object::Object;
use crate::status::ApiError;
use crate::store::Store;

pub(crate) static RUNTIME_CLASSES: Resource = Resource {
    name: "runtimeclasses",
    singular: "runtimeclass",
    kind: "RuntimeClass",
    group: "node.k8s.io",
    namespaced: false,
    short_names: &[],
    verbs: RW,
    subresources: &[],
    strategy: &RuntimeClasses,
};

struct RuntimeClasses;

impl Strategy for RuntimeClasses {
    fn prepare(&self, _store: &Store, name: &str, body: &mut Fields) -> Result<(), ApiError> {
        let bad = |field: &str, message: String| {
            ApiError::field_invalid(RUNTIME_CLASSES.kind, name, field, message)
        };
        let class: wasmpod::k8s_openapi::api::node::v1::RuntimeClass =
            serde_json::from_value(Value::Object(body.clone()))
                .map_err(|e| bad("handler", e.to_string()))?;
        dns_name(&class.handler, true).map_err(|message| bad("handler", message))?;
        // What the RuntimeClass admission copies into each pod of the class, and the node
        // counts with its requests (a quantity it cannot read is the pod's field error).
        for key in class
            .overhead
            .iter()
            .flat_map(|o| o.pod_fixed.iter().flatten())
            .map(|(k, _)| k)
        {
            if key != "cpu" && key != "memory" {
                return Err(bad(
                    &format!("overhead.podFixed.{key}"),
                    "Unsupported value: a wasm node counts an overhead of cpu and memory".into(),
                ));
            }
        }
        Ok(())
    }

    fn changed(&self, kubelet: &Kubelet) -> Result<(), ApiError> {
        kubelet.sync_runtime_classes();
        Ok(())
    }

    fn columns(&self) -> &'static [Column] {
        &[
            Column("Name", "string", 0),
            Column("Handler", "string", 0),
            Column("Age", "string", 0),
        ]
    }

    fn cells(&self, o: &Object, now: jiff::Timestamp) -> Vec<Value> {
        let handler = o.field("handler").unwrap_or(json!(""));
        vec![name(o), handler, created(o, now)]
    }
}
