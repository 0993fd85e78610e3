//! Reading YAML documents with bounds, so that a small hostile input cannot cost much memory or
//! time: the text's size, the nesting depth, and the size of each document once its aliases are
//! expanded (nodes and scalar bytes) are capped, and a mapping may not repeat a key. Each
//! violation is an error that names the field where it happened.

use std::cell::Cell;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::{FieldError, InvalidPod};

/// The most bytes of YAML read from one file or request (the Kubernetes API server's own limit
/// on a request body).
pub(crate) const MAX_INPUT: usize = 3 * 1024 * 1024;
/// The deepest nesting of mappings and sequences (a Pod needs fewer than 15 levels).
pub(crate) const MAX_DEPTH: usize = 64;
/// The most nodes (scalars, mappings, sequences) in one document, aliases expanded.
pub(crate) const MAX_NODES: u64 = 200_000;
/// The most bytes of scalars in one document, aliases expanded.
pub(crate) const MAX_SCALAR_BYTES: u64 = 8 * 1024 * 1024;

/// The YAML documents of a text (empty ones skipped), each within the bounds above.
pub(crate) fn documents(text: &str) -> Result<Vec<Value>, InvalidPod> {
    let invalid = |message: String| InvalidPod {
        file: None,
        errors: vec![FieldError::invalid("", message)],
    };
    if text.len() > MAX_INPUT {
        return Err(InvalidPod {
            file: None,
            errors: vec![FieldError::too_large(
                "",
                format!(
                    "too large: {} bytes, at most {MAX_INPUT} are read",
                    text.len()
                ),
            )],
        });
    }
    let mut docs = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let budget = Budget::default();
        let seed = Node {
            budget: &budget,
            path: Path::Root,
            depth: 0,
        };
        let value = seed.deserialize(doc).map_err(|e| {
            let message = e.to_string();
            match budget.failure.take() {
                Some(error) => InvalidPod {
                    file: None,
                    errors: vec![error],
                },
                None if docs.is_empty() && i == 0 => invalid(format!("not valid YAML: {message}")),
                None => invalid(format!("document {}: not valid YAML: {message}", i + 1)),
            }
        })?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    if docs.is_empty() {
        return Err(invalid(
            "not a Kubernetes object: expected a mapping with apiVersion and kind".into(),
        ));
    }
    Ok(docs)
}

/// What one document has used so far, and the first bound it crossed (with its field).
#[derive(Default)]
struct Budget {
    nodes: Cell<u64>,
    bytes: Cell<u64>,
    failure: Cell<Option<FieldError>>,
}

impl Budget {
    fn charge<E: de::Error>(&self, path: &Path<'_>, bytes: usize) -> Result<(), E> {
        let nodes = self.nodes.get().saturating_add(1);
        let bytes = self.bytes.get().saturating_add(bytes as u64);
        self.nodes.set(nodes);
        self.bytes.set(bytes);
        if nodes > MAX_NODES {
            return self.fail(
                path,
                format!(
                    "the document is too large: more than {MAX_NODES} values (aliases expanded)"
                ),
            );
        }
        if bytes > MAX_SCALAR_BYTES {
            return self.fail(
                path,
                format!(
                    "the document is too large: more than {MAX_SCALAR_BYTES} bytes of values \
                     (aliases expanded)"
                ),
            );
        }
        Ok(())
    }

    fn fail<T, E: de::Error>(&self, path: &Path<'_>, message: String) -> Result<T, E> {
        self.refuse(FieldError::too_large(path.to_string(), message))
    }

    fn refuse<T, E: de::Error>(&self, error: FieldError) -> Result<T, E> {
        let text = error.to_string();
        self.failure.set(Some(error));
        Err(E::custom(text))
    }
}

/// Where a node is, for error messages: `spec.containers[0].name`.
#[derive(Clone, Copy)]
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Key(Path::Root, key) => f.write_str(key),
            Path::Key(parent, key) => write!(f, "{parent}.{key}"),
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

