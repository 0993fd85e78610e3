//! What a client may change of a pod: an update's allowed fields, and nothing of a static pod's
//! mirror, which only the node writes.

use serde_json::{Value, json};
use wasmpod::FieldErrorKind;

use crate::object::Object;
use crate::status::{ApiError, Cause};

/// The annotation that marks a static pod's mirror (the API refuses it from clients); its
/// value is the manifest's hash.
pub(crate) const MIRROR: &str = "kubernetes.io/config.mirror";

/// Whether the pod is a static pod's mirror.
pub(crate) fn is_mirror(pod: &Object) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR))
}

pub(super) fn mirror_annotation_refused(name: &str) -> ApiError {
    ApiError::forbidden(
        "pods",
        name,
        format!(
            "pods \"{name}\" is forbidden: metadata.annotations[{}]: only the node sets it, on \
             the mirrors of its static pods",
            MIRROR
        ),
    )
}

pub(super) fn mirror_refused(name: &str, what: &str) -> ApiError {
    ApiError::forbidden(
        "pods",
        name,
        format!(
            "pods \"{name}\" is forbidden: it is the mirror of a static pod, which cannot be {what} \
             through the API: change or remove its manifest in the node's manifests directory"
        ),
    )
}

/// The spec fields a pod update may change: the containers' images (the API server's rule, less
/// `activeDeadlineSeconds` and `tolerations`, which the runtime cannot change in a running pod).
pub(crate) fn check_update(current: &Object, next: &mut Object) -> Result<(), ApiError> {
    let name = current.name();
    if is_mirror(current) {
        return Err(mirror_refused(name, "changed"));
    }
    if is_mirror(next) {
        return Err(mirror_annotation_refused(name));
    }
    // Status is the kubelet's; what the client sends of it is ignored.
    next.set_field("status", Some(current.field("status").unwrap_or(json!({}))));
    let (old, new) = (
        &current.field("spec").unwrap_or_default(),
        &next.field("spec").unwrap_or_default(),
    );
    if old == new {
        return Ok(());
    }
    let images = |spec: &Value| {
        let mut s = spec.clone();
        for list in ["containers", "initContainers"] {
            if let Some(cs) = s.get_mut(list).and_then(Value::as_array_mut) {
                for c in cs {
                    if let Some(m) = c.as_object_mut() {
                        m.remove("image");
                    }
                }
            }
        }
        s
    };
    if images(old) == images(new) {
        // Only images changed: the kubelet restarts those containers with them.
        return Ok(());
    }
    let message =
        "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, \
         `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only \
         additions to existing tolerations), `spec.terminationGracePeriodSeconds` (allow it to be \
         set to 1 if it was previously negative)"
            .to_owned();
    Err(ApiError::invalid(
        "Pod",
        name,
        vec![Cause {
            kind: FieldErrorKind::Forbidden,
            field: "spec".into(),
            message,
        }],
    ))
}
