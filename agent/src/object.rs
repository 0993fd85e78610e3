//! An API object as the agent keeps it, in kube-rs's `DynamicObject` shape: its type, its
//! metadata typed (what the API machinery itself reads: names, uid, labels, deletion), and every
//! other field (`spec`, `status`, `data`, an event's fields) as one compact JSON text that is
//! parsed only where a resource's own fields are read.
//!
//! A JSON value keeps a map node and a heap string per field, several times the size of its
//! text, for every pod and event the node has. The text is also what gets, lists and watches
//! write out, as it is.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use wasmpod::k8s_openapi::api::core::v1::Pod;
use wasmpod::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::status::ApiError;

/// An object's `apiVersion` and `kind`: the served resources' own, held without an allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TypeMeta {
    pub(crate) api_version: Cow<'static, str>,
    pub(crate) kind: Cow<'static, str>,
}

/// The `apiVersion`s and `kind`s of the served resources.
pub(crate) const KNOWN_TYPES: &[&str] = &[
    "v1",
    "scheduling.k8s.io/v1",
    "node.k8s.io/v1",
    "Pod",
    "ConfigMap",
    "Secret",
    "ServiceAccount",
    "Event",
    "Namespace",
    "Node",
    "PriorityClass",
    "RuntimeClass",
];

/// `text` as one of [`KNOWN_TYPES`] when it is one.
fn interned(text: String) -> Cow<'static, str> {
    match KNOWN_TYPES.iter().find(|k| **k == text) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(text),
    }
}

/// One API object: type, metadata, and the rest of its fields.
#[derive(Debug, Clone)]
pub(crate) struct Object {
    pub(crate) types: TypeMeta,
    pub(crate) metadata: ObjectMeta,
    /// Every other top-level field, as a JSON object's text.
    rest: Box<RawValue>,
}

fn empty() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).expect("`{}` is JSON")
}

impl PartialEq for Object {
    fn eq(&self, other: &Object) -> bool {
        self.types == other.types
            && self.metadata == other.metadata
            && self.rest.get() == other.rest.get()
    }
}

impl Default for Object {
    fn default() -> Object {
        Object {
            types: TypeMeta::default(),
            metadata: ObjectMeta::default(),
            rest: empty(),
        }
    }
}

impl Object {
    /// The object a JSON value holds. A value that is not an object, or metadata of the wrong
    /// shape, is refused naming the field; so is nesting deeper than the store keeps.
    pub(crate) fn from_value(value: Value) -> Result<Object, ApiError> {
        crate::bounds::check_depth(&value)?;
        let Value::Object(mut fields) = value else {
            return Err(ApiError::bad_request("the object is not a JSON object"));
        };
        let mut text = |key: &str| match fields.remove(key) {
            Some(Value::String(s)) => Ok(s),
            None | Some(Value::Null) => Ok(String::new()),
            Some(_) => Err(ApiError::bad_request(format!("{key}: must be a string"))),
        };
        let types = TypeMeta {
            api_version: interned(text("apiVersion")?),
            kind: interned(text("kind")?),
        };
        let metadata = match fields.remove("metadata") {
            None | Some(Value::Null) => ObjectMeta::default(),
            Some(meta) => serde_path_to_error::deserialize(meta).map_err(|e| {
                let path = e.path().to_string();
                let field = if path == "." {
                    "metadata".to_owned()
                } else {
                    format!("metadata.{path}")
                };
                ApiError::bad_request(format!("{field}: {}", e.into_inner()))
            })?,
        };
        Ok(Object {
            types,
            metadata,
            rest: serde_json::value::to_raw_value(&fields)
                .map_err(|e| ApiError::internal(format!("object: {e}")))?,
        })
    }

