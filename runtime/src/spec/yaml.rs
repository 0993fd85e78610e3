//! The one bounded reader of YAML and JSON documents: Pod files, `--config` files, static-pod
//! manifests and every body the agent's API takes go through [`documents`]. A small hostile input
//! cannot cost much memory or time: the text's size, the nesting depth, and the values of the
//! whole text once its aliases are expanded (nodes and scalar bytes) are capped, a mapping may not
//! repeat a key, and every violation is an error that names the field where it happened.
//!
//! The YAML is read as a stream of parser events (saphyr-parser) and each value is built as its
//! events arrive, so a bound stops the reading where it is crossed: a text 100,000 levels deep is
//! refused at its 65th level, and an alias is charged its whole expanded size before it is copied.
//! The time is proportional to the bytes read. Scalars are resolved as the YAML 1.2 core schema
//! (and serde_yaml) resolve them: `null`/`~`, booleans, decimal, `0x`, `0o`, `0b` integers,
//! floats; numbers written with leading zeros (`0644`) stay strings.

use std::collections::HashMap;
use std::fmt::Write as _;

use saphyr_parser::{Event, Parser, ScanError, Tag};
use serde_json::{Map, Value};

use super::{FieldError, InvalidPod};

mod json;
mod scalar;

use json::{Unique, check_json};
pub(super) use scalar::octal_modes;
use scalar::{is_core, resolve};

/// The most bytes of YAML read from one file or request (the Kubernetes API server's own limit
/// on a request body).
pub(crate) const MAX_INPUT: usize = 3 * 1024 * 1024;
/// The deepest nesting of mappings and sequences (a Pod needs fewer than 15 levels).
pub(crate) const MAX_DEPTH: usize = 64;
/// The most nodes (scalars, mappings, sequences) in one text, aliases expanded.
pub(crate) const MAX_NODES: u64 = 200_000;
/// The most bytes of scalars in one text, aliases expanded.
pub(crate) const MAX_SCALAR_BYTES: u64 = 8 * 1024 * 1024;

fn refused(error: FieldError) -> InvalidPod {
    InvalidPod {
        file: None,
        errors: vec![error],
    }
}

/// The documents of a text of YAML or JSON (empty ones skipped), each within the bounds above.
pub(crate) fn documents(text: &str) -> Result<Vec<Value>, InvalidPod> {
    if text.len() > MAX_INPUT {
        return Err(refused(FieldError::too_large(
            "",
            format!(
                "too large: {} bytes, at most {MAX_INPUT} are read",
                text.len()
            ),
        )));
    }
    // JSON (what API clients send) through serde_json, whose own recursion limit bounds the
    // stack; its depth and size are then checked as YAML's are. Anything else, and JSON that
    // serde_json refuses (a repeated key among it), is read as YAML (of which JSON is a part),
    // whose errors name the field.
    if text.trim_start().starts_with(['{', '['])
        && let Ok(Unique(value)) = serde_json::from_str::<Unique>(text)
    {
        check_json(&value)?;
        return Ok(vec![value]);
    }
    let mut reader = Reader::default();
    let mut docs = Vec::new();
    for event in Parser::new_from_str(text) {
        let (event, _) = event.map_err(|e| {
            // The parser's own bound on nesting, met while it looks ahead for a key.
            if e.info().contains("recursion limit") {
                return refused(reader.too_large(deep()));
            }
            refused(FieldError::invalid(
                reader.path(),
                format!("not valid YAML: {}", scan_error(&e)),
            ))
        })?;
        if let Some(value) = reader.event(event).map_err(refused)?
            && !value.is_null()
        {
            docs.push(value);
        }
    }
    if docs.is_empty() {
        return Err(refused(FieldError::invalid(
            "",
            "not a Kubernetes object: expected a mapping with apiVersion and kind",
        )));
    }
    Ok(docs)
}

/// Reads the documents of a YAML or JSON text (a file, an API request's body) with the bounds
/// every input of wasmpod is read with: at most 3 MiB, 64 levels of nesting, 200,000 values and
/// 8 MiB of scalars once aliases are expanded, no repeated key; refused in time proportional to
/// what was read, with an error naming the field. Empty documents are skipped; a text with none
/// is an error.
pub fn read_documents(text: &[u8]) -> Result<Vec<Value>, InvalidPod> {
    let text = std::str::from_utf8(text).map_err(|e| {
        refused(FieldError::invalid(
            "",
            format!("not UTF-8 text: invalid byte at offset {}", e.valid_up_to()),
        ))
    })?;
    documents(text)
}

