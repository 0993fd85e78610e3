//! Loading: Pod YAML (and the ConfigMap, Secret and PriorityClass documents beside it) read with
//! bounds, parsed into the Kubernetes types, checked for unknown fields and converted.

use super::config::{ConfigStore, Kind};
use super::errors::{FieldError, InvalidPod};
use super::model::PodSpec;
use super::pod::convert;
use super::yaml::documents;
use super::{priority, shape, yaml};
use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use serde_json::Value;
use std::path::{Path, PathBuf};

impl PodSpec {
    /// Reads and validates the Pod YAML file at `path`; images are resolved against its folder.
    /// The file may also hold the ConfigMaps and Secrets the pod uses, as further documents.
    pub fn from_file(path: &Path) -> Result<PodSpec, InvalidPod> {
        PodSpec::from_files(path, &[])
    }

    /// Like [`PodSpec::from_file`], with ConfigMap and Secret documents from more files
    /// (`wasmpod run --config FILE`).
    pub fn from_files(path: &Path, config: &[PathBuf]) -> Result<PodSpec, InvalidPod> {
        PodFiles::read(path, config).map(|files| files.spec)
    }

    /// Parses and validates Pod YAML; relative image paths are resolved against `base_dir`.
    /// Further documents may be the ConfigMaps and Secrets the pod uses.
    pub fn from_yaml(text: &str, base_dir: &Path) -> Result<PodSpec, InvalidPod> {
        PodSpec::parse(text, base_dir, ConfigStore::default())
    }

    fn parse(text: &str, base_dir: &Path, store: ConfigStore) -> Result<PodSpec, InvalidPod> {
        PodSpec::parse_documents(documents(text)?, base_dir, store)
    }

    fn parse_documents(
        docs: Vec<Value>,
        base_dir: &Path,
        mut store: ConfigStore,
    ) -> Result<PodSpec, InvalidPod> {
        let invalid = |message: String| InvalidPod {
            file: None,
            errors: vec![FieldError::invalid("", message)],
        };
        let mut errors = Vec::new();
        let mut pod_doc = None;
        for (i, doc) in docs.into_iter().enumerate() {
            if !doc.is_object() {
                return Err(invalid(
                    "not a Kubernetes object: expected a mapping with apiVersion and kind".into(),
                ));
            }
            let at = format!("document {}", i + 1);
            match (
                is_v1(&doc),
                kind_of(&doc),
                doc.get("kind").and_then(Value::as_str),
            ) {
                (true, Some(Kind::ConfigMap | Kind::Secret), _) => store.add(doc, &at, &mut errors),
                (true, None, Some("Pod")) if pod_doc.is_none() => pod_doc = Some(doc),
                // The node's, not the pod's (see `read_priority_classes`).
                _ if priority::is_priority_class(&doc) => {}
                (true, None, Some("Pod")) => {
                    errors.push(FieldError::invalid(at, "a file holds one Pod"));
                }
                (_, _, kind) => {
                    return Err(invalid(format!(
                        "not a Pod: expected apiVersion v1 and kind Pod, found apiVersion {} and kind {}",
                        doc.get("apiVersion")
                            .and_then(Value::as_str)
                            .unwrap_or("(none)"),
                        kind.unwrap_or("(none)")
                    )));
                }
            }
        }
        let Some(mut input) = pod_doc else {
            return Err(invalid(
                "no Pod document: expected apiVersion v1 and kind Pod".into(),
            ));
        };
        if input.pointer("/spec/containers").is_none() {
            errors.push(FieldError::required("spec.containers", "required value"));
        }
        super::yaml::octal_modes(&mut input);
        let pod: k8s::Pod = match serde_path_to_error::deserialize(&input) {
            Ok(pod) => pod,
            Err(e) => {
                errors.push(FieldError::invalid(
                    e.path().to_string(),
                    e.into_inner().to_string(),
                ));
                return Err(InvalidPod { file: None, errors });
            }
        };
        let typed = serde_json::to_value(&pod).unwrap_or(Value::Null);
        shape::check_pod(&input, &typed, &mut errors);
        match convert(&pod, base_dir, &store, &mut errors) {
            Some(spec) if errors.is_empty() => Ok(spec),
            _ => Err(InvalidPod { file: None, errors }),
        }
    }

    /// Validates a Pod given as a JSON value (an API request's body), as strictly as Pod YAML
    /// (unknown and duplicate fields are errors). `config` holds the ConfigMap and Secret objects
    /// its volumes and env may use; relative image paths are resolved against `base_dir`.
    pub fn from_value(
        pod: &Value,
        base_dir: &Path,
        config: &[Value],
    ) -> Result<PodSpec, InvalidPod> {
        let mut store = ConfigStore::default();
        let mut errors = Vec::new();
        for (i, doc) in config.iter().enumerate() {
            if is_v1(doc) && kind_of(doc).is_some() {
                store.add(
                    doc.clone(),
                    &format!("config object {}", i + 1),
                    &mut errors,
                );
            }
        }
        if !errors.is_empty() {
            return Err(InvalidPod { file: None, errors });
        }
        let text = serde_json::to_string(pod).unwrap_or_default();
        PodSpec::parse(&text, base_dir, store)
    }

