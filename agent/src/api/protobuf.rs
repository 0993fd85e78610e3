//! Kubernetes' protobuf encoding, read for the objects kubectl's generators send that way
//! (`kubectl create configmap|secret|namespace|priorityclass`): the `k8s\0` envelope
//! (`runtime.Unknown`) and the fields of those kinds, turned into the JSON the rest of the API
//! reads. Answers are always JSON, which every client accepts.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::status::ApiError;

const MAGIC: &[u8] = b"k8s\0";

/// One field: its number and its value (a varint or a length-delimited slice).
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn bad() -> ApiError {
    ApiError::bad_request("the protobuf body is malformed")
}

fn varint(data: &mut &[u8]) -> Result<u64, ApiError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = data.split_first().ok_or_else(bad)?;
        *data = rest;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(bad())
}

/// The fields of a message, in order.
fn fields(mut data: &[u8]) -> Result<Vec<(u64, Field<'_>)>, ApiError> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let key = varint(&mut data)?;
        let field = match key & 7 {
            0 => Field::Varint(varint(&mut data)?),
            2 => {
                let len = usize::try_from(varint(&mut data)?).map_err(|_| bad())?;
                if len > data.len() {
                    return Err(bad());
                }
                let (bytes, rest) = data.split_at(len);
                data = rest;
                Field::Bytes(bytes)
            }
            1 => {
                data = data.get(8..).ok_or_else(bad)?;
                continue;
            }
            5 => {
                data = data.get(4..).ok_or_else(bad)?;
                continue;
            }
            _ => return Err(bad()),
        };
        out.push((key >> 3, field));
    }
    Ok(out)
}

fn text(b: &[u8]) -> Result<String, ApiError> {
    String::from_utf8(b.to_vec()).map_err(|_| bad())
}

/// A `map<string, string>` entry (or `map<string, bytes>`, base64 as JSON has it).
fn entry(b: &[u8], bytes: bool) -> Result<(String, Value), ApiError> {
    let (mut k, mut v) = (String::new(), Value::String(String::new()));
    for (n, f) in fields(b)? {
        if let Field::Bytes(b) = f {
            match n {
                1 => k = text(b)?,
                2 if bytes => v = json!(base64::engine::general_purpose::STANDARD.encode(b)),
                2 => v = json!(text(b)?),
                _ => {}
            }
        }
    }
    Ok((k, v))
}

/// Sets a string field; protobuf writes empty strings for unset ones, which JSON leaves out.
fn put(map: &mut Map<String, Value>, key: &str, b: &[u8]) -> Result<(), ApiError> {
    if !b.is_empty() {
        map.insert(key.into(), json!(text(b)?));
    }
    Ok(())
}

fn object_meta(b: &[u8]) -> Result<Value, ApiError> {
    let mut meta = Map::new();
    let (mut labels, mut annotations) = (Map::new(), Map::new());
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(b)) => put(&mut meta, "name", b)?,
            (2, Field::Bytes(b)) => put(&mut meta, "generateName", b)?,
            (3, Field::Bytes(b)) => put(&mut meta, "namespace", b)?,
            (6, Field::Bytes(b)) => put(&mut meta, "resourceVersion", b)?,
            (11, Field::Bytes(b)) => {
                let (k, v) = entry(b, false)?;
                labels.insert(k, v);
            }
            (12, Field::Bytes(b)) => {
                let (k, v) = entry(b, false)?;
                annotations.insert(k, v);
            }
            _ => {}
        }
    }
    if !labels.is_empty() {
        meta.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        meta.insert("annotations".into(), Value::Object(annotations));
    }
    Ok(Value::Object(meta))
}

