//! ConfigMaps: their keys checked as the API server checks them.

use serde_json::{Value, json};

use super::{Column, Fields, RW, Resource, Strategy, check_keys, count, created, name};
use crate::kubelet::Kubelet;
use crate::object::Object;
use crate::status::ApiError;
use crate::store::Store;

pub(crate) static CONFIG_MAPS: Resource = Resource {
    name: "configmaps",
    singular: "configmap",
    kind: "ConfigMap",
    group: "",
    namespaced: true,
    short_names: &["cm"],
    verbs: RW,
    subresources: &[],
    strategy: &ConfigMaps,
};

struct ConfigMaps;

impl Strategy for ConfigMaps {
    /// A deleted `kube-root-ca.crt` is published again.
    fn changed(&self, kubelet: &Kubelet) -> Result<(), ApiError> {
        kubelet.publish_root_ca()
    }

    fn prepare(&self, _store: &Store, name: &str, body: &mut Fields) -> Result<(), ApiError> {
        let bad = |field: &str, message: String| {
            ApiError::field_invalid(CONFIG_MAPS.kind, name, field, message)
        };
        serde_json::from_value::<wasmpod::k8s_openapi::api::core::v1::ConfigMap>(Value::Object(
            body.clone(),
        ))
        .map_err(|e| bad("", e.to_string()))?;
        check_keys(CONFIG_MAPS.kind, name, body, "data")?;
        check_keys(CONFIG_MAPS.kind, name, body, "binaryData")?;
        Ok(())
    }

    fn columns(&self) -> &'static [Column] {
        &[
            Column("Name", "string", 0),
            Column("Data", "integer", 0),
            Column("Age", "string", 0),
        ]
    }

    fn cells(&self, o: &Object, now: jiff::Timestamp) -> Vec<Value> {
        let fields = o.fields();
        let data = count(&fields, "data") + count(&fields, "binaryData");
        vec![name(o), json!(data), created(o, now)]
    }
}
