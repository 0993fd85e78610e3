//! The fields of a Pod that wasmpod honours, as a tree walked over the input document.
//!
//! Anything outside this tree is an error naming its path: unknown to Kubernetes (a typo), or
//! known to Kubernetes but not honoured by wasmpod. Nothing is silently ignored.

mod pod;

use serde_json::Value;

use super::FieldError;
use pod::POD;

/// What may stand at a place in the document.
pub(super) enum Shape {
    /// A scalar (string, number, bool), checked later by the typed conversion.
    Scalar,
    /// A map from any string key to a string (labels, annotations).
    StringMap,
    /// A map from any resource name to a quantity (a string or a number): `limits`, `requests`.
    Quantities,
    /// An object with these fields.
    Object(&'static [(&'static str, Shape)]),
    /// A list of items of one shape.
    List(&'static Shape),
    /// Accepted whatever it holds (as checked by the Kubernetes types) and not used: what the
    /// API server sets itself or ignores on input (`status`, `metadata.resourceVersion`, ...).
    Ignored,
}

use Shape::{Ignored, List, Object, Quantities, Scalar, StringMap};

/// Walks `input` (the document as written) against the honoured fields. `typed` is the same
/// document after a round trip through the Kubernetes types: a key it lacks is unknown to
/// Kubernetes, a key it has is known but not honoured.
pub(super) fn check_pod(input: &Value, typed: &Value, errors: &mut Vec<FieldError>) {
    walk(&POD, input, Some(typed), String::new(), errors);
}

fn walk(
    shape: &Shape,
    input: &Value,
    typed: Option<&Value>,
    path: String,
    errors: &mut Vec<FieldError>,
) {
    match (shape, input) {
        (_, Value::Null) | (Scalar | Ignored, _) => {}
        (StringMap, Value::Object(map)) => {
            for (key, value) in map {
                if !value.is_string() {
                    errors.push(FieldError::invalid(join(&path, key), "must be a string"));
                }
            }
        }
        (Quantities, Value::Object(map)) => {
            for (key, value) in map {
                if !value.is_string() && !value.is_number() {
                    errors.push(FieldError::invalid(join(&path, key), "must be a quantity"));
                }
            }
        }
        (Object(fields), Value::Object(map)) => {
            for (key, value) in map {
                let child = join(&path, key);
                let typed_child = typed.and_then(|t| t.get(key));
                match fields.iter().find(|(name, _)| name == key) {
                    Some((_, shape)) => walk(shape, value, typed_child, child, errors),
                    None if typed_child.is_some() => errors.push(FieldError::not_supported(
                        child,
                        format!("not supported by wasmpod: {}", why_not(key)),
                    )),
                    None => errors.push(FieldError::unknown(child, "unknown field")),
                }
            }
        }
        (List(item), Value::Array(items)) => {
            for (i, value) in items.iter().enumerate() {
                let typed_item = typed.and_then(|t| t.get(i));
                walk(item, value, typed_item, format!("{path}[{i}]"), errors);
            }
        }
        (StringMap | Quantities | Object(_), _) => {
            errors.push(FieldError::invalid(path, "must be an object"))
        }
        (List(_), _) => errors.push(FieldError::invalid(path, "must be a list")),
    }
}

/// Why a field Kubernetes knows is not honoured, and what to do instead.
fn why_not(key: &str) -> &'static str {
    match key {
        "persistentVolumeClaim"
        | "nfs"
        | "csi"
        | "ephemeral"
        | "iscsi"
        | "rbd"
        | "cephfs"
        | "glusterfs"
        | "awsElasticBlockStore"
        | "gcePersistentDisk"
        | "azureDisk"
        | "azureFile"
        | "fc"
        | "flexVolume"
        | "flocker"
        | "portworxVolume"
        | "quobyte"
        | "scaleIO"
        | "storageos"
        | "vsphereVolume"
        | "photonPersistentDisk"
        | "gitRepo"
        | "image" => {
            "a wasm node has no volume plugins; use emptyDir, hostPath, configMap, secret, \
             downwardAPI or projected"
        }
        "volumeDevices" => "a wasm guest has no block devices",
        "ephemeralContainers" => {
            "ephemeral containers are added through the API's ephemeralcontainers \
             subresource, which wasmpod does not serve; use kubectl exec"
        }
        "resourceClaims" | "claims" => "a wasm node has no dynamic resources (DRA)",
        "subdomain" | "setHostnameAsFQDN" => {
            "a pod's fully qualified name needs a headless Service and cluster DNS, which a \
             wasm node does not have; use hostname and hostAliases"
        }
        "resizePolicy" => "a wasm container's limits are fixed when it starts (no in-place resize)",
        "schedulingGates" => "nothing removes scheduling gates on a node of its own",
        "subPathExpr" => "expanded subPaths are not supported; use subPath",
        "mountPropagation" | "recursiveReadOnly" => {
            "a WASI preopen has no mount propagation; readOnly applies to the whole mount"
        }
        _ => {
            "it has no meaning on a wasm node yet; remove it (docs/pod-spec.md lists what \
              wasmpod honours)"
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}
