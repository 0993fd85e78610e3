//! One container: role, image, argv, environment, mounts, ports, probes and hooks, resources.

use super::config::ConfigStore;
use super::env;
use super::env::{check_expansion, convert_env};
use super::errors::{FieldError, FieldPath};
use super::handlers::{convert_probe, exec_handler, http_get};
use super::image::PullPolicy;
use super::model::{
    ContainerPort, ContainerSpec, Handler, HostCreate, ImagePull, Mount, Role, Volume, VolumeSource,
};
use super::names::{bounded_seconds, check_label, check_wasm_file, resolve};
use super::ports::convert_ports;
use super::resources::convert_resources;
use super::security;
use super::volumes::check_relative_path;
use k8s_openapi::api::core::v1 as k8s;
use std::path::{Path, PathBuf};

/// What a container's conversion reads of its pod.
pub(super) struct PodContext<'a> {
    /// The directory relative images and host paths start from (the pod file's).
    pub base_dir: &'a Path,
    /// The pod's volumes, converted.
    pub volumes: &'a [Volume],
    pub store: &'a ConfigStore,
    /// The longest each downward-API value can be once the pod runs.
    pub field_len: &'a dyn Fn(&env::FieldRef) -> u64,
}

/// One container of `spec.initContainers` (`is_init`) or `spec.containers`, at `path`.
pub(super) fn convert_container(
    path: &FieldPath,
    c: &k8s::Container,
    is_init: bool,
    pod: &PodContext<'_>,
    errors: &mut Vec<FieldError>,
) -> Option<ContainerSpec> {
    let PodContext {
        base_dir,
        volumes,
        store,
        field_len,
    } = *pod;
    if let Err(why) = check_label(&c.name) {
        errors.push(FieldError::invalid(
            path.child("name"),
            format!("invalid value {:?}: {why}", c.name),
        ));
    }
    let role = role(path, c, is_init, errors);
    let (image, pull) = image(path, c, base_dir, errors);
    let argv: Vec<String> = match &c.command {
        Some(command) => command
            .iter()
            .chain(c.args.iter().flatten())
            .cloned()
            .collect(),
        None => std::iter::once(c.name.clone())
            .chain(c.args.iter().flatten().cloned())
            .collect(),
    };
    let env = convert_env(path, c, store, errors);
    check_expansion(path, &env, &argv, field_len, errors);
    let mounts = convert_mounts(path, c, volumes, errors);
    let ports = convert_ports(path, c.ports.as_deref().unwrap_or_default(), errors);
    let is_regular_init = role == Role::Init;
    let mut probe = |field: &str, p: &Option<k8s::Probe>, threshold_one: bool| {
        let p = p.as_ref()?;
        let at = path.child(field);
        if is_regular_init {
            errors.push(FieldError::not_supported(
                at,
                "not supported by init containers (only sidecars may have probes)",
            ));
            return None;
        }
        convert_probe(&at, p, threshold_one, &ports, errors)
    };
    let startup = probe("startupProbe", &c.startup_probe, true);
    let liveness = probe("livenessProbe", &c.liveness_probe, true);
    let readiness = probe("readinessProbe", &c.readiness_probe, false);
    let hook = |field: &str, h: Option<&k8s::LifecycleHandler>, errors: &mut Vec<FieldError>| {
        let at = path.child("lifecycle").child(field);
        let h = h?;
        if is_regular_init {
            errors.push(FieldError::not_supported(
                at,
                "not supported by init containers (only sidecars may have hooks)",
            ));
            return None;
        }
        convert_hook(&at, h, &ports, errors)
    };
    let lifecycle = c.lifecycle.as_ref();
    let post_start = hook(
        "postStart",
        lifecycle.and_then(|l| l.post_start.as_ref()),
        errors,
    );
    let pre_stop = hook(
        "preStop",
        lifecycle.and_then(|l| l.pre_stop.as_ref()),
        errors,
    );
    let resources = convert_resources(path, c.resources.as_ref(), errors);
    security::check_container(path, c.security_context.as_ref(), errors);
    check_pull_policy(path, c, errors);
    // A guest has no terminal: WASI gives it byte streams, with no line discipline, window size
    // or signals to drive.
    if c.tty == Some(true) {
        errors.push(FieldError::not_supported(
            path.child("tty"),
            "not supported by wasmpod: a WASI guest has byte streams, not a terminal (use stdin \
             without tty)",
        ));
    }
    // As the kubelet, `stdinOnce` means nothing without `stdin`.
    let stdin = (c.stdin == Some(true)).then_some(super::StdinMode {
        once: c.stdin_once == Some(true),
    });
    let termination = check_termination(path, c, &mounts, errors);
    let file_dirs = super::file_mounts::group(path, &mounts, errors);
    Some(ContainerSpec {
        termination,
        file_dirs,
        pull: pull.map(Box::new),
        name: c.name.clone(),
        field: path.to_string(),
        startup: startup.map(Box::new),
        liveness: liveness.map(Box::new),
        readiness: readiness.map(Box::new),
        post_start: post_start.map(Box::new),
        pre_stop: pre_stop.map(Box::new),
        resources,
        role,
        image,
        argv,
        env,
        mounts,
        ports,
        working_dir: c.working_dir.clone(),
        stdin,
    })
}