/// The JSON of a protobuf-encoded object of `kind`; 415 for kinds not read this way.
pub(crate) fn decode(body: &[u8], kind: &str) -> Result<Value, ApiError> {
    let envelope = body.strip_prefix(MAGIC).ok_or_else(bad)?;
    let mut raw = None;
    for (n, f) in fields(envelope)? {
        if let (2, Field::Bytes(b)) = (n, f) {
            raw = Some(b);
        }
    }
    let raw = raw.ok_or_else(bad)?;
    let mut object = Map::new();
    let (mut data, mut binary, mut strings) = (Map::new(), Map::new(), Map::new());
    for (n, f) in fields(raw)? {
        match (kind, n, f) {
            (_, 1, Field::Bytes(b)) => drop(object.insert("metadata".into(), object_meta(b)?)),
            ("ConfigMap", 2, Field::Bytes(b)) => {
                let (k, v) = entry(b, false)?;
                data.insert(k, v);
            }
            ("ConfigMap", 3, Field::Bytes(b)) => {
                let (k, v) = entry(b, true)?;
                binary.insert(k, v);
            }
            ("ConfigMap", 4, Field::Varint(v)) | ("Secret", 5, Field::Varint(v)) => {
                drop(object.insert("immutable".into(), json!(v != 0)))
            }
            ("Secret", 2, Field::Bytes(b)) => {
                let (k, v) = entry(b, true)?;
                data.insert(k, v);
            }
            ("Secret", 3, Field::Bytes(b)) => put(&mut object, "type", b)?,
            ("Secret", 4, Field::Bytes(b)) => {
                let (k, v) = entry(b, false)?;
                strings.insert(k, v);
            }
            ("PriorityClass", 2, Field::Varint(v)) => {
                drop(object.insert("value".into(), json!(v as i32)))
            }
            ("PriorityClass", 3, Field::Varint(v)) => {
                drop(object.insert("globalDefault".into(), json!(v != 0)))
            }
            ("PriorityClass", 4, Field::Bytes(b)) => put(&mut object, "description", b)?,
            ("PriorityClass", 5, Field::Bytes(b)) => put(&mut object, "preemptionPolicy", b)?,
            ("TokenRequest", 2, Field::Bytes(b)) => {
                drop(object.insert("spec".into(), token_request_spec(b)?))
            }
            ("ConfigMap" | "Secret" | "PriorityClass" | "Namespace" | "TokenRequest", _, _) => {}
            _ => {
                return Err(ApiError::unsupported_media(format!(
                    "{kind} is not read as protobuf; send application/json"
                )));
            }
        }
    }
    if kind == "PriorityClass" && !object.contains_key("value") {
        object.insert("value".into(), json!(0));
    }
    for (field, map) in [
        ("data", data),
        ("binaryData", binary),
        ("stringData", strings),
    ] {
        if !map.is_empty() {
            object.insert(field.into(), Value::Object(map));
        }
    }
    Ok(Value::Object(object))
}

/// `authentication.k8s.io/v1` `TokenRequestSpec` (`kubectl create token`).
fn token_request_spec(b: &[u8]) -> Result<Value, ApiError> {
    let mut spec = Map::new();
    let mut audiences = Vec::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(b)) => audiences.push(json!(text(b)?)),
            (4, Field::Varint(v)) => drop(spec.insert("expirationSeconds".into(), json!(v as i64))),
            (3, Field::Bytes(b)) => {
                let mut reference = Map::new();
                for (n, f) in fields(b)? {
                    if let Field::Bytes(b) = f {
                        let key = match n {
                            1 => "kind",
                            2 => "apiVersion",
                            3 => "name",
                            4 => "uid",
                            _ => continue,
                        };
                        reference.insert(key.into(), json!(text(b)?));
                    }
                }
                spec.insert("boundObjectRef".into(), Value::Object(reference));
            }
            _ => {}
        }
    }
    spec.insert("audiences".into(), Value::Array(audiences));
    Ok(Value::Object(spec))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u64, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(n << 3 | 2) as u8, bytes.len() as u8];
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn a_config_map_in_its_envelope_reads_as_json() {
        let meta = field(1, b"app");
        let data = [field(1, b"greeting"), field(2, b"hi")].concat();
        let object = [field(1, &meta), field(2, &data)].concat();
        let body = [MAGIC, &field(2, &object)].concat();
        assert_eq!(
            decode(&body, "ConfigMap").unwrap(),
            json!({"metadata": {"name": "app"}, "data": {"greeting": "hi"}})
        );
        assert!(decode(&body[..body.len() - 1], "ConfigMap").is_err());
        assert!(decode(b"not k8s", "ConfigMap").is_err());
        assert_eq!(decode(&body, "Pod").unwrap_err().code.as_u16(), 415);
    }
}
