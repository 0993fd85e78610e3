//! ConfigMaps: their keys checked as the API server checks them.

use serde_json::{Value, json};

use super::{Column, RW, Resource, Strategy, age, check_keys, count, name};
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
    fn prepare(&self, _store: &Store, name: &str, body: &mut Value) -> Result<(), ApiError> {
        let bad = |field: &str, message: String| {
            ApiError::field_invalid(CONFIG_MAPS.kind, name, field, message)
        };
        serde_json::from_value::<wasmpod::k8s_openapi::api::core::v1::ConfigMap>(body.clone())
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

    fn cells(&self, o: &Value, now: jiff::Timestamp) -> Vec<Value> {
        let data = count(o, "data") + count(o, "binaryData");
        vec![
            name(o),
            json!(data),
            age(o, "/metadata/creationTimestamp", now),
        ]
    }
}
