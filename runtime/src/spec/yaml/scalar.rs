//! Scalars as the YAML 1.2 core schema resolves them (`null`, booleans, integers in four bases,
//! floats; leading zeros stay strings), and Kubernetes' YAML 1.1 file modes (`0644`).

use saphyr_parser::{ScalarStyle, Tag};
use serde_json::Value;

pub(super) fn is_core(tag: &Tag, suffix: &str) -> bool {
    tag.is_yaml_core_schema() && tag.suffix == suffix
}

/// A scalar's value: quoted and block scalars are strings; plain ones resolve by the core schema;
/// the core tags (`!!str`, `!!int`, ...) say what to resolve to.
pub(super) fn resolve(text: &str, style: ScalarStyle, tag: Option<&Tag>) -> Result<Value, String> {
    let Some(tag) = tag else {
        return Ok(match style {
            ScalarStyle::Plain => plain(text),
            _ => Value::String(text.to_owned()),
        });
    };
    let wrong = || format!("invalid value {text:?} for the tag {tag}");
    if !tag.is_yaml_core_schema() {
        return Err(format!("unsupported tag {tag}"));
    }
    match tag.suffix.as_str() {
        "str" => Ok(Value::String(text.to_owned())),
        "null" if null(text) => Ok(Value::Null),
        "bool" => boolean(text).map(Value::Bool).ok_or_else(wrong),
        "int" => int(text).ok_or_else(wrong),
        "float" => float(text)
            .or_else(|| int(text).and_then(|v| v.as_f64()))
            .map(Value::from)
            .ok_or_else(wrong),
        _ => Err(wrong()),
    }
}

fn plain(text: &str) -> Value {
    if null(text) {
        return Value::Null;
    }
    if let Some(b) = boolean(text) {
        return Value::Bool(b);
    }
    if let Some(n) = int(text) {
        return n;
    }
    if !leading_zeros(text)
        && let Some(f) = float(text)
    {
        return Value::from(f);
    }
    Value::String(text.to_owned())
}

fn null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

fn boolean(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

/// `0644` and the like: digits after a leading zero are a string in YAML 1.2.
fn leading_zeros(text: &str) -> bool {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    digits.len() > 1 && digits.starts_with('0') && digits[1..].bytes().all(|b| b.is_ascii_digit())
}

/// A core-schema integer that fits in 64 bits: decimal, or `0x`, `0o`, `0b` with an optional sign.
fn int(text: &str) -> Option<Value> {
    let (negative, unsigned) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (radix, digits) = if let Some(d) = unsigned.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = unsigned.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = unsigned.strip_prefix("0b") {
        (2, d)
    } else {
        if leading_zeros(text) {
            return None;
        }
        (10, unsigned)
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    if !negative {
        return Some(Value::from(magnitude));
    }
    match magnitude {
        0 => Some(Value::from(0)),
        m if m <= i64::MAX as u64 + 1 => Some(Value::from(0i64.wrapping_sub_unsigned(m))),
        _ => None,
    }
}

fn float(text: &str) -> Option<f64> {
    let unsigned = match text.strip_prefix('+') {
        Some(rest) if rest.starts_with(['+', '-']) => return None,
        Some(rest) => rest,
        None => text,
    };
    match unsigned {
        ".inf" | ".Inf" | ".INF" => return Some(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Some(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Some(f64::NAN),
        _ => {}
    }
    // Rust reads `inf`, `nan` and `infinity` too, which YAML does not.
    if !unsigned.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    unsigned.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// File modes written the YAML 1.1 way (`defaultMode: 0644`), which Kubernetes' YAML reader
/// takes as octal and a YAML 1.2 reader as a string: `defaultMode` and `mode` values of `0`
/// followed by octal digits become the number they mean.
pub(in crate::spec) fn octal_modes(value: &mut Value) {
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
