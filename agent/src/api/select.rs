//! Label and field selectors (`-l`, `--field-selector`), parsed as the API server parses them
//! and matched against objects.

use std::collections::BTreeMap;

use serde_json::Value;

use super::resources::Resource;
use crate::object::Object;
use crate::status::ApiError;

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Eq(String),
    Ne(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

/// One requirement on a key.
#[derive(Debug, Clone, PartialEq)]
struct Requirement {
    key: String,
    op: Op,
}

impl Requirement {
    fn matches(&self, value: Option<&str>) -> bool {
        match (&self.op, value) {
            (Op::Eq(v), Some(x)) => v == x,
            (Op::Eq(_), None) => false,
            (Op::Ne(v), x) => x != Some(v.as_str()),
            (Op::In(vs), Some(x)) => vs.iter().any(|v| v == x),
            (Op::In(_), None) => false,
            (Op::NotIn(vs), x) => x.is_none_or(|x| !vs.iter().any(|v| v == x)),
            (Op::Exists, x) => x.is_some(),
            (Op::NotExists, x) => x.is_none(),
        }
    }
}

/// A label selector: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Labels(Vec<Requirement>);

/// Splits at commas outside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

fn set(values: &str) -> Option<Vec<String>> {
    let inner = values.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|v| v.trim().to_owned()).collect())
}

impl Labels {
    pub(crate) fn parse(s: &str) -> Result<Labels, ApiError> {
        let bad = |t: &str| ApiError::bad_request(format!("unable to parse requirement: {t:?}"));
        let mut reqs = Vec::new();
        for term in split_terms(s) {
            let req = if let Some(key) = term.strip_prefix('!') {
                Requirement {
                    key: key.trim().to_owned(),
                    op: Op::NotExists,
                }
            } else if let Some((k, v)) = term.split_once("!=") {
                Requirement {
                    key: k.trim().to_owned(),
                    op: Op::Ne(v.trim().to_owned()),
                }
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                Requirement {
                    key: k.trim().to_owned(),
                    op: Op::Eq(v.trim().to_owned()),
                }
            } else if let Some((k, v)) = term.split_once(" notin ") {
                Requirement {
                    key: k.trim().to_owned(),
                    op: Op::NotIn(set(v).ok_or_else(|| bad(term))?),
                }
            } else if let Some((k, v)) = term.split_once(" in ") {
                Requirement {
                    key: k.trim().to_owned(),
                    op: Op::In(set(v).ok_or_else(|| bad(term))?),
                }
            } else {
                Requirement {
                    key: term.to_owned(),
                    op: Op::Exists,
                }
            };
            if req.key.is_empty() || req.key.contains(char::is_whitespace) {
                return Err(bad(term));
            }
            reqs.push(req);
        }
        Ok(Labels(reqs))
    }

    pub(crate) fn matches(&self, object: &Object) -> bool {
        self.0.iter().all(|r| r.matches(object.label(&r.key)))
    }

    /// Whether a set of labels (of something that is not a stored object) matches.
    pub(crate) fn matches_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0
            .iter()
            .all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
    }
}

/// A field selector: `field=value`, `field==value`, `field!=value`, comma-separated.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Fields(Vec<Requirement>);

impl Fields {
    /// A field selector of `resource`'s objects.
    pub(crate) fn parse(s: &str, resource: &Resource) -> Result<Fields, ApiError> {
        let mut reqs = Vec::new();
        for term in split_terms(s) {
            let (key, op) = if let Some((k, v)) = term.split_once("!=") {
                (k, Op::Ne(v.trim().to_owned()))
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (k, Op::Eq(v.trim().to_owned()))
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                )));
            };
            let key = key.trim();
            if !matches!(key, "metadata.name" | "metadata.namespace")
                && !resource.strategy.selectable(key)
            {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {key}"
                )));
            }
            reqs.push(Requirement {
                key: key.to_owned(),
                op,
            });
        }
        Ok(Fields(reqs))
    }

    pub(crate) fn matches(&self, object: &Object) -> bool {
        // The object's own fields are read only when a requirement names one.
        let mut whole = None;
        self.0.iter().all(|r| match r.key.as_str() {
            "metadata.name" => r.matches(Some(object.name())),
            "metadata.namespace" => r.matches(Some(object.namespace())),
            key => {
                let whole = whole.get_or_insert_with(|| object.to_value());
                let text = match whole.pointer(&format!("/{}", key.replace('.', "/"))) {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                };
                r.matches(Some(&text))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resources::PODS;
    use serde_json::json;

    #[test]
    fn label_selectors_match_as_the_api_server_does() {
        let pod =
            Object::from_value(json!({"metadata": {"labels": {"app": "web", "tier": "front"}}}))
                .unwrap();
        let cases = [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app=web,tier=back", false),
            ("app in (web, db)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("missing!=x", true),
            ("missing notin (x)", true),
            ("", true),
        ];
        for (selector, want) in cases {
            let s = Labels::parse(selector).unwrap();
            assert_eq!(s.matches(&pod), want, "{selector}");
        }
        assert!(Labels::parse("app in web").is_err());
    }

    #[test]
    fn field_selectors_name_their_fields() {
        let pod = Object::from_value(json!({
            "metadata": {"name": "a", "namespace": "default"},
            "status": {"phase": "Running"},
        }))
        .unwrap();
        let s = Fields::parse("metadata.name=a,status.phase!=Failed", &PODS).unwrap();
        assert!(s.matches(&pod));
        assert!(
            !Fields::parse("metadata.name=b", &PODS)
                .unwrap()
                .matches(&pod)
        );
        let e = Fields::parse("spec.containers=x", &PODS).unwrap_err();
        assert_eq!(e.message, "field label not supported: spec.containers");
        assert!(Fields::parse("status.phase", &PODS).is_err());
    }
}