fn scan_error(e: &ScanError) -> String {
    let at = e.marker();
    format!("{} at line {} column {}", e.info(), at.line(), at.col() + 1)
}

fn deep() -> String {
    format!("nested too deeply: at most {MAX_DEPTH} levels")
}

/// What the text has used so far.
#[derive(Debug, Default, Clone, Copy)]
struct Budget {
    nodes: u64,
    bytes: u64,
}

impl Budget {
    /// Counts one node of `bytes` bytes; the message of the first bound crossed.
    fn charge(&mut self, bytes: usize) -> Result<(), String> {
        self.add(Budget {
            nodes: 1,
            bytes: bytes as u64,
        })
    }

    fn add(&mut self, cost: Budget) -> Result<(), String> {
        self.nodes = self.nodes.saturating_add(cost.nodes);
        self.bytes = self.bytes.saturating_add(cost.bytes);
        if self.nodes > MAX_NODES {
            return Err(format!(
                "the document is too large: more than {MAX_NODES} values (aliases expanded)"
            ));
        }
        if self.bytes > MAX_SCALAR_BYTES {
            return Err(format!(
                "the document is too large: more than {MAX_SCALAR_BYTES} bytes of values \
                 (aliases expanded)"
            ));
        }
        Ok(())
    }

    fn since(self, start: Budget) -> Budget {
        Budget {
            nodes: self.nodes - start.nodes,
            bytes: self.bytes - start.bytes,
        }
    }
}

/// A mapping or sequence whose events are still arriving.
#[derive(Debug)]
struct Open {
    anchor: usize,
    /// The budget when it opened: what it cost is the difference at its end.
    start: Budget,
    kind: OpenKind,
}

#[derive(Debug)]
enum OpenKind {
    Seq(Vec<Value>),
    /// Its entries so far and, between a key and its value, the key.
    Map(Map<String, Value>, Option<String>),
}

/// A value that an alias may repeat, with what it costs each time.
#[derive(Debug)]
struct Anchored {
    value: Value,
    cost: Budget,
}

/// Builds the documents' values from the parser's events.
#[derive(Debug, Default)]
struct Reader {
    budget: Budget,
    open: Vec<Open>,
    anchors: HashMap<usize, Anchored>,
}