    /// The object read back from the text it was stored as.
    pub(crate) fn from_slice(bytes: &[u8]) -> Result<Object, ApiError> {
        let value =
            serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(e.to_string()))?;
        Object::from_value(value)
    }

    /// The whole object as a JSON value (for the code that reads a resource's own fields).
    pub(crate) fn to_value(&self) -> Value {
        let mut out = self.fields();
        for (key, text) in [
            ("apiVersion", &self.types.api_version),
            ("kind", &self.types.kind),
        ] {
            if !text.is_empty() {
                out.insert(key.into(), Value::String(text.to_string()));
            }
        }
        out.insert(
            "metadata".into(),
            serde_json::to_value(&self.metadata).unwrap_or_default(),
        );
        Value::Object(out)
    }

    /// Every field beside the type and metadata, parsed.
    pub(crate) fn fields(&self) -> Map<String, Value> {
        serde_json::from_str(self.rest.get()).unwrap_or_default()
    }

    /// One top-level field (`spec`, `status`, `data`, ...), parsed; `None` when it is absent.
    pub(crate) fn field(&self, name: &str) -> Option<Value> {
        self.fields().remove(name)
    }

    /// The object read as a pod, typed: its spec and status as k8s-openapi has them (what
    /// admission and the kubelet wrote; a field that does not read as its type is left out).
    pub(crate) fn pod(&self) -> Pod {
        /// The typed fields of a pod, read straight from the object's text.
        #[derive(serde::Deserialize)]
        struct Fields {
            spec: Option<wasmpod::k8s_openapi::api::core::v1::PodSpec>,
            status: Option<wasmpod::k8s_openapi::api::core::v1::PodStatus>,
        }
        if let Ok(Fields { spec, status }) = serde_json::from_str(self.rest.get()) {
            return Pod {
                metadata: self.metadata.clone(),
                spec,
                status,
            };
        }
        // One of them does not read as its type: each on its own.
        let mut fields = self.fields();
        let spec = fields.remove("spec");
        let status = fields.remove("status");
        Pod {
            metadata: self.metadata.clone(),
            spec: spec.and_then(|v| serde_json::from_value(v).ok()),
            status: status.and_then(|v| serde_json::from_value(v).ok()),
        }
    }

    /// Sets (or, with `None`, removes) one top-level field beside the type and metadata: a value
    /// the agent made, or one read from an object (what a client sent goes through
    /// [`Object::from_value`], which bounds its depth).
    pub(crate) fn set_field(&mut self, name: &str, value: Option<Value>) {
        let mut fields = self.fields();
        match value {
            Some(v) => drop(fields.insert(name.to_owned(), v)),
            None => drop(fields.remove(name)),
        }
        self.set_fields(fields);
    }

    /// Replaces every field beside the type and metadata (as [`Object::set_field`]).
    pub(crate) fn set_fields(&mut self, fields: Map<String, Value>) {
        if let Ok(rest) = serde_json::value::to_raw_value(&fields) {
            self.rest = rest;
        }
    }

    /// The object's name (`""` when it has none).
    pub(crate) fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    /// The object's namespace (`""` for a cluster-scoped one).
    pub(crate) fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("")
    }

    /// The object's uid (`""` before it is stored).
    pub(crate) fn uid(&self) -> &str {
        self.metadata.uid.as_deref().unwrap_or("")
    }

    /// The value of one of the object's labels.
    pub(crate) fn label(&self, key: &str) -> Option<&str> {
        self.metadata.labels.as_ref()?.get(key).map(String::as_str)
    }

    /// The object's `resourceVersion`, if it has one.
    pub(crate) fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
}

impl Serialize for Object {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let rest: BTreeMap<String, &RawValue> =
            serde_json::from_str(self.rest.get()).map_err(serde::ser::Error::custom)?;
        let mut map = serializer.serialize_map(None)?;
        if !self.types.api_version.is_empty() {
            map.serialize_entry("apiVersion", &self.types.api_version)?;
        }
        if !self.types.kind.is_empty() {
            map.serialize_entry("kind", &self.types.kind)?;
        }
        map.serialize_entry("metadata", &self.metadata)?;
        for (k, v) in &rest {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_keep_every_field_through_their_compact_form() {
        let value = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "a", "namespace": "default", "labels": {"app": "web"},
                         "creationTimestamp": "2026-11-26T10:00:00Z"},
            "spec": {"containers": [{"name": "c", "image": "x.wasm"}]},
            "status": {"phase": "Running"},
        });
        let mut object = Object::from_value(value.clone()).unwrap();
        assert_eq!((object.name(), object.namespace()), ("a", "default"));
        assert_eq!(object.label("app"), Some("web"));
        assert_eq!(object.to_value(), value);
        assert_eq!(serde_json::to_value(&object).unwrap(), value);
        let text = serde_json::to_vec(&object).unwrap();
        assert_eq!(Object::from_slice(&text).unwrap(), object);
        assert_eq!(object.field("status"), Some(json!({"phase": "Running"})));
        object.set_field("status", None);
        assert_eq!(object.field("status"), None);
        assert_eq!(object.to_value()["spec"], value["spec"]);
    }

    #[test]
    fn metadata_of_the_wrong_shape_is_refused_naming_the_field() {
        let e = Object::from_value(json!({"metadata": {"labels": {"a": 5}}})).unwrap_err();
        assert!(
            e.message.starts_with("metadata.labels.a: "),
            "{}",
            e.message
        );
        let e = Object::from_value(json!([1])).unwrap_err();
        assert_eq!(e.message, "the object is not a JSON object");
        let e = Object::from_value(json!({"kind": 1})).unwrap_err();
        assert_eq!(e.message, "kind: must be a string");
    }
}
