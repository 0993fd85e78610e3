//! The bounds every object the agent keeps stays within, whatever request made it: nesting depth
//! (the reader's, so that what is stored reads back after a restart and nothing recurses deeply
//! on it) and, for JSON patches, how many operations one patch has and how much it may copy.

use serde_json::Value;

use crate::status::ApiError;

/// The largest object stored (the API server's limit on a request is 3 MiB).
pub(crate) const MAX_OBJECT: usize = 3 << 20;

/// The deepest nesting of mappings and sequences in a stored object: the depth
/// `wasmpod::read_documents` reads any body with.
pub(crate) const MAX_DEPTH: usize = 64;
/// The most operations of one JSON patch (the API server's own limit).
pub(crate) const MAX_PATCH_OPERATIONS: usize = 10_000;

/// How deep and how large (about its JSON's bytes) a value is, found without recursion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) depth: usize,
    pub(crate) bytes: usize,
}

pub(crate) fn shape(value: &Value) -> Shape {
    let mut out = Shape { depth: 0, bytes: 0 };
    let mut stack = vec![(value, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        match v {
            Value::Array(items) => {
                out.depth = out.depth.max(depth + 1);
                out.bytes = out.bytes.saturating_add(2 + items.len());
                stack.extend(items.iter().map(|i| (i, depth + 1)));
            }
            Value::Object(map) => {
                out.depth = out.depth.max(depth + 1);
                out.bytes = out.bytes.saturating_add(2);
                for (k, v) in map {
                    out.bytes = out.bytes.saturating_add(k.len() + 4);
                    stack.push((v, depth + 1));
                }
            }
            Value::String(s) => out.bytes = out.bytes.saturating_add(s.len() + 2),
            _ => out.bytes = out.bytes.saturating_add(8),
        }
    }
    out
}

/// Refuses an object nested deeper than [`MAX_DEPTH`].
pub(crate) fn check_depth(value: &Value) -> Result<(), ApiError> {
    let depth = shape(value).depth;
    if depth > MAX_DEPTH {
        return Err(ApiError::bad_request(format!(
            "the object is nested {depth} levels deep: at most {MAX_DEPTH} are kept"
        )));
    }
    Ok(())
}

/// Applies a JSON patch (RFC 6902) to `doc` one operation at a time, each checked before it
/// is applied: at most [`MAX_PATCH_OPERATIONS`], no operation that would nest the object deeper
/// than [`MAX_DEPTH`], and at most [`MAX_OBJECT`] bytes copied or moved by the whole patch (the
/// API server's accumulated copy limit), so that a few `copy` operations cannot double an
/// object again and again.
pub(crate) fn json_patch(doc: &mut Value, body: &[u8]) -> Result<(), String> {
    use json_patch::PatchOperation as Op;
    let ops: json_patch::Patch =
        serde_json::from_slice(body).map_err(|e| format!("invalid JSON patch: {e}"))?;
    if ops.0.len() > MAX_PATCH_OPERATIONS {
        return Err(format!(
            "the JSON patch has {} operations: at most {MAX_PATCH_OPERATIONS} are taken",
            ops.0.len()
        ));
    }
    let mut moved = 0usize;
    for (i, op) in ops.0.iter().enumerate() {
        let added = match op {
            Op::Add(a) => Some(shape(&a.value)),
            Op::Replace(r) => Some(shape(&r.value)),
            Op::Copy(c) => Some(from(doc, c.from.as_str(), i)?),
            Op::Move(m) => Some(from(doc, m.from.as_str(), i)?),
            Op::Remove(_) | Op::Test(_) => None,
        };
        if let Some(added) = added {
            if matches!(op, Op::Copy(_) | Op::Move(_)) {
                moved = moved.saturating_add(added.bytes);
                if moved > MAX_OBJECT {
                    return Err(format!(
                        "operation {i}: the patch copies or moves more than {MAX_OBJECT} bytes"
                    ));
                }
            }
            let depth = op.path().count().saturating_add(added.depth);
            if depth > MAX_DEPTH {
                return Err(format!(
                    "operation {i}: the object would be nested {depth} levels deep: at most \
                     {MAX_DEPTH} are kept"
                ));
            }
        }
        json_patch::patch_unsafe(doc, std::slice::from_ref(op))
            .map_err(|e| format!("operation {i}: {e}"))?;
    }
    Ok(())
}

fn from(doc: &Value, pointer: &str, i: usize) -> Result<Shape, String> {
    doc.pointer(pointer)
        .map(shape)
        .ok_or_else(|| format!("operation {i}: \"from\" path {pointer:?} does not exist"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shapes_are_measured_without_recursion() {
        assert_eq!(shape(&json!(1)).depth, 0);
        assert_eq!(shape(&json!({"a": [1, {"b": {}}]})).depth, 4);
        let mut deep = json!(0);
        for _ in 0..100_000 {
            deep = Value::Array(vec![deep]);
        }
        assert_eq!(shape(&deep).depth, 100_000);
        // Dropped without recursion, so this test itself does not overflow its stack.
        let mut v = deep;
        while let Value::Array(mut items) = v {
            v = items.pop().unwrap_or_default();
        }
    }

    #[test]
    fn copies_that_double_an_object_are_refused() {
        let mut doc = json!({"data": {"a": "x".repeat(100_000)}});
        let mut ops = vec![];
        for i in 0..40 {
            ops.push(json!({"op": "copy", "from": "/data", "path": format!("/data{i}")}));
        }
        let e = json_patch(&mut doc, &serde_json::to_vec(&ops).unwrap()).unwrap_err();
        assert!(e.contains("copies or moves more than"), "{e}");
    }

    #[test]
    fn patches_that_nest_deeper_than_the_limit_are_refused() {
        let mut doc = json!({"data": {"a": {"b": {}}}});
        let mut ops = vec![];
        // Each copy nests the object three levels deeper.
        for _ in 0..30 {
            ops.push(json!({"op": "copy", "from": "/data", "path": "/data/a/b/c"}));
        }
        let e = json_patch(&mut doc, &serde_json::to_vec(&ops).unwrap()).unwrap_err();
        assert!(e.contains("levels deep"), "{e}");
        let path: String = "/a".repeat(70);
        let mut doc = json!({});
        let op = json!([{"op": "add", "path": path, "value": 1}]);
        assert!(json_patch(&mut doc, &serde_json::to_vec(&op).unwrap()).is_err());
    }
}
