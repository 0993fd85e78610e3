//! `securityContext`, pod and container: a wasm guest has no users, no capabilities, no
//! syscalls and no root filesystem beyond its mounts, so the settings that ask for a confined
//! container are given already and accepted; those that ask for more than the sandbox gives
//! (`privileged`, added capabilities, privilege escalation, other seccomp profiles, sysctls)
//! are refused with the reason.

use k8s_openapi::api::core::v1 as k8s;

use super::errors::{FieldError, FieldPath};

/// Checks a container's `securityContext`.
pub(super) fn check_container(
    path: &FieldPath,
    context: Option<&k8s::SecurityContext>,
    errors: &mut Vec<FieldError>,
) {
    let Some(c) = context else { return };
    let at = path.child("securityContext");
    if c.privileged == Some(true) {
        errors.push(FieldError::not_supported(
            at.child("privileged"),
            "not supported by wasmpod: a wasm guest cannot be given the host's devices or \
             privileges",
        ));
    }
    if c.allow_privilege_escalation == Some(true) {
        errors.push(FieldError::not_supported(
            at.child("allowPrivilegeEscalation"),
            "not supported by wasmpod: a wasm guest has no privileges to gain; leave it unset \
             or false",
        ));
    }
    if let Some(caps) = &c.capabilities
        && caps.add.as_ref().is_some_and(|add| !add.is_empty())
    {
        errors.push(FieldError::not_supported(
            at.child("capabilities").child("add"),
            "not supported by wasmpod: a wasm guest has no Linux capabilities to add (dropping \
             them is accepted: it has none)",
        ));
    }
    check_seccomp(&at, c.seccomp_profile.as_ref(), errors);
    if c.proc_mount.as_deref().is_some_and(|m| m != "Default") {
        errors.push(FieldError::not_supported(
            at.child("procMount"),
            "not supported by wasmpod: a wasm guest has no /proc",
        ));
    }
}

/// The pod's host namespaces and process sharing: `false` is what a wasm pod is (its own
/// in-process network, no processes); `true` asks for what it cannot have, refused with why.
/// `hostUsers` either way is accepted: a wasm guest has no users, and `false` (a user
/// namespace) asks for less isolation than a guest already has.
pub(super) fn check_namespaces(spec: &k8s::PodSpec, errors: &mut Vec<FieldError>) {
    // `hostNetwork` is the node's to allow (`NodeOptions::allow_host_network`).
    let flags = [
        (
            "hostPID",
            spec.host_pid,
            "a wasm guest has no processes to see",
        ),
        (
            "hostIPC",
            spec.host_ipc,
            "a wasm guest has no System V IPC or POSIX message queues",
        ),
        (
            "shareProcessNamespace",
            spec.share_process_namespace,
            "wasm instances have no processes to share",
        ),
    ];
    for (field, value, why) in flags {
        if value == Some(true) {
            errors.push(FieldError::not_supported(
                FieldPath::new("spec").child(field),
                format!("not supported by wasmpod: {why}"),
            ));
        }
    }
}

/// Checks the pod's `securityContext`.
pub(super) fn check_pod(context: Option<&k8s::PodSecurityContext>, errors: &mut Vec<FieldError>) {
    let Some(c) = context else { return };
    let at = FieldPath::new("spec").child("securityContext");
    check_seccomp(&at, c.seccomp_profile.as_ref(), errors);
    if c.sysctls.as_ref().is_some_and(|s| !s.is_empty()) {
        errors.push(FieldError::not_supported(
            at.child("sysctls"),
            "not supported by wasmpod: a wasm guest has no kernel parameters",
        ));
    }
}

/// `RuntimeDefault` is what the sandbox is (a guest reaches the host only through WASI); other
/// profiles name syscall filters a guest does not have.
fn check_seccomp(
    at: &FieldPath,
    profile: Option<&k8s::SeccompProfile>,
    errors: &mut Vec<FieldError>,
) {
    if let Some(p) = profile
        && p.type_ != "RuntimeDefault"
    {
        errors.push(FieldError::not_supported(
            at.child("seccompProfile").child("type"),
            format!(
                "not supported by wasmpod: {:?}; a wasm guest makes no syscalls, so only \
                 RuntimeDefault (the WASI sandbox) applies",
                p.type_
            ),
        ));
    }
}