/// The container's role: an init container, a sidecar (an init container with
/// `restartPolicy: Always`) or a regular container.
fn role(path: &FieldPath, c: &k8s::Container, is_init: bool, errors: &mut Vec<FieldError>) -> Role {
    match (is_init, c.restart_policy.as_deref()) {
        (_, None) => {
            if is_init {
                Role::Init
            } else {
                Role::Regular
            }
        }
        (true, Some("Always")) => Role::Sidecar,
        (true, Some(other)) => {
            errors.push(FieldError::unsupported(
                path.child("restartPolicy"),
                format!("unsupported value {other:?}: an init container may only set Always"),
            ));
            Role::Init
        }
        (false, Some(_)) => {
            errors.push(FieldError::not_supported(
                path.child("restartPolicy"),
                "not supported by wasmpod: only init containers may set a restart policy",
            ));
            Role::Regular
        }
    }
}

/// `image`: a `.wasm` (or `.cwasm`) file, relative to the pod file, or a registry image pulled
/// when the container first starts.
fn image(
    path: &FieldPath,
    c: &k8s::Container,
    base_dir: &Path,
    errors: &mut Vec<FieldError>,
) -> (PathBuf, Option<ImagePull>) {
    let mut pull = None;
    let image = match c.image.as_deref() {
        None | Some("") => {
            errors.push(FieldError::required(
                path.child("image"),
                "required value: the path of a .wasm file",
            ));
            PathBuf::new()
        }
        // A registry image is pulled when the container first starts.
        Some(image) if !super::image::is_path(image) && !resolve(base_dir, image).is_file() => {
            match super::image::parse(image) {
                Ok(reference) => {
                    let policy = match c.image_pull_policy.as_deref() {
                        Some("Always") => PullPolicy::Always,
                        Some("Never") => PullPolicy::Never,
                        Some("IfNotPresent") => PullPolicy::IfNotPresent,
                        _ => PullPolicy::default_for(&reference),
                    };
                    pull = Some(ImagePull {
                        shown: super::image::shown(&reference),
                        reference,
                        policy,
                        command: c.command.clone(),
                        args: c.args.clone(),
                    });
                }
                Err(why) => errors.push(FieldError::invalid(
                    path.child("image"),
                    format!("invalid value {image:?}: {why}"),
                )),
            }
            PathBuf::new()
        }
        Some(image) => {
            let file = resolve(base_dir, image.strip_prefix("file://").unwrap_or(image));
            if let Err(why) = check_wasm_file(&file) {
                let (at, message) = (path.child("image"), format!("{} {why}", file.display()));
                errors.push(if file.exists() {
                    FieldError::invalid(at, message)
                } else {
                    FieldError::not_found(at, message)
                });
            }
            file
        }
    };
    (image, pull)
}

/// `volumeMounts`: each of a volume of the pod, at an absolute path of its own, with a relative
/// `subPath`; a file (a hostPath file, a ConfigMap key by its subPath) is mounted as a file.
fn convert_mounts(
    path: &FieldPath,
    c: &k8s::Container,
    volumes: &[Volume],
    errors: &mut Vec<FieldError>,
) -> Vec<Mount> {
    let mut mounts: Vec<Mount> = Vec::new();
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let mpath = path.child("volumeMounts").index(i);
        let Some(volume) = volumes.iter().position(|v| v.name == m.name) else {
            errors.push(FieldError::not_found(
                mpath.child("name"),
                format!("not found: no volume named {:?}", m.name),
            ));
            continue;
        };
        if !m.mount_path.starts_with('/') {
            errors.push(FieldError::invalid(
                mpath.child("mountPath"),
                format!("invalid value {:?}: must be an absolute path", m.mount_path),
            ));
        } else if m.mount_path.split('/').any(|part| part == "..") {
            errors.push(FieldError::invalid(
                mpath.child("mountPath"),
                "must not contain '..'",
            ));
        }
        if mounts.iter().any(|o| o.path == m.mount_path) {
            errors.push(FieldError::duplicate(
                mpath.child("mountPath"),
                format!("duplicate value {:?}", m.mount_path),
            ));
        }
        let sub_path = m.sub_path.clone().filter(|p| !p.is_empty());
        if let Some(sub) = &sub_path
            && let Err(why) = check_relative_path(sub)
        {
            errors.push(FieldError::invalid(
                mpath.child("subPath"),
                format!("invalid value {sub:?}: {why}"),
            ));
        }
        // A file (a hostPath file, a ConfigMap key by its subPath) is mounted as a file.
        let file = match &volumes[volume].source {
            VolumeSource::HostPath(host, create) => {
                let target = sub_path.as_ref().map_or(host.clone(), |s| host.join(s));
                target.is_file() || (*create == Some(HostCreate::File) && sub_path.is_none())
            }
            VolumeSource::Files(files) => sub_path
                .as_ref()
                .is_some_and(|sub| files.iter().any(|(p, _)| p == sub)),
            VolumeSource::EmptyDir { .. } => false,
        };
        mounts.push(Mount {
            volume,
            path: m.mount_path.clone(),
            read_only: m.read_only.unwrap_or(false),
            sub_path,
            file,
        });
    }
    mounts
}

