//! JSON documents: read with each key given once (serde_json keeps the last of a repeated key),
//! then checked against the reader's bounds without recursion.

use serde_json::{Map, Value};

use super::{Budget, InvalidPod, MAX_DEPTH, deep, refused};
use crate::spec::FieldError;

/// A JSON value whose mappings give each key once: serde_json's own `Value` keeps the last of a
/// repeated key, where the YAML reader (and the API server) refuse it.
pub(super) struct Unique(pub(super) Value);

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Unique, D::Error> {
        d.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(serde::de::Error::custom(format!("duplicate key {key:?}")));
            }
            let Unique(value) = map.next_value()?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// Checks a JSON value against the bounds, without recursion.
pub(super) fn check_json(value: &Value) -> Result<(), InvalidPod> {
    let mut budget = Budget::default();
    let mut stack = vec![(value, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        let too_large = |message: String| refused(FieldError::too_large("", message));
        match v {
            Value::Array(items) => {
                budget.charge(0).map_err(too_large)?;
                if depth >= MAX_DEPTH {
                    return Err(too_large(deep()));
                }
                stack.extend(items.iter().map(|i| (i, depth + 1)));
            }
            Value::Object(map) => {
                budget.charge(0).map_err(too_large)?;
                if depth >= MAX_DEPTH {
                    return Err(too_large(deep()));
                }
                for (k, v) in map {
                    budget.charge(k.len()).map_err(too_large)?;
                    stack.push((v, depth + 1));
                }
            }
            Value::String(s) => budget.charge(s.len()).map_err(too_large)?,
            _ => budget.charge(8).map_err(too_large)?,
        }
    }
    Ok(())
}
