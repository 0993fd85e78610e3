//! Volumes: `hostPath` checked against its type, `configMap` and `secret` projected into files,
//! relative paths inside a volume.

use super::config::{ConfigStore, Kind};
use super::errors::{FieldError, FieldPath};
use super::model::HostCreate;
use super::names::resolve;
use k8s_openapi::api::core::v1 as k8s;
use std::path::{Path, PathBuf};

/// Checks a `hostPath` against its `type` (relative paths are relative to the YAML file);
/// `DirectoryOrCreate` and `FileOrCreate` make what is missing when the pod starts.
pub(super) fn host_path(
    path: &FieldPath,
    host: &k8s::HostPathVolumeSource,
    base_dir: &Path,
    errors: &mut Vec<FieldError>,
) -> (PathBuf, Option<HostCreate>) {
    let target = resolve(base_dir, &host.path);
    let exists = target.exists();
    let (want_dir, create) = match host.type_.as_deref() {
        None | Some("") | Some("Directory") => (true, None),
        Some("DirectoryOrCreate") => (true, Some(HostCreate::Directory)),
        Some("File") => (false, None),
        Some("FileOrCreate") => (false, Some(HostCreate::File)),
        Some(other) => {
            errors.push(FieldError::invalid(
                path.child("hostPath").child("type"),
                format!(
                    "unsupported value {other:?}: wasmpod supports Directory, DirectoryOrCreate, \
                     File and FileOrCreate"
                ),
            ));
            return (target, None);
        }
    };
    let problem = match (exists, want_dir) {
        (false, _) if create.is_some() => None,
        (false, true) => Some("is not a directory (it does not exist)"),
        (false, false) => Some("is not a file (it does not exist)"),
        (true, true) if !target.is_dir() => Some("is not a directory"),
        (true, false) if !target.is_file() => Some("is not a file"),
        _ => None,
    };
    if let Some(why) = problem {
        errors.push(FieldError::invalid(
            path.child("hostPath").child("path"),
            format!("{} {why}", target.display()),
        ));
    }
    (target, create.filter(|_| !exists))
}

/// The files a `configMap` or `secret` volume shows: every key, or the `items` chosen.
pub(super) fn projected(
    at: &FieldPath,
    kind: Kind,
    name: &str,
    items: Option<&[k8s::KeyToPath]>,
    optional: Option<bool>,
    store: &ConfigStore,
    errors: &mut Vec<FieldError>,
) -> Vec<(String, Vec<u8>)> {
    let Some(data) = store.get(kind, name) else {
        if optional != Some(true) {
            let field = if kind == Kind::Secret {
                "secretName"
            } else {
                "name"
            };
            errors.push(FieldError::not_found(
                at.child(field),
                format!(
                    "not found: no {} {name:?} (give it in the pod file or with --config)",
                    kind.name()
                ),
            ));
        }
        return Vec::new();
    };
    let Some(items) = items else {
        return data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    };
    let mut files = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = &item.path;
        if let Err(why) = check_relative_path(path) {
            errors.push(FieldError::invalid(
                at.child("items").index(i).child("path"),
                format!("invalid value {path:?}: {why}"),
            ));
            continue;
        }
        // A file cannot also be a directory of another item (`a` and `a/b`), nor two items one
        // file.
        if let Some(other) = files.iter().position(|(p, _): &(String, Vec<u8>)| {
            p == path || is_parent(p, path) || is_parent(path, p)
        }) {
            errors.push(FieldError::invalid(
                at.child("items").index(i).child("path"),
                format!(
                    "invalid value {path:?}: conflicts with the path {:?} of another item",
                    files[other].0
                ),
            ));
            continue;
        }
        match data.get(&item.key) {
            Some(value) => files.push((path.clone(), value.clone())),
            None if optional == Some(true) => {}
            None => errors.push(FieldError::not_found(
                at.child("items").index(i).child("key"),
                format!(
                    "not found: {} {name:?} has no key {:?}",
                    kind.name(),
                    item.key
                ),
            )),
        }
    }
    files
}

/// A relative path inside a volume (`subPath`, `items[].path`): no leading `/`, no empty, `.`
/// or `..` component, at most 4096 bytes.
pub(super) fn check_relative_path(path: &str) -> Result<(), &'static str> {
    if path.len() > 4096 || path.contains('\0') {
        return Err("must be at most 4096 bytes, without NUL");
    }
    if path.starts_with('/')
        || path
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..")
    {
        return Err("must be a relative path without empty, '.' or '..' components");
    }
    Ok(())
}

/// Whether `dir` is a directory above `path` (`a` of `a/b`).
pub(super) fn is_parent(dir: &str, path: &str) -> bool {
    path.strip_prefix(dir)
        .is_some_and(|rest| rest.starts_with('/'))
}