    /// Validates a Kubernetes Pod value; relative image paths are resolved against `base_dir`.
    pub fn from_pod(pod: &k8s::Pod, base_dir: &Path) -> Result<PodSpec, InvalidPod> {
        let value = serde_json::to_value(pod).map_err(|e| InvalidPod {
            file: None,
            errors: vec![FieldError::invalid("", e.to_string())],
        })?;
        let text = serde_json::to_string(&value).unwrap_or_default();
        PodSpec::from_yaml(&text, base_dir)
    }
}

/// A pod file as `wasmpod run` reads it: the pod, and the PriorityClasses given beside it and in
/// the `--config` files (which the node resolves `priorityClassName` with).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PodFiles {
    /// The pod.
    pub spec: PodSpec,
    /// Every `PriorityClass` document of the files.
    pub priority_classes: Vec<PriorityClass>,
}

impl PodFiles {
    /// Reads the Pod YAML file at `path` (its images resolved against its folder) and the
    /// ConfigMap, Secret and PriorityClass documents beside it and in `config`, each file read
    /// and parsed once.
    pub fn read(path: &Path, config: &[PathBuf]) -> Result<PodFiles, InvalidPod> {
        let read = |path: &Path| {
            read_bounded(path).map_err(|error| InvalidPod {
                file: Some(path.to_owned()),
                errors: vec![error],
            })
        };
        let in_file = |path: &Path| {
            let path = path.to_owned();
            move |e: InvalidPod| InvalidPod {
                file: Some(path),
                ..e
            }
        };
        let mut store = ConfigStore::default();
        let mut priority_classes = Vec::new();
        for file in config {
            let docs = documents(&read(file)?).map_err(in_file(file))?;
            let mut errors = Vec::new();
            priority_classes.extend(priority::classes(&docs, &mut errors));
            for (i, doc) in docs.into_iter().enumerate() {
                match kind_of(&doc) {
                    Some(Kind::ConfigMap | Kind::Secret) if is_v1(&doc) => {
                        store.add(doc, &format!("document {}", i + 1), &mut errors)
                    }
                    // The node's (see `read_priority_classes`).
                    _ if priority::is_priority_class(&doc) => {}
                    _ => errors.push(FieldError::invalid(
                        format!("document {}", i + 1),
                        "expected a v1 ConfigMap or Secret, or a scheduling.k8s.io/v1 PriorityClass",
                    )),
                }
            }
            if !errors.is_empty() {
                return Err(in_file(file)(InvalidPod { file: None, errors }));
            }
        }
        let docs = documents(&read(path)?).map_err(in_file(path))?;
        let mut errors = Vec::new();
        priority_classes.extend(priority::classes(&docs, &mut errors));
        let base = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let base = std::path::absolute(base).unwrap_or_else(|_| base.to_owned());
        let spec = match PodSpec::parse_documents(docs, &base, store) {
            Ok(spec) if errors.is_empty() => spec,
            Ok(_) => return Err(in_file(path)(InvalidPod { file: None, errors })),
            Err(mut invalid) => {
                invalid.errors.append(&mut errors);
                return Err(in_file(path)(invalid));
            }
        };
        Ok(PodFiles {
            spec,
            priority_classes,
        })
    }
}

/// A YAML file's text, refused when it is larger than the parser reads.
pub(super) fn read_bounded(path: &Path) -> Result<String, FieldError> {
    use std::io::Read;
    let unreadable =
        |e: std::io::Error| FieldError::invalid("", format!("cannot read the file: {e}"));
    let file = std::fs::File::open(path).map_err(unreadable)?;
    // Room for the whole file at once (read in one call), as much as is read at most.
    let size = file.metadata().map_or(0, |m| m.len());
    let mut text = String::with_capacity(size.min(yaml::MAX_INPUT as u64) as usize + 1);
    file.take(yaml::MAX_INPUT as u64 + 1)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    if text.len() > yaml::MAX_INPUT {
        return Err(FieldError::too_large(
            "",
            format!(
                "too large: more than {} bytes, at most that many are read",
                yaml::MAX_INPUT
            ),
        ));
    }
    Ok(text)
}

pub(super) fn is_v1(doc: &Value) -> bool {
    doc.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

pub(super) fn kind_of(doc: &Value) -> Option<Kind> {
    match doc.get("kind").and_then(Value::as_str) {
        Some("ConfigMap") => Some(Kind::ConfigMap),
        Some("Secret") => Some(Kind::Secret),
        _ => None,
    }
}