/// A lifecycle hook's handler: exactly one of `exec`, `httpGet` and `sleep`.
fn convert_hook(
    at: &FieldPath,
    h: &k8s::LifecycleHandler,
    ports: &[ContainerPort],
    errors: &mut Vec<FieldError>,
) -> Option<Handler> {
    let kinds = [h.exec.is_some(), h.http_get.is_some(), h.sleep.is_some()];
    match kinds.iter().filter(|k| **k).count() {
        0 => {
            errors.push(FieldError::required(
                at.clone(),
                "must specify a handler type (exec, httpGet or sleep)",
            ));
            return None;
        }
        1 => {}
        _ => {
            errors.push(FieldError::invalid(
                at,
                "may not specify more than one handler type",
            ));
            return None;
        }
    }
    if let Some(exec) = &h.exec {
        return exec_handler(&at.child("exec"), exec, errors);
    }
    if let Some(get) = &h.http_get {
        return http_get(&at.child("httpGet"), get, ports, errors);
    }
    let sleep = h.sleep.as_ref()?;
    if sleep.seconds < 0 {
        errors.push(FieldError::invalid(
            at.child("sleep").child("seconds"),
            format!("invalid value {}: must be >= 0", sleep.seconds),
        ));
        return None;
    }
    Some(Handler::Sleep(bounded_seconds(sleep.seconds)))
}

/// The most of a termination message read, as the kubelet reads.
pub(crate) const TERMINATION_MESSAGE_MAX: u64 = 4096;

/// `terminationMessagePath` and `terminationMessagePolicy`. A container that declares either
/// gets a writable file at the path (default `/dev/termination-log`), in a directory of its own
/// preopened at the path's directory, which must not be, hold or lie inside one of its mounts.
fn check_termination(
    path: &FieldPath,
    c: &k8s::Container,
    mounts: &[Mount],
    errors: &mut Vec<FieldError>,
) -> Option<super::TerminationMessage> {
    if c.termination_message_path.is_none() && c.termination_message_policy.is_none() {
        return None;
    }
    let fallback_to_logs = match c.termination_message_policy.as_deref() {
        None | Some("File") => false,
        Some("FallbackToLogsOnError") => true,
        Some(other) => {
            errors.push(FieldError::unsupported(
                path.child("terminationMessagePolicy"),
                format!("unsupported value {other:?}: must be File or FallbackToLogsOnError"),
            ));
            false
        }
    };
    let at = path.child("terminationMessagePath");
    let file_path = c
        .termination_message_path
        .as_deref()
        .unwrap_or("/dev/termination-log");
    let Some((dir, file)) = file_path
        .strip_prefix('/')
        .and_then(|p| {
            p.rsplit_once('/')
                .map(|(d, f)| (format!("/{d}"), f))
                .or(Some(("/".into(), p)))
        })
        .filter(|(_, f)| !f.is_empty() && *f != "." && *f != "..")
    else {
        errors.push(FieldError::invalid(
            at,
            format!("invalid value {file_path:?}: must be an absolute path to a file"),
        ));
        return None;
    };
    if file_path.len() > 4096 || dir == "/" || dir.split('/').any(|p| p == "." || p == "..") {
        errors.push(FieldError::invalid(
            at,
            format!(
                "invalid value {file_path:?}: must be an absolute path of at most 4096 bytes in a \
                 directory other than /, without . or .."
            ),
        ));
        return None;
    }
    let inside = |outer: &str, inner: &str| {
        inner == outer || inner.starts_with(&format!("{}/", outer.trim_end_matches('/')))
    };
    if let Some(m) = mounts
        .iter()
        .find(|m| inside(&m.path, &dir) || inside(&dir, &m.path))
    {
        errors.push(FieldError::invalid(
            at,
            format!(
                "invalid value {file_path:?}: WASI preopens directories only, so the file's \
                 directory {dir} would be mounted, and it overlaps the mount at {}: choose a \
                 path whose directory holds no mount",
                m.path
            ),
        ));
        return None;
    }
    Some(super::TerminationMessage {
        dir,
        file: file.to_owned(),
        fallback_to_logs,
    })
}

/// `imagePullPolicy`: one of Kubernetes' three values. An image is a file, read (and its compiled
/// form cached) when the pod is created, so every policy means the same until images come from
/// registries.
fn check_pull_policy(path: &FieldPath, c: &k8s::Container, errors: &mut Vec<FieldError>) {
    match c.image_pull_policy.as_deref() {
        None | Some("Always" | "IfNotPresent" | "Never") => {}
        Some(other) => errors.push(FieldError::unsupported(
            path.child("imagePullPolicy"),
            format!("unsupported value {other:?}: must be Always, IfNotPresent or Never"),
        )),
    }
}
