//! Volumes: `hostPath` checked against its type, `configMap` and `secret` projected into files,
//! relative paths inside a volume.

use super::config::{ConfigStore, Kind};
use super::errors::{FieldError, FieldPath};
use super::model::{FileData, HostCreate, Volume, VolumeSource};
use super::names::check_label;
use super::names::resolve;
use super::quantity;
use k8s_openapi::api::core::v1 as k8s;
use std::path::{Path, PathBuf};

mod projected;

use projected::{injected_api_access, projected_volume};

/// `spec.volumes`: each named once, of exactly one type, converted (a `hostPath` checked against
/// its type, a ConfigMap's or Secret's keys projected into files, and so on).
///
/// The `kube-api-access-*` volume the API server injects (as `kubectl get pod -o yaml` exports
/// it) is taken without the token or the cluster's CA when the pod was not given them: what is
/// left out is said in `incomplete`, and the pod runs with the rest.
pub(super) fn convert(
    spec: &k8s::PodSpec,
    base_dir: &Path,
    account: &str,
    store: &ConfigStore,
    incomplete: &mut Vec<String>,
    errors: &mut Vec<FieldError>,
) -> Vec<Volume> {
    let mut volumes = Vec::new();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let path = FieldPath::new("spec").child("volumes").index(i);
        if let Err(why) = check_label(&v.name) {
            errors.push(FieldError::invalid(
                path.child("name"),
                format!("invalid value {:?}: {why}", v.name),
            ));
        }
        if volumes.iter().any(|other: &Volume| other.name == v.name) {
            errors.push(FieldError::duplicate(
                path.child("name"),
                format!("duplicate value {:?}", v.name),
            ));
        }
        let kinds = [
            v.empty_dir.is_some(),
            v.host_path.is_some(),
            v.config_map.is_some(),
            v.secret.is_some(),
            v.downward_api.is_some(),
            v.projected.is_some(),
        ];
        match kinds.iter().filter(|k| **k).count() {
            0 => {
                errors.push(FieldError::required(
                    path,
                    "must specify a volume type (emptyDir, hostPath, configMap, secret, \
                     downwardAPI or projected)",
                ));
                continue;
            }
            1 => {}
            _ => {
                errors.push(FieldError::invalid(
                    path,
                    "may not specify more than one volume type",
                ));
                continue;
            }
        }
        let source = if let Some(e) = &v.empty_dir {
            let memory = match e.medium.as_deref() {
                None | Some("") => false,
                Some("Memory") => true,
                Some(other) => {
                    errors.push(FieldError::unsupported(
                        path.child("emptyDir").child("medium"),
                        format!("unsupported value {other:?}: must be \"\" or Memory"),
                    ));
                    false
                }
            };
            let size_limit = e.size_limit.as_ref().and_then(|q| {
                quantity::parse(&q.0, 1.0)
                    .map_err(|why| {
                        errors.push(FieldError::invalid(
                            path.child("emptyDir").child("sizeLimit"),
                            why,
                        ))
                    })
                    .ok()
            });
            VolumeSource::EmptyDir { memory, size_limit }
        } else if let Some(host) = &v.host_path {
            let (target, create) = host_path(&path, host, base_dir, errors);
            VolumeSource::HostPath(target, create)
        } else if let Some(cm) = &v.config_map {
            let keys = Keys {
                kind: Kind::ConfigMap,
                name: &cm.name,
                items: cm.items.as_deref(),
                optional: cm.optional,
            };
            key_files(
                &path.child("configMap"),
                keys,
                cm.default_mode,
                store,
                errors,
            )
        } else if let Some(secret) = &v.secret {
            let keys = Keys {
                kind: Kind::Secret,
                name: secret.secret_name.as_deref().unwrap_or_default(),
                items: secret.items.as_deref(),
                optional: secret.optional,
            };
            key_files(
                &path.child("secret"),
                keys,
                secret.default_mode,
                store,
                errors,
            )
        } else if let Some(d) = &v.downward_api {
            let at = path.child("downwardAPI");
            check_mode(&at.child("defaultMode"), d.default_mode, errors);
            let mut files = Vec::new();
            downward_api(
                &at,
                d.items.as_deref().unwrap_or_default(),
                &mut files,
                errors,
            );
            VolumeSource::Files(files)
        } else if let Some(p) = &v.projected {
            let mut left_out = Vec::new();
            let injected = injected_api_access(&v.name, p).then_some(&mut left_out);
            let files = projected_volume(
                &path.child("projected"),
                p,
                account,
                store,
                injected,
                errors,
            );
            if !left_out.is_empty() {
                incomplete.push(format!(
                    "volume {:?} (the API server's service-account volume) is mounted without {}; \
                     the pod runs without them",
                    v.name,
                    left_out.join(" and ")
                ));
            }
            VolumeSource::Files(files)
        } else {
            continue;
        };
        volumes.push(Volume {
            name: v.name.clone(),
            source,
        });
    }

    volumes
}

/// A `configMap` or `secret` volume: its mode checked, its keys as files.
fn key_files(
    at: &FieldPath,
    keys: Keys<'_>,
    default_mode: Option<i32>,
    store: &ConfigStore,
    errors: &mut Vec<FieldError>,
) -> VolumeSource {
    check_mode(&at.child("defaultMode"), default_mode, errors);
    let mut files = Vec::new();
    projected(at, keys, store, &mut files, errors);
    VolumeSource::Files(files)
}

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