/// Deserializes one node into a JSON value within the document's budget.
struct Node<'a> {
    budget: &'a Budget,
    path: Path<'a>,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl Node<'_> {
    fn scalar<E: de::Error>(&self, bytes: usize, value: Value) -> Result<Value, E> {
        self.budget.charge(&self.path, bytes)?;
        Ok(value)
    }

    fn nest<E: de::Error>(&self) -> Result<(), E> {
        self.budget.charge(&self.path, 0)?;
        if self.depth >= MAX_DEPTH {
            return self.budget.fail(
                &self.path,
                format!("nested too deeply: at most {MAX_DEPTH} levels"),
            );
        }
        Ok(())
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.scalar(1, Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.scalar(8, Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.scalar(8, Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        // JSON has no NaN or infinities; like serde_json, they become null.
        self.scalar(8, Value::from(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.scalar(v.len(), Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.scalar(v.len(), Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.scalar(0, Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.scalar(0, Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.nest()?;
        let mut items = Vec::new();
        loop {
            let seed = Node {
                budget: self.budget,
                path: Path::Index(&self.path, items.len()),
                depth: self.depth + 1,
            };
            match seq.next_element_seed(seed)? {
                Some(v) => items.push(v),
                None => break,
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.nest()?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<Key>()? {
            let key = key.0;
            self.budget.charge(&self.path, key.len())?;
            if out.contains_key(&key) {
                return self.budget.refuse(FieldError::duplicate(
                    Path::Key(&self.path, &key).to_string(),
                    "duplicate key: a mapping may give each key once",
                ));
            }
            let value = map.next_value_seed(Node {
                budget: self.budget,
                path: Path::Key(&self.path, &key),
                depth: self.depth + 1,
            })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// A mapping key: a string, or a scalar written as one (`1: x` has the key `"1"`).
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key, E> {
                Ok(Key(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// File modes written the YAML 1.1 way (`defaultMode: 0644`), which Kubernetes' YAML reader
/// takes as octal and a YAML 1.2 reader as a string: `defaultMode` and `mode` values of `0`
/// followed by octal digits become the number they mean.
pub(super) fn octal_modes(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if let (true, Value::String(s)) = (key == "defaultMode" || key == "mode", &*v)
                    && s.len() > 1
                    && s.len() <= 12
                    && s.starts_with('0')
                    && s.bytes().all(|b| (b'0'..=b'7').contains(&b))
                    && let Ok(n) = i64::from_str_radix(s, 8)
                {
                    *v = Value::from(n);
                } else {
                    octal_modes(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(octal_modes),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(text: &str) -> FieldError {
        documents(text).unwrap_err().errors.remove(0)
    }

    #[test]
    fn duplicate_keys_are_refused_with_their_path() {
        let e = error_of("spec:\n  containers:\n  - name: a\n    name: b\n");
        assert_eq!(e.path, "spec.containers[0].name");
        assert!(e.message.starts_with("duplicate key"), "{e}");
        let e = error_of("a: 1\na: 2\n");
        assert_eq!(e.path, "a");
    }

    #[test]
    fn an_alias_bomb_is_refused_quickly() {
        // Each level doubles: 2^30 leaves once expanded.
        let mut text = String::from("a0: &a0 [x, x]\n");
        for i in 1..30 {
            text += &format!("a{i}: &a{i} [*a{p}, *a{p}]\n", p = i - 1);
        }
        let start = std::time::Instant::now();
        assert!(documents(&text).is_err());
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn a_wide_alias_repeated_is_refused_by_the_node_count() {
        let items = vec!["x"; 1000].join(", ");
        let aliases = vec!["*a"; 300].join(", ");
        let text = format!("a: &a [{items}]\nb: [{aliases}]\n");
        let e = error_of(&text);
        assert!(e.message.contains("more than 200000 values"), "{e}");
        assert!(e.path.starts_with("b["), "{e}");
    }

    #[test]
    fn many_aliases_of_a_long_string_are_refused() {
        let mut text = format!("s: &s {}\nl:\n", "y".repeat(100_000));
        for _ in 0..200 {
            text += "- *s\n";
        }
        let e = error_of(&text);
        assert!(e.message.contains("bytes of values"), "{e}");
        assert!(e.path.starts_with("l["), "{e}");
    }

    #[test]
    fn deep_nesting_and_large_inputs_are_refused() {
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        let e = error_of(&deep);
        assert!(e.message.contains("nested too deeply"), "{e}");
        let big = format!("a: {}\n", "z".repeat(MAX_INPUT));
        assert!(error_of(&big).message.starts_with("too large"));
    }

    #[test]
    fn ordinary_documents_read_as_before() {
        let docs = documents("a: 1\nb: [x, {c: true}]\n---\n---\n1: one\n").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["b"][1]["c"], Value::Bool(true));
        assert_eq!(docs[1]["1"], Value::from("one"));
    }
}
