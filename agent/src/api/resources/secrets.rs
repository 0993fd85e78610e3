//! Secrets: `stringData` written into `data`, the type defaulted to `Opaque`, keys checked.

use serde_json::{Value, json};

use super::{Column, RW, Resource, Strategy, age, check_keys, count, name, str_at};
use crate::status::ApiError;
use crate::store::Store;

pub(crate) static SECRETS: Resource = Resource {
    name: "secrets",
    singular: "secret",
    kind: "Secret",
    group: "",
    namespaced: true,
    short_names: &[],
    verbs: RW,
    subresources: &[],
    strategy: &Secrets,
};

struct Secrets;

impl Strategy for Secrets {
    fn prepare(&self, _store: &Store, name: &str, body: &mut Value) -> Result<(), ApiError> {
        let bad = |field: &str, message: String| {
            ApiError::field_invalid(SECRETS.kind, name, field, message)
        };
        // stringData is written into data, as the API server does.
        if let Some(strings) = body.get("stringData").and_then(Value::as_object).cloned() {
            use base64::Engine as _;
            if !body.get("data").is_some_and(Value::is_object) {
                body["data"] = json!({});
            }
            for (k, v) in strings {
                let v = v
                    .as_str()
                    .ok_or_else(|| bad(&format!("stringData[{k}]"), "must be a string".into()))?;
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
        check_keys(SECRETS.kind, name, body, "data")?;
        Ok(())
    }

    fn selectable(&self, field: &str) -> bool {
        field == "type"
    }

    fn columns(&self) -> &'static [Column] {
        &[
            Column("Name", "string", 0),
            Column("Type", "string", 0),
            Column("Data", "integer", 0),
            Column("Age", "string", 0),
        ]
    }

    fn cells(&self, o: &Value, now: jiff::Timestamp) -> Vec<Value> {
        vec![
            name(o),
            json!(str_at(o, "/type")),
            json!(count(o, "data")),
            age(o, "/metadata/creationTimestamp", now),
        ]
    }
}
