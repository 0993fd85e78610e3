//! Names, numbers and files: DNS labels and subdomains, UIDs, bounded durations, images.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The longest duration wasmpod keeps (about 100 years): larger grace periods and deadlines,
/// which Kubernetes allows up to `i64::MAX` seconds, mean "never" in practice and are held to
/// this, so that no deadline computed from them can overflow.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A non-negative number of seconds from a Pod field, held to [`MAX_DURATION`].
pub(super) fn bounded_seconds(s: i64) -> Duration {
    Duration::from_secs(s.max(0).unsigned_abs()).min(MAX_DURATION)
}

/// A pod UID: what the API server generates (a UUID) and anything like it — letters, digits
/// and '-', at most 64 — and nothing that could be a path.
pub(crate) fn check_uid(uid: &str) -> Result<(), &'static str> {
    if !uid.is_empty()
        && uid.len() <= 64
        && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        Ok(())
    } else {
        Err("must be a UUID: letters, digits and '-', at most 64 characters")
    }
}

/// Whether `file` is a WebAssembly module or component: a regular file starting with the
/// `\0asm` magic, or one precompiled by `wasmpod compile` (an ELF file, which the engine checks
/// further when it loads it).
pub(super) fn check_wasm_file(file: &Path) -> Result<(), &'static str> {
    use std::io::Read;
    if !file.is_file() {
        return Err("does not exist");
    }
    let mut magic = [0u8; 4];
    match std::fs::File::open(file).and_then(|mut f| f.read_exact(&mut magic)) {
        Ok(()) if &magic == b"\0asm" || &magic == b"\x7fELF" => Ok(()),
        Ok(()) => Err(
            "is not a WebAssembly module or component (no \\0asm magic) nor one precompiled by \
             `wasmpod compile`",
        ),
        Err(_) => Err("cannot be read as a WebAssembly module or component"),
    }
}

pub(super) fn resolve(base: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_owned()
    } else {
        base.join(p)
    }
}

/// A DNS-1123 label: at most 63 lower-case alphanumerics or '-', starting and ending alphanumeric.
pub(crate) fn check_label(s: &str) -> Result<(), &'static str> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err("must be a DNS-1123 label (lower-case letters, digits and '-', at most 63)")
    }
}

/// A DNS-1123 subdomain: dot-separated labels, at most 253 characters.
pub(crate) fn check_subdomain(s: &str) -> Result<(), &'static str> {
    if s.len() <= 253 && s.split('.').all(|part| check_label(part).is_ok()) {
        Ok(())
    } else {
        Err("must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', at most 253)")
    }
}

/// Checks an object's labels (`values`: their values too) or annotations (keys only) as the API
/// server checks metadata: each key a qualified name, each label value at most 63 characters of
/// alphanumerics, '-', '_' or '.'. One error per bad entry, at `field.KEY`.
pub fn check_metadata_map(
    field: &str,
    map: &std::collections::BTreeMap<String, String>,
    values: bool,
) -> Vec<super::FieldError> {
    let mut errors = Vec::new();
    for (key, value) in map {
        let path = format!("{field}.{key}");
        if let Err(why) = super::affinity::check_qualified_name(key) {
            errors.push(super::FieldError::invalid(path, why));
        } else if values && let Err(why) = super::placement::check_label_value(value) {
            errors.push(super::FieldError::invalid(
                path,
                format!("Invalid value: {value:?}: {why}"),
            ));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_maps_are_checked_as_the_api_server_checks_them() {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let good = map(&[
            ("example.com/tier", "edge-1"),
            ("app", ""),
            ("a.b_c", "x.y"),
        ]);
        assert!(check_metadata_map("metadata.labels", &good, true).is_empty());
        let bad = map(&[
            ("-a", "ok"),
            ("b", "-x"),
            ("c", &"v".repeat(64)),
            ("Bad_/x", "ok"),
        ]);
        let paths: Vec<String> = check_metadata_map("metadata.labels", &bad, true)
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(
            paths,
            [
                "metadata.labels.-a",
                "metadata.labels.Bad_/x",
                "metadata.labels.b",
                "metadata.labels.c"
            ]
        );
        // Annotations: any value, keys as labels'.
        let notes = map(&[("note", "Any text: 100%"), ("-bad", "")]);
        let errors = check_metadata_map("metadata.annotations", &notes, false);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path, "metadata.annotations.-bad");
    }
}