impl Reader {
    /// Where the next value goes, for error messages: `spec.containers[0].name`.
    fn path(&self) -> String {
        let mut path = String::new();
        for open in &self.open {
            match &open.kind {
                OpenKind::Seq(items) => {
                    let _ = write!(path, "[{}]", items.len());
                }
                OpenKind::Map(_, Some(key)) => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                }
                OpenKind::Map(_, None) => {}
            }
        }
        path
    }

    fn too_large(&self, message: String) -> FieldError {
        FieldError::too_large(self.path(), message)
    }

    /// Takes one event; a document's value when the event ends it.
    fn event(&mut self, event: Event<'_>) -> Result<Option<Value>, FieldError> {
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                if self
                    .open
                    .last()
                    .is_some_and(|o| matches!(o.kind, OpenKind::Map(_, None)))
                {
                    // A mapping key: its text, as written.
                    if tag.is_some() && !matches!(tag.as_deref(), Some(t) if is_core(t, "str")) {
                        return Err(FieldError::invalid(
                            self.path(),
                            "a mapping key must be a string",
                        ));
                    }
                    self.budget
                        .charge(text.len())
                        .map_err(|m| self.too_large(m))?;
                    if anchor > 0 {
                        self.anchors.insert(
                            anchor,
                            Anchored {
                                value: Value::String(text.to_string()),
                                cost: Budget {
                                    nodes: 1,
                                    bytes: text.len() as u64,
                                },
                            },
                        );
                    }
                    return self.key(text.into_owned()).map(|()| None);
                }
                let value = resolve(&text, style, tag.as_deref())
                    .map_err(|m| FieldError::invalid(self.path(), m))?;
                let bytes = match &value {
                    Value::String(s) => s.len(),
                    Value::Null => 0,
                    Value::Bool(_) => 1,
                    _ => 8,
                };
                self.budget.charge(bytes).map_err(|m| self.too_large(m))?;
                if anchor > 0 {
                    self.anchors.insert(
                        anchor,
                        Anchored {
                            value: value.clone(),
                            cost: Budget {
                                nodes: 1,
                                bytes: bytes as u64,
                            },
                        },
                    );
                }
                self.complete(value)
            }
            Event::SequenceStart(anchor, tag) => {
                self.check_collection_tag(tag.as_deref(), "seq")?;
                self.start(anchor, OpenKind::Seq(Vec::new()))
            }
            Event::MappingStart(anchor, tag) => {
                self.check_collection_tag(tag.as_deref(), "map")?;
                self.start(anchor, OpenKind::Map(Map::new(), None))
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(open) = self.open.pop() else {
                    return Ok(None);
                };
                let value = match open.kind {
                    OpenKind::Seq(items) => Value::Array(items),
                    OpenKind::Map(map, _) => Value::Object(map),
                };
                if open.anchor > 0 {
                    self.anchors.insert(
                        open.anchor,
                        Anchored {
                            value: value.clone(),
                            cost: self.budget.since(open.start),
                        },
                    );
                }
                self.complete(value)
            }
            Event::Alias(id) => {
                let Some(anchored) = self.anchors.get(&id) else {
                    return Err(FieldError::invalid(self.path(), "an alias of no anchor"));
                };
                // Charged in full before it is copied.
                let (cost, is_key) = (
                    anchored.cost,
                    self.open
                        .last()
                        .is_some_and(|o| matches!(o.kind, OpenKind::Map(_, None))),
                );
                self.budget.add(cost).map_err(|m| self.too_large(m))?;
                let value = self.anchors[&id].value.clone();
                if is_key {
                    return match value {
                        Value::String(key) => self.key(key).map(|()| None),
                        _ => Err(FieldError::invalid(
                            self.path(),
                            "a mapping key must be a string",
                        )),
                    };
                }
                self.complete(value)
            }
            Event::DocumentStart(_) => {
                self.open.clear();
                Ok(None)
            }
            Event::DocumentEnd => {
                self.anchors.clear();
                Ok(None)
            }
            Event::StreamStart | Event::StreamEnd | Event::Nothing => Ok(None),
        }
    }

    fn check_collection_tag(&self, tag: Option<&Tag>, core: &str) -> Result<(), FieldError> {
        match tag {
            None => Ok(()),
            Some(t) if is_core(t, core) => Ok(()),
            Some(t) => Err(FieldError::invalid(
                self.path(),
                format!("unsupported tag {t}"),
            )),
        }
    }

    fn start(&mut self, anchor: usize, kind: OpenKind) -> Result<Option<Value>, FieldError> {
        if self
            .open
            .last()
            .is_some_and(|o| matches!(o.kind, OpenKind::Map(_, None)))
        {
            return Err(FieldError::invalid(
                self.path(),
                "a mapping key must be a string",
            ));
        }
        self.budget.charge(0).map_err(|m| self.too_large(m))?;
        if self.open.len() >= MAX_DEPTH {
            return Err(self.too_large(deep()));
        }
        self.open.push(Open {
            anchor,
            start: self.budget,
            kind,
        });
        Ok(None)
    }

    /// A mapping's next key.
    fn key(&mut self, key: String) -> Result<(), FieldError> {
        let Some(Open {
            kind: OpenKind::Map(map, pending),
            ..
        }) = self.open.last_mut()
        else {
            return Ok(());
        };
        if map.contains_key(&key) {
            let mut path = self.path();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(&key);
            return Err(FieldError::duplicate(
                path,
                "duplicate key: a mapping may give each key once",
            ));
        }
        *pending = Some(key);
        Ok(())
    }

    /// A whole value: into the collection that holds it, or the document's own.
    fn complete(&mut self, value: Value) -> Result<Option<Value>, FieldError> {
        match self.open.last_mut() {
            None => Ok(Some(value)),
            Some(Open {
                kind: OpenKind::Seq(items),
                ..
            }) => {
                items.push(value);
                Ok(None)
            }
            Some(Open {
                kind: OpenKind::Map(map, key),
                ..
            }) => {
                if let Some(key) = key.take() {
                    map.insert(key, value);
                }
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests;