/// The keys of a ConfigMap or Secret a volume or projection shows.
pub(super) struct Keys<'a> {
    pub kind: Kind,
    pub name: &'a str,
    /// `items`: the keys chosen and their paths; every key when `None`.
    pub items: Option<&'a [k8s::KeyToPath]>,
    pub optional: Option<bool>,
}

/// The files a `configMap` or `secret` volume (or projection) shows: every key, or the `items`
/// chosen.
pub(super) fn projected(
    at: &FieldPath,
    source: Keys<'_>,
    store: &ConfigStore,
    files: &mut Vec<(String, FileData)>,
    errors: &mut Vec<FieldError>,
) {
    let Keys {
        kind,
        name,
        items,
        optional,
    } = source;
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
        return;
    };
    let Some(items) = items else {
        for (k, v) in data {
            add_file(
                files,
                k,
                FileData::Bytes(v.clone()),
                &at.child("name"),
                errors,
            );
        }
        return;
    };
    for (i, item) in items.iter().enumerate() {
        let iat = at.child("items").index(i);
        check_mode(&iat.child("mode"), item.mode, errors);
        match data.get(&item.key) {
            Some(value) => add_file(
                files,
                &item.path,
                FileData::Bytes(value.clone()),
                &iat.child("path"),
                errors,
            ),
            None if optional == Some(true) => {}
            None => errors.push(FieldError::not_found(
                iat.child("key"),
                format!(
                    "not found: {} {name:?} has no key {:?}",
                    kind.name(),
                    item.key
                ),
            )),
        }
    }
}

/// Adds a file at `path` (`at` names it), unless the path is invalid or conflicts with another:
/// a file cannot also be a directory of another (`a` and `a/b`), nor two items one file.
fn add_file(
    files: &mut Vec<(String, FileData)>,
    path: &str,
    data: FileData,
    at: &FieldPath,
    errors: &mut Vec<FieldError>,
) {
    if let Err(why) = check_relative_path(path) {
        errors.push(FieldError::invalid(
            at,
            format!("invalid value {path:?}: {why}"),
        ));
        return;
    }
    if let Some((other, _)) = files
        .iter()
        .find(|(p, _)| p == path || is_parent(p, path) || is_parent(path, p))
    {
        errors.push(FieldError::invalid(
            at,
            format!("invalid value {path:?}: conflicts with the path {other:?} of another item"),
        ));
        return;
    }
    files.push((path.to_owned(), data));
}

/// `defaultMode` and `items[].mode`: permission bits, which a WASI guest does not see (its
/// files are readable as its own); checked as the API server checks them.
pub(super) fn check_mode(at: &FieldPath, mode: Option<i32>, errors: &mut Vec<FieldError>) {
    if let Some(m) = mode
        && !(0..=0o777).contains(&m)
    {
        errors.push(FieldError::invalid(
            at,
            format!(
                "Invalid value: {m}: must be a number between 0 and 0777 (octal), both inclusive"
            ),
        ));
    }
}

/// The files of a `downwardAPI` volume (or projection): the pod's metadata fields.
pub(super) fn downward_api(
    at: &FieldPath,
    items: &[k8s::DownwardAPIVolumeFile],
    files: &mut Vec<(String, FileData)>,
    errors: &mut Vec<FieldError>,
) {
    use super::env::FieldRef;
    for (i, item) in items.iter().enumerate() {
        let iat = at.child("items").index(i);
        check_mode(&iat.child("mode"), item.mode, errors);
        if item.resource_field_ref.is_some() {
            errors.push(FieldError::not_supported(
                iat.child("resourceFieldRef"),
                "not supported by wasmpod: container resources are not offered as files; use \
                 fieldRef",
            ));
            continue;
        }
        let Some(field) = &item.field_ref else {
            errors.push(FieldError::required(
                iat.child("fieldRef"),
                "Required value: one of fieldRef and resourceFieldRef",
            ));
            continue;
        };
        let data = match field.field_path.as_str() {
            "metadata.labels" => FileData::Labels,
            "metadata.annotations" => FileData::Annotations,
            path => match FieldRef::parse(path) {
                Ok(
                    f @ (FieldRef::Name
                    | FieldRef::Namespace
                    | FieldRef::Uid
                    | FieldRef::Label(_)
                    | FieldRef::Annotation(_)),
                ) => FileData::Field(f),
                _ => {
                    errors.push(FieldError::unsupported(
                        iat.child("fieldRef").child("fieldPath"),
                        format!(
                            "Unsupported value: {path:?}: supported values: \
                             \"metadata.annotations\", \"metadata.labels\", \"metadata.name\", \
                             \"metadata.namespace\", \"metadata.uid\""
                        ),
                    ));
                    continue;
                }
            },
        };
        add_file(files, &item.path, data, &iat.child("path"), errors);
    }
}

/// A relative path inside a volume (`subPath`, `items[].path`): no leading `/`, no empty, `.`
/// or `..` component, at most 4096 bytes.
pub(crate) fn check_relative_path(path: &str) -> Result<(), &'static str> {
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
