//! Secrets: `stringData` written into `data`, the type defaulted to `Opaque`, keys checked.

use serde_json::{Value, json};

use super::{Column, Fields, RW, Resource, Strategy, check_keys, count, created, name};
use crate::object::Object;
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
    fn prepare(&self, _store: &Store, name: &str, body: &mut Fields) -> Result<(), ApiError> {
        let bad = |field: &str, message: String| {
            ApiError::field_invalid(SECRETS.kind, name, field, message)
        };
        // stringData is written into data, as the API server does.
        let strings = match body.remove("stringData") {
            Some(Value::Object(strings)) => Some(strings),
            None | Some(Value::Null) => None,
            Some(_) => return Err(bad("stringData", "must be a map of strings".into())),
        };
        if let Some(strings) = strings {
            use base64::Engine as _;
            let data = body.entry("data").or_insert_with(|| json!({}));
            if !data.is_object() {
                *data = json!({});
            }
            for (k, v) in strings {
                let v = v
                    .as_str()
                    .ok_or_else(|| bad(&format!("stringData[{k}]"), "must be a string".into()))?;
                data[k] = json!(base64::engine::general_purpose::STANDARD.encode(v));
            }
        }
        if body.get("type").is_none_or(|t| t == "") {
            body.insert("type".into(), json!("Opaque"));
        }
        serde_json::from_value::<wasmpod::k8s_openapi::api::core::v1::Secret>(Value::Object(
            body.clone(),
        ))
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

    fn cells(&self, object: &Object, now: jiff::Timestamp) -> Vec<Value> {
        let o = object.fields();
        vec![
            name(object),
            o.get("type").cloned().unwrap_or(json!("")),
            json!(count(&o, "data")),
            created(object, now),
        ]
    }
}
