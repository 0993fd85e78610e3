//! Pod specifications: Kubernetes Pod YAML parsed into the real Kubernetes types, then validated
//! into wasmpod's own model, which holds only what wasmpod honours.

mod config;
mod env;
mod priority;
mod quantity;
mod shape;
mod yaml;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as k8s;
use serde_json::Value;

use config::{ConfigStore, Kind};
pub(crate) use env::{EnvValue, PodInfo, resolve as resolve_env};
pub use priority::read_priority_classes;
use yaml::documents;

/// One problem in a Pod document, at a field path such as `spec.containers[1].image`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The path of the offending field, in the notation `kubectl` uses.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

impl FieldError {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found in one Pod document, reported together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InvalidPod {
    /// The file the document came from, when it came from one.
    pub file: Option<PathBuf>,
    /// The problems, in document order.
    pub errors: Vec<FieldError>,
}

impl fmt::Display for InvalidPod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self
            .file
            .as_deref()
            .map_or_else(|| "pod".into(), |p| p.display().to_string());
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{file}: {error}")?;
        }
        Ok(())
    }
}

/// The restart policy of a pod, or of one init container (`Always` makes it a sidecar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

/// What part a container plays in its pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Init,
    Sidecar,
    Regular,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Init => "init",
            Role::Sidecar => "sidecar",
            Role::Regular => "regular",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct ContainerSpec {
    pub name: String,
    /// Where it is in the Pod document, e.g. `spec.initContainers[1]`.
    pub field: String,
    pub role: Role,
    /// Absolute path of the .wasm file.
    pub image: PathBuf,
    pub argv: Vec<String>,
    /// `envFrom` then `env`, in order; resolved (downward API, `$(VAR)`) at each start.
    pub env: Vec<(String, EnvValue)>,
    pub mounts: Vec<Mount>,
    pub working_dir: Option<String>,
    pub ports: Vec<ContainerPort>,
    pub startup: Option<Probe>,
    pub liveness: Option<Probe>,
    pub readiness: Option<Probe>,
    pub post_start: Option<Handler>,
    pub pre_stop: Option<Handler>,
    pub resources: Resources,
}

/// What a pod asks of its node: memory in bytes and CPU in thousandths of a core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Requests {
    pub memory: u64,
    pub cpu_milli: u64,
}

impl Requests {
    pub(crate) fn plus(self, other: Requests) -> Requests {
        Requests {
            memory: self.memory.saturating_add(other.memory),
            cpu_milli: self.cpu_milli.saturating_add(other.cpu_milli),
        }
    }

    fn max(self, other: Requests) -> Requests {
        Requests {
            memory: self.memory.max(other.memory),
            cpu_milli: self.cpu_milli.max(other.cpu_milli),
        }
    }
}

/// A container's resources: the memory limit is enforced on its linear memories; requests are
/// recorded for the node's admission and the QoS class.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Resources {
    pub memory_limit: Option<u64>,
    pub memory_request: Option<u64>,
    pub cpu_limit_milli: Option<u64>,
    pub cpu_request_milli: Option<u64>,
}

impl Resources {
    fn is_empty(&self) -> bool {
        *self == Resources::default()
    }

    /// Limits and requests set for both CPU and memory, and equal.
    fn guaranteed(&self) -> bool {
        self.memory_limit.is_some()
            && self.cpu_limit_milli.is_some()
            && self.memory_limit == self.memory_request
            && self.cpu_limit_milli == self.cpu_request_milli
    }

    /// The CPU limit as the share of one core the guest may use; `None` when it is not limited
    /// (a guest runs on one thread, so a limit of a whole core or more changes nothing).
    pub(crate) fn cpu_share(&self) -> Option<f64> {
        self.cpu_limit_milli
            .filter(|&m| m < 1000)
            .map(|m| m.max(1) as f64 / 1000.0)
    }
}

/// What a probe or a lifecycle hook does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Handler {
    /// Call the export `command[0]` in a fresh instance, or run the entry point with argv = command.
    Exec(Vec<String>),
    /// An HTTP GET to the pod IP; a status of 200-399 is success.
    HttpGet(HttpGet),
    /// A TCP connection to this port of the pod IP (probes only).
    TcpSocket(u16),
    /// The gRPC health-checking protocol on this port of the pod IP (probes only).
    Grpc { port: u16, service: String },
    /// Wait (hooks only).
    Sleep(Duration),
}

/// The request of an `httpGet` handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HttpGet {
    pub port: u16,
    pub path: String,
    pub headers: Vec<(String, String)>,
}

/// A port a container declares (`ports[]`); published on the host when `host` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContainerPort {
    pub name: Option<String>,
    pub port: u16,
    pub udp: bool,
    /// `hostIP:hostPort` (`hostIP` defaults to 127.0.0.1).
    pub host: Option<std::net::SocketAddr>,
}

/// A probe with the kubelet's defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Probe {
    pub handler: Handler,
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
    /// Grace period for a kill this probe causes (liveness and startup only).
    pub grace: Option<Duration>,
}

#[derive(Debug, Clone)]
pub(crate) struct Mount {
    /// Index into [`PodSpec::volumes`].
    pub volume: usize,
    pub path: String,
    pub read_only: bool,
    /// `subPath`: a directory inside the volume (made if missing) mounted instead of its root.
    pub sub_path: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) enum VolumeSource {
    EmptyDir {
        /// `medium: Memory`: kept in RAM (`/dev/shm`) rather than under the state dir.
        memory: bool,
        /// `sizeLimit` in bytes: a pod whose volume grows past it is evicted.
        size_limit: Option<u64>,
    },
    /// The host's path, and what to make there at pod start (`DirectoryOrCreate`,
    /// `FileOrCreate`) if it is missing.
    HostPath(PathBuf, Option<HostCreate>),
    /// `configMap` and `secret`: files (relative path, contents) written at pod start and
    /// mounted read-only.
    Files(Vec<(String, Vec<u8>)>),
}

#[derive(Debug, Clone)]
pub(crate) struct Volume {
    pub name: String,
    pub source: VolumeSource,
}

/// What a `hostPath` of type `DirectoryOrCreate` or `FileOrCreate` makes when missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostCreate {
    Directory,
    File,
}

/// A validated pod, ready to run: every field in it is one wasmpod honours.
///
/// Made from Pod YAML with [`PodSpec::from_yaml`] or [`PodSpec::from_file`], or from a
/// Kubernetes [`Pod`](k8s_openapi::api::core::v1::Pod) value with [`PodSpec::from_pod`].
/// Validation reports every problem at once, each with its field path:
///
/// ```
/// let yaml = r#"
/// apiVersion: v1
/// kind: Pod
/// metadata: { name: hello }
/// spec:
///   containers:
///   - { name: main, image: hello.wasm, securityContext: { privileged: true } }
/// "#;
/// let err = wasmpod::PodSpec::from_yaml(yaml, "/nonexistent".as_ref()).unwrap_err();
/// let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
/// assert_eq!(paths, ["spec.containers[0].securityContext", "spec.containers[0].image"]);
/// ```
#[derive(Debug, Clone)]
pub struct PodSpec {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) uid: Option<String>,
    /// Init containers (and sidecars) first, in order, then regular containers.
    pub(crate) containers: Vec<ContainerSpec>,
    pub(crate) restart_policy: RestartPolicy,
    pub(crate) volumes: Vec<Volume>,
    pub(crate) grace_period: Duration,
    pub(crate) active_deadline: Option<Duration>,
    pub(crate) readiness_gates: Vec<String>,
    /// `spec.hostname`, or the pod's name.
    pub(crate) hostname: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) annotations: BTreeMap<String, String>,
    /// `spec.priorityClassName`, resolved by the node at admission.
    pub(crate) priority_class: Option<String>,
}

impl PodSpec {
    /// Reads and validates the Pod YAML file at `path`; images are resolved against its folder.
    /// The file may also hold the ConfigMaps and Secrets the pod uses, as further documents.
    pub fn from_file(path: &Path) -> Result<PodSpec, InvalidPod> {
        PodSpec::from_files(path, &[])
    }

    /// Like [`PodSpec::from_file`], with ConfigMap and Secret documents from more files
    /// (`wasmpod run --config FILE`).
    pub fn from_files(path: &Path, config: &[PathBuf]) -> Result<PodSpec, InvalidPod> {
        let read = |path: &Path| {
            read_bounded(path).map_err(|message| InvalidPod {
                file: Some(path.to_owned()),
                errors: vec![FieldError::new("", message)],
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
        for file in config {
            let mut errors = Vec::new();
            for (i, doc) in documents(&read(file)?)
                .map_err(in_file(file))?
                .into_iter()
                .enumerate()
            {
                match kind_of(&doc) {
                    Some(Kind::ConfigMap | Kind::Secret) if is_v1(&doc) => {
                        store.add(doc, &format!("document {}", i + 1), &mut errors)
                    }
                    // The node's (see `read_priority_classes`).
                    _ if priority::is_priority_class(&doc) => {}
                    _ => errors.push(FieldError::new(
                        format!("document {}", i + 1),
                        "expected a v1 ConfigMap or Secret, or a scheduling.k8s.io/v1 PriorityClass",
                    )),
                }
            }
            if !errors.is_empty() {
                return Err(in_file(file)(InvalidPod { file: None, errors }));
            }
        }
        let text = read(path)?;
        let base = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let base = std::path::absolute(base).unwrap_or_else(|_| base.to_owned());
        PodSpec::parse(&text, &base, store).map_err(in_file(path))
    }

    /// Parses and validates Pod YAML; relative image paths are resolved against `base_dir`.
    /// Further documents may be the ConfigMaps and Secrets the pod uses.
    pub fn from_yaml(text: &str, base_dir: &Path) -> Result<PodSpec, InvalidPod> {
        PodSpec::parse(text, base_dir, ConfigStore::default())
    }

    fn parse(text: &str, base_dir: &Path, mut store: ConfigStore) -> Result<PodSpec, InvalidPod> {
        let invalid = |message: String| InvalidPod {
            file: None,
            errors: vec![FieldError::new("", message)],
        };
        let mut errors = Vec::new();
        let mut pod_doc = None;
        for (i, doc) in documents(text)?.into_iter().enumerate() {
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
                    errors.push(FieldError::new(at, "a file holds one Pod"));
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
        let Some(input) = pod_doc else {
            return Err(invalid(
                "no Pod document: expected apiVersion v1 and kind Pod".into(),
            ));
        };
        if input.pointer("/spec/containers").is_none() {
            errors.push(FieldError::new("spec.containers", "required value"));
        }
        let pod: k8s::Pod = match serde_path_to_error::deserialize(&input) {
            Ok(pod) => pod,
            Err(e) => {
                errors.push(FieldError::new(
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

    /// Validates a Kubernetes Pod value; relative image paths are resolved against `base_dir`.
    pub fn from_pod(pod: &k8s::Pod, base_dir: &Path) -> Result<PodSpec, InvalidPod> {
        let value = serde_json::to_value(pod).map_err(|e| InvalidPod {
            file: None,
            errors: vec![FieldError::new("", e.to_string())],
        })?;
        let text = serde_json::to_string(&value).unwrap_or_default();
        PodSpec::from_yaml(&text, base_dir)
    }

    /// The pod's name (`metadata.name`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pod's namespace (`metadata.namespace`, `default` when absent).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The .wasm files the pod's containers run, one per container in spec order, with the
    /// field that names each (`spec.containers[0].image`).
    pub fn images(&self) -> impl Iterator<Item = (String, &Path)> {
        self.containers
            .iter()
            .map(|c| (format!("{}.image", c.field), c.image.as_path()))
    }

    /// The pod's QoS class, as Kubernetes computes it.
    pub(crate) fn qos_class(&self) -> &'static str {
        if self.containers.iter().all(|c| c.resources.is_empty()) {
            "BestEffort"
        } else if self.containers.iter().all(|c| c.resources.guaranteed()) {
            "Guaranteed"
        } else {
            "Burstable"
        }
    }

    /// The container ports published on the host (`hostPort`), with the field of each.
    pub(crate) fn host_ports(&self) -> impl Iterator<Item = (String, &ContainerPort)> {
        self.containers.iter().flat_map(|c| {
            c.ports
                .iter()
                .enumerate()
                .filter(|(_, p)| p.host.is_some())
                .map(move |(i, p)| (format!("{}.ports[{i}].hostPort", c.field), p))
        })
    }

    /// The pod's effective requests, as Kubernetes computes them for scheduling: the sum over
    /// regular containers and sidecars, or the most any init container needs together with the
    /// sidecars started before it, whichever is larger (per resource).
    pub(crate) fn requests(&self) -> Requests {
        let mut long_running = Requests::default();
        let mut sidecars = Requests::default();
        let mut init_peak = Requests::default();
        for c in &self.containers {
            let r = Requests {
                memory: c.resources.memory_request.unwrap_or(0),
                cpu_milli: c.resources.cpu_request_milli.unwrap_or(0),
            };
            match c.role {
                Role::Regular => long_running = long_running.plus(r),
                Role::Sidecar => {
                    long_running = long_running.plus(r);
                    sidecars = sidecars.plus(r);
                    init_peak = init_peak.max(sidecars);
                }
                Role::Init => init_peak = init_peak.max(sidecars.plus(r)),
            }
        }
        long_running.max(init_peak)
    }

    pub(crate) fn has_init(&self) -> bool {
        self.containers.iter().any(|c| c.role != Role::Regular)
    }
}

/// A YAML file's text, refused when it is larger than the parser reads.
fn read_bounded(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read the file: {e}"))?;
    let mut text = String::new();
    file.take(yaml::MAX_INPUT as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the file: {e}"))?;
    if text.len() > yaml::MAX_INPUT {
        return Err(format!(
            "too large: more than {} bytes, at most that many are read",
            yaml::MAX_INPUT
        ));
    }
    Ok(text)
}

fn is_v1(doc: &Value) -> bool {
    doc.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

fn kind_of(doc: &Value) -> Option<Kind> {
    match doc.get("kind").and_then(Value::as_str) {
        Some("ConfigMap") => Some(Kind::ConfigMap),
        Some("Secret") => Some(Kind::Secret),
        _ => None,
    }
}

fn convert(
    pod: &k8s::Pod,
    base_dir: &Path,
    store: &ConfigStore,
    errors: &mut Vec<FieldError>,
) -> Option<PodSpec> {
    let meta = &pod.metadata;
    let name = meta.name.clone().unwrap_or_default();
    if name.is_empty() {
        errors.push(FieldError::new("metadata.name", "required value"));
    } else if let Err(why) = check_subdomain(&name) {
        errors.push(FieldError::new(
            "metadata.name",
            format!("invalid value {name:?}: {why}"),
        ));
    }
    let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
    if let Err(why) = check_label(&namespace) {
        errors.push(FieldError::new(
            "metadata.namespace",
            format!("invalid value {namespace:?}: {why}"),
        ));
    }
    if let Some(uid) = &meta.uid
        && let Err(why) = check_uid(uid)
    {
        errors.push(FieldError::new(
            "metadata.uid",
            format!("invalid value {uid:?}: {why}"),
        ));
    }
    let spec = pod.spec.as_ref()?;

    let restart_policy = match spec.restart_policy.as_deref() {
        None | Some("Always") => RestartPolicy::Always,
        Some("OnFailure") => RestartPolicy::OnFailure,
        Some("Never") => RestartPolicy::Never,
        Some(other) => {
            errors.push(FieldError::new(
                "spec.restartPolicy",
                format!("unsupported value {other:?}: must be Always, OnFailure or Never"),
            ));
            RestartPolicy::Always
        }
    };

    let mut volumes = Vec::new();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let path = format!("spec.volumes[{i}]");
        if let Err(why) = check_label(&v.name) {
            errors.push(FieldError::new(
                format!("{path}.name"),
                format!("invalid value {:?}: {why}", v.name),
            ));
        }
        if volumes.iter().any(|other: &Volume| other.name == v.name) {
            errors.push(FieldError::new(
                format!("{path}.name"),
                format!("duplicate value {:?}", v.name),
            ));
        }
        let kinds = [
            v.empty_dir.is_some(),
            v.host_path.is_some(),
            v.config_map.is_some(),
            v.secret.is_some(),
        ];
        match kinds.iter().filter(|k| **k).count() {
            0 => {
                errors.push(FieldError::new(
                    path,
                    "must specify a volume type (emptyDir, hostPath, configMap or secret)",
                ));
                continue;
            }
            1 => {}
            _ => {
                errors.push(FieldError::new(
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
                    errors.push(FieldError::new(
                        format!("{path}.emptyDir.medium"),
                        format!("unsupported value {other:?}: must be \"\" or Memory"),
                    ));
                    false
                }
            };
            let size_limit = e.size_limit.as_ref().and_then(|q| {
                quantity::parse(&q.0, 1.0)
                    .map_err(|why| {
                        errors.push(FieldError::new(format!("{path}.emptyDir.sizeLimit"), why))
                    })
                    .ok()
            });
            VolumeSource::EmptyDir { memory, size_limit }
        } else if let Some(host) = &v.host_path {
            let (target, create) = host_path(&path, host, base_dir, errors);
            VolumeSource::HostPath(target, create)
        } else if let Some(cm) = &v.config_map {
            let files = projected(
                &format!("{path}.configMap"),
                Kind::ConfigMap,
                &cm.name,
                cm.items.as_deref(),
                cm.optional,
                store,
                errors,
            );
            VolumeSource::Files(files)
        } else {
            let secret = v.secret.as_ref()?;
            let name = secret.secret_name.clone().unwrap_or_default();
            let files = projected(
                &format!("{path}.secret"),
                Kind::Secret,
                &name,
                secret.items.as_deref(),
                secret.optional,
                store,
                errors,
            );
            VolumeSource::Files(files)
        };
        volumes.push(Volume {
            name: v.name.clone(),
            source,
        });
    }

    // The longest each downward-API value can be once the pod runs: its own metadata, or a
    // generated UID, a node name, an IPv6 address.
    let field_len = |f: &env::FieldRef| -> u64 {
        use env::FieldRef;
        let of = |map: &Option<BTreeMap<String, String>>, k: &str| {
            map.as_ref()
                .and_then(|m| m.get(k))
                .map_or(0, |v| v.len() as u64)
        };
        match f {
            FieldRef::Name => name.len() as u64,
            FieldRef::Namespace => meta.namespace.as_ref().map_or(7, |n| n.len() as u64),
            FieldRef::Uid => 64,
            FieldRef::Label(k) => of(&meta.labels, k),
            FieldRef::Annotation(k) => of(&meta.annotations, k),
            FieldRef::NodeName => 253,
            FieldRef::PodIp => 45,
        }
    };
    let mut containers = Vec::new();
    let inits = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| (format!("spec.initContainers[{i}]"), c, true));
    let regulars = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("spec.containers[{i}]"), c, false));
    for (path, c, is_init) in inits.chain(regulars) {
        if let Some(container) = convert_container(
            &path, c, is_init, base_dir, &volumes, store, &field_len, errors,
        ) {
            if containers
                .iter()
                .any(|o: &ContainerSpec| o.name == container.name)
            {
                errors.push(FieldError::new(
                    format!("{path}.name"),
                    format!("duplicate value {:?}", container.name),
                ));
            }
            containers.push(container);
        }
    }
    if spec.containers.is_empty() {
        errors.push(FieldError::new(
            "spec.containers",
            "required value: a pod needs at least one container",
        ));
    }

    let grace_period = match spec.termination_grace_period_seconds {
        None => Duration::from_secs(30),
        Some(s) if s >= 0 => bounded_seconds(s),
        Some(s) => {
            errors.push(FieldError::new(
                "spec.terminationGracePeriodSeconds",
                format!("invalid value {s}: must be >= 0"),
            ));
            Duration::ZERO
        }
    };
    // The API server's bounds: 1 to 2^31 - 1 seconds.
    let active_deadline = match spec.active_deadline_seconds {
        None => None,
        Some(s) if (1..=i64::from(i32::MAX)).contains(&s) => Some(bounded_seconds(s)),
        Some(s) => {
            errors.push(FieldError::new(
                "spec.activeDeadlineSeconds",
                format!("invalid value {s}: must be between 1 and 2147483647, inclusive"),
            ));
            None
        }
    };
    let readiness_gates = spec
        .readiness_gates
        .iter()
        .flatten()
        .map(|g| g.condition_type.clone())
        .collect();

    let hostname = match &spec.hostname {
        Some(h) => {
            if let Err(why) = check_label(h) {
                errors.push(FieldError::new(
                    "spec.hostname",
                    format!("invalid value {h:?}: {why}"),
                ));
            }
            h.clone()
        }
        None => name.split('.').next().unwrap_or_default().to_owned(),
    };
    check_host_ports(&containers, errors);
    let priority_class = spec.priority_class_name.clone();
    if let Some(class) = &priority_class
        && let Err(why) = check_subdomain(class)
    {
        errors.push(FieldError::new(
            "spec.priorityClassName",
            format!("invalid value {class:?}: {why}"),
        ));
    }

    Some(PodSpec {
        priority_class,
        hostname,
        labels: meta.labels.clone().unwrap_or_default(),
        annotations: meta.annotations.clone().unwrap_or_default(),
        name,
        namespace,
        uid: meta.uid.clone(),
        containers,
        restart_policy,
        volumes,
        grace_period,
        active_deadline,
        readiness_gates,
    })
}

/// Checks a `hostPath` against its `type` (relative paths are relative to the YAML file);
/// `DirectoryOrCreate` and `FileOrCreate` make what is missing when the pod starts.
fn host_path(
    path: &str,
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
            errors.push(FieldError::new(
                format!("{path}.hostPath.type"),
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
        errors.push(FieldError::new(
            format!("{path}.hostPath.path"),
            format!("{} {why}", target.display()),
        ));
    }
    (target, create.filter(|_| !exists))
}

/// The files a `configMap` or `secret` volume shows: every key, or the `items` chosen.
fn projected(
    at: &str,
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
            errors.push(FieldError::new(
                format!("{at}.{field}"),
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
            errors.push(FieldError::new(
                format!("{at}.items[{i}].path"),
                format!("invalid value {path:?}: {why}"),
            ));
            continue;
        }
        // A file cannot also be a directory of another item (`a` and `a/b`), nor two items one
        // file.
        if let Some(other) = files.iter().position(|(p, _): &(String, Vec<u8>)| {
            p == path || is_parent(p, path) || is_parent(path, p)
        }) {
            errors.push(FieldError::new(
                format!("{at}.items[{i}].path"),
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
            None => errors.push(FieldError::new(
                format!("{at}.items[{i}].key"),
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

/// `envFrom` then `env`, with configMap and secret references resolved.
fn convert_env(
    path: &str,
    c: &k8s::Container,
    store: &ConfigStore,
    errors: &mut Vec<FieldError>,
) -> Vec<(String, EnvValue)> {
    let mut env = Vec::new();
    for (i, from) in c.env_from.iter().flatten().enumerate() {
        let at = format!("{path}.envFrom[{i}]");
        let (kind, name, optional) = match (&from.config_map_ref, &from.secret_ref) {
            (Some(r), None) => (Kind::ConfigMap, &r.name, r.optional),
            (None, Some(r)) => (Kind::Secret, &r.name, r.optional),
            _ => {
                errors.push(FieldError::new(
                    at,
                    "must specify one of configMapRef or secretRef",
                ));
                continue;
            }
        };
        let Some(data) = store.get(kind, name) else {
            if optional != Some(true) {
                errors.push(FieldError::new(
                    at,
                    format!("not found: no {} {name:?}", kind.name()),
                ));
            }
            continue;
        };
        let prefix = from.prefix.as_deref().unwrap_or_default();
        for (key, value) in data {
            // Kubernetes skips keys that are not valid variable names.
            let name = format!("{prefix}{key}");
            if name.contains('=') || name.chars().next().is_none_or(|c| c.is_ascii_digit()) {
                continue;
            }
            env.push((
                name,
                EnvValue::Literal {
                    value: String::from_utf8_lossy(value).into_owned(),
                    expand: false,
                },
            ));
        }
    }
    for (i, var) in c.env.iter().flatten().enumerate() {
        let at = format!("{path}.env[{i}]");
        if var.name.is_empty() || var.name.contains('=') {
            errors.push(FieldError::new(
                format!("{at}.name"),
                format!("invalid value {:?}", var.name),
            ));
        }
        let value = match (&var.value, &var.value_from) {
            (Some(_), Some(_)) => {
                errors.push(FieldError::new(at, "may not have both value and valueFrom"));
                continue;
            }
            (value, None) => EnvValue::Literal {
                value: value.clone().unwrap_or_default(),
                expand: true,
            },
            (None, Some(from)) => {
                let keyed =
                    |kind: Kind, name: &str, key: &str, optional: Option<bool>, field: &str| {
                        match store.get(kind, name).map(|d| d.get(key)) {
                            Some(Some(v)) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
                            _ if optional == Some(true) => Ok(None),
                            Some(None) => Err(FieldError::new(
                                format!("{at}.valueFrom.{field}.key"),
                                format!("not found: {} {name:?} has no key {key:?}", kind.name()),
                            )),
                            None => Err(FieldError::new(
                                format!("{at}.valueFrom.{field}.name"),
                                format!("not found: no {} {name:?}", kind.name()),
                            )),
                        }
                    };
                let found = if let Some(f) = &from.field_ref {
                    match env::FieldRef::parse(&f.field_path) {
                        Ok(f) => Ok(Some(EnvValue::Field(f))),
                        Err(why) => Err(FieldError::new(
                            format!("{at}.valueFrom.fieldRef.fieldPath"),
                            why,
                        )),
                    }
                } else if let Some(r) = &from.config_map_key_ref {
                    keyed(
                        Kind::ConfigMap,
                        &r.name,
                        &r.key,
                        r.optional,
                        "configMapKeyRef",
                    )
                    .map(|v| {
                        v.map(|value| EnvValue::Literal {
                            value,
                            expand: false,
                        })
                    })
                } else if let Some(r) = &from.secret_key_ref {
                    keyed(Kind::Secret, &r.name, &r.key, r.optional, "secretKeyRef").map(|v| {
                        v.map(|value| EnvValue::Literal {
                            value,
                            expand: false,
                        })
                    })
                } else {
                    Err(FieldError::new(
                        format!("{at}.valueFrom"),
                        "must specify fieldRef, configMapKeyRef or secretKeyRef",
                    ))
                };
                match found {
                    Ok(Some(v)) => v,
                    Ok(None) => continue,
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                }
            }
        };
        env.push((var.name.clone(), value));
    }
    env
}

/// Bounds what `$(VAR)` expansion can make of the environment and argv at start (each value, and
/// all of them together), computed from lengths only: a few lines of YAML can otherwise expand
/// exponentially.
fn check_expansion(
    path: &str,
    env: &[(String, EnvValue)],
    argv: &[String],
    field_len: &dyn Fn(&env::FieldRef) -> u64,
    errors: &mut Vec<FieldError>,
) {
    use env::{MAX_EXPANDED, MAX_EXPANDED_TOTAL, expanded_len};
    let mut lengths: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    let mut total = 0u64;
    let over = |what: String, len: u64, total: &mut u64, errors: &mut Vec<FieldError>| {
        *total = total.saturating_add(len);
        if len > MAX_EXPANDED {
            errors.push(FieldError::new(
                what,
                format!("expands to more than {MAX_EXPANDED} bytes"),
            ));
            true
        } else {
            false
        }
    };
    for (name, value) in env {
        let len = match value {
            EnvValue::Literal {
                value,
                expand: true,
            } => expanded_len(value, |v| lengths.get(v).copied()),
            EnvValue::Literal { value, .. } => value.len() as u64,
            EnvValue::Field(f) => field_len(f),
        };
        if over(format!("{path}.env[{name}]"), len, &mut total, errors) {
            return;
        }
        lengths.insert(name, len);
    }
    for (i, arg) in argv.iter().enumerate() {
        let len = expanded_len(arg, |v| lengths.get(v).copied());
        if over(format!("{path}.args[{i}]"), len, &mut total, errors) {
            return;
        }
    }
    if total > MAX_EXPANDED_TOTAL {
        errors.push(FieldError::new(
            format!("{path}.env"),
            format!("the environment and arguments expand to more than {MAX_EXPANDED_TOTAL} bytes"),
        ));
    }
}

#[allow(clippy::too_many_arguments)]
fn convert_container(
    path: &str,
    c: &k8s::Container,
    is_init: bool,
    base_dir: &Path,
    volumes: &[Volume],
    store: &ConfigStore,
    field_len: &dyn Fn(&env::FieldRef) -> u64,
    errors: &mut Vec<FieldError>,
) -> Option<ContainerSpec> {
    if let Err(why) = check_label(&c.name) {
        errors.push(FieldError::new(
            format!("{path}.name"),
            format!("invalid value {:?}: {why}", c.name),
        ));
    }
    let role = match (is_init, c.restart_policy.as_deref()) {
        (_, None) => {
            if is_init {
                Role::Init
            } else {
                Role::Regular
            }
        }
        (true, Some("Always")) => Role::Sidecar,
        (true, Some(other)) => {
            errors.push(FieldError::new(
                format!("{path}.restartPolicy"),
                format!("unsupported value {other:?}: an init container may only set Always"),
            ));
            Role::Init
        }
        (false, Some(_)) => {
            errors.push(FieldError::new(
                format!("{path}.restartPolicy"),
                "not supported by wasmpod: only init containers may set a restart policy",
            ));
            Role::Regular
        }
    };
    let image = match c.image.as_deref() {
        None | Some("") => {
            errors.push(FieldError::new(
                format!("{path}.image"),
                "required value: the path of a .wasm file",
            ));
            PathBuf::new()
        }
        Some(image) => {
            let file = resolve(base_dir, image.strip_prefix("file://").unwrap_or(image));
            if let Err(why) = check_wasm_file(&file) {
                errors.push(FieldError::new(
                    format!("{path}.image"),
                    format!("{} {why}", file.display()),
                ));
            }
            file
        }
    };
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
    let mut mounts: Vec<Mount> = Vec::new();
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let mpath = format!("{path}.volumeMounts[{i}]");
        let Some(volume) = volumes.iter().position(|v| v.name == m.name) else {
            errors.push(FieldError::new(
                format!("{mpath}.name"),
                format!("not found: no volume named {:?}", m.name),
            ));
            continue;
        };
        if !m.mount_path.starts_with('/') {
            errors.push(FieldError::new(
                format!("{mpath}.mountPath"),
                format!("invalid value {:?}: must be an absolute path", m.mount_path),
            ));
        } else if m.mount_path.split('/').any(|part| part == "..") {
            errors.push(FieldError::new(
                format!("{mpath}.mountPath"),
                "must not contain '..'",
            ));
        }
        if mounts.iter().any(|o| o.path == m.mount_path) {
            errors.push(FieldError::new(
                format!("{mpath}.mountPath"),
                format!("duplicate value {:?}", m.mount_path),
            ));
        }
        let sub_path = m.sub_path.clone().filter(|p| !p.is_empty());
        if let Some(sub) = &sub_path
            && let Err(why) = check_relative_path(sub)
        {
            errors.push(FieldError::new(
                format!("{mpath}.subPath"),
                format!("invalid value {sub:?}: {why}"),
            ));
        }
        if let VolumeSource::HostPath(host, create) = &volumes[volume].source {
            let target = sub_path.as_ref().map_or(host.clone(), |s| host.join(s));
            if target.is_file() || (*create == Some(HostCreate::File) && sub_path.is_none()) {
                errors.push(FieldError::new(
                    format!("{mpath}.name"),
                    format!(
                        "{} is a file: wasmpod mounts directories only (WASI preopens); mount \
                         the directory that holds it",
                        target.display()
                    ),
                ));
            }
        }
        mounts.push(Mount {
            volume,
            path: m.mount_path.clone(),
            read_only: m.read_only.unwrap_or(false),
            sub_path,
        });
    }
    let ports = convert_ports(path, c.ports.as_deref().unwrap_or_default(), errors);
    let is_regular_init = role == Role::Init;
    let mut probe = |field: &str, p: &Option<k8s::Probe>, threshold_one: bool| {
        let p = p.as_ref()?;
        let at = format!("{path}.{field}");
        if is_regular_init {
            errors.push(FieldError::new(
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
    let mut hook = |field: &str, h: Option<&k8s::LifecycleHandler>| {
        let h = h?;
        let at = format!("{path}.lifecycle.{field}");
        if is_regular_init {
            errors.push(FieldError::new(
                at,
                "not supported by init containers (only sidecars may have hooks)",
            ));
            return None;
        }
        let kinds = [h.exec.is_some(), h.http_get.is_some(), h.sleep.is_some()];
        match kinds.iter().filter(|k| **k).count() {
            0 => {
                errors.push(FieldError::new(
                    at,
                    "must specify a handler type (exec, httpGet or sleep)",
                ));
                return None;
            }
            1 => {}
            _ => {
                errors.push(FieldError::new(
                    at,
                    "may not specify more than one handler type",
                ));
                return None;
            }
        }
        if let Some(exec) = &h.exec {
            return exec_handler(&format!("{at}.exec"), exec, errors);
        }
        if let Some(get) = &h.http_get {
            return http_get(&format!("{at}.httpGet"), get, &ports, errors);
        }
        let sleep = h.sleep.as_ref()?;
        if sleep.seconds < 0 {
            errors.push(FieldError::new(
                format!("{at}.sleep.seconds"),
                format!("invalid value {}: must be >= 0", sleep.seconds),
            ));
            return None;
        }
        Some(Handler::Sleep(bounded_seconds(sleep.seconds)))
    };
    let lifecycle = c.lifecycle.as_ref();
    let post_start = hook("postStart", lifecycle.and_then(|l| l.post_start.as_ref()));
    let pre_stop = hook("preStop", lifecycle.and_then(|l| l.pre_stop.as_ref()));
    let resources = convert_resources(path, c.resources.as_ref(), errors);
    Some(ContainerSpec {
        name: c.name.clone(),
        field: path.to_owned(),
        startup,
        liveness,
        readiness,
        post_start,
        pre_stop,
        resources,
        role,
        image,
        argv,
        env,
        mounts,
        ports,
        working_dir: c.working_dir.clone(),
    })
}

fn convert_resources(
    path: &str,
    r: Option<&k8s::ResourceRequirements>,
    errors: &mut Vec<FieldError>,
) -> Resources {
    let Some(r) = r else {
        return Resources::default();
    };
    let mut quantity = |map: &Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
                        kind: &str,
                        key: &str,
                        scale: f64| {
        let q = map.as_ref()?.get(key)?;
        quantity::parse(&q.0, scale)
            .map_err(|e| errors.push(FieldError::new(format!("{path}.resources.{kind}.{key}"), e)))
            .ok()
    };
    let memory_limit = quantity(&r.limits, "limits", "memory", 1.0);
    let cpu_limit_milli = quantity(&r.limits, "limits", "cpu", 1000.0);
    // As the API server defaults them: a limit without a request is also the request.
    let memory_request = quantity(&r.requests, "requests", "memory", 1.0).or(memory_limit);
    let cpu_request_milli = quantity(&r.requests, "requests", "cpu", 1000.0).or(cpu_limit_milli);
    if let (Some(request), Some(limit)) = (cpu_request_milli, cpu_limit_milli)
        && request > limit
    {
        errors.push(FieldError::new(
            format!("{path}.resources.requests.cpu"),
            "must be less than or equal to the cpu limit",
        ));
    }
    if let (Some(request), Some(limit)) = (memory_request, memory_limit)
        && request > limit
    {
        errors.push(FieldError::new(
            format!("{path}.resources.requests.memory"),
            "must be less than or equal to the memory limit",
        ));
    }
    Resources {
        memory_limit,
        memory_request,
        cpu_limit_milli,
        cpu_request_milli,
    }
}

fn exec_handler(
    path: &str,
    exec: &k8s::ExecAction,
    errors: &mut Vec<FieldError>,
) -> Option<Handler> {
    match exec.command.as_deref() {
        Some([first, ..]) if !first.is_empty() => {
            Some(Handler::Exec(exec.command.clone().unwrap_or_default()))
        }
        _ => {
            errors.push(FieldError::new(
                format!("{path}.command"),
                "required value: the export or argv to run",
            ));
            None
        }
    }
}

/// `ports[]`: numbers in range, names unique DNS-1123 labels of at most 15 characters, TCP or
/// UDP.
fn convert_ports(
    path: &str,
    ports: &[k8s::ContainerPort],
    errors: &mut Vec<FieldError>,
) -> Vec<ContainerPort> {
    let mut out: Vec<ContainerPort> = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let at = format!("{path}.ports[{i}]");
        let number = |field: &str, v: i32, errors: &mut Vec<FieldError>| {
            u16::try_from(v).ok().filter(|v| *v > 0).or_else(|| {
                errors.push(FieldError::new(
                    format!("{at}.{field}"),
                    format!("invalid value {v}: must be between 1 and 65535"),
                ));
                None
            })
        };
        let Some(port) = number("containerPort", p.container_port, errors) else {
            continue;
        };
        let udp = match p.protocol.as_deref() {
            None | Some("TCP") => false,
            Some("UDP") => true,
            Some(other) => {
                errors.push(FieldError::new(
                    format!("{at}.protocol"),
                    format!("unsupported value {other:?}: wasmpod supports TCP and UDP"),
                ));
                false
            }
        };
        if let Some(name) = &p.name {
            if let Err(why) = check_label(name).and_then(|()| {
                if name.len() > 15 || !name.chars().any(|c| c.is_ascii_lowercase()) {
                    Err("must be at most 15 characters with at least one letter")
                } else {
                    Ok(())
                }
            }) {
                errors.push(FieldError::new(
                    format!("{at}.name"),
                    format!("invalid value {name:?}: {why}"),
                ));
            }
            if out.iter().any(|o| o.name.as_ref() == Some(name)) {
                errors.push(FieldError::new(
                    format!("{at}.name"),
                    format!("duplicate value {name:?}"),
                ));
            }
        }
        let host_ip = match p.host_ip.as_deref() {
            None | Some("") => std::net::IpAddr::from([127, 0, 0, 1]),
            Some(ip) => match ip.parse() {
                Ok(ip) => ip,
                Err(_) => {
                    errors.push(FieldError::new(
                        format!("{at}.hostIP"),
                        format!("invalid value {ip:?}: must be an IP address"),
                    ));
                    continue;
                }
            },
        };
        let host = match p.host_port {
            None | Some(0) => None,
            Some(_) if udp => {
                errors.push(FieldError::new(
                    format!("{at}.hostPort"),
                    "not supported by wasmpod for UDP ports",
                ));
                None
            }
            Some(hp) => {
                number("hostPort", hp, errors).map(|hp| std::net::SocketAddr::new(host_ip, hp))
            }
        };
        out.push(ContainerPort {
            name: p.name.clone(),
            port,
            udp,
            host,
        });
    }
    out
}

/// Two containers of a pod cannot publish the same host address and port.
fn check_host_ports(containers: &[ContainerSpec], errors: &mut Vec<FieldError>) {
    let mut seen: Vec<std::net::SocketAddr> = Vec::new();
    for c in containers {
        for (i, p) in c.ports.iter().enumerate() {
            let Some(host) = p.host else { continue };
            if seen.contains(&host) {
                errors.push(FieldError::new(
                    format!("{}.ports[{i}].hostPort", c.field),
                    format!("duplicate value {}", host.port()),
                ));
            }
            seen.push(host);
        }
    }
}

/// A probe's or handler's port: a number, or the name of one of the container's ports.
fn handler_port(
    at: &str,
    port: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString,
    ports: &[ContainerPort],
    errors: &mut Vec<FieldError>,
) -> Option<u16> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let found = match port {
        IntOrString::Int(n) => u16::try_from(*n).ok().filter(|n| *n > 0),
        IntOrString::String(name) => match name.parse::<u16>() {
            Ok(n) if n > 0 => Some(n),
            _ => ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.port),
        },
    };
    if found.is_none() {
        let why = match port {
            IntOrString::Int(n) => format!("invalid value {n}: must be between 1 and 65535"),
            IntOrString::String(name) => format!("not found: no container port named {name:?}"),
        };
        errors.push(FieldError::new(format!("{at}.port"), why));
    }
    found
}

/// `host` other than the pod IP is not honoured: the handler always targets the pod.
fn no_host(at: &str, host: &Option<String>, errors: &mut Vec<FieldError>) {
    if host.as_deref().is_some_and(|h| !h.is_empty()) {
        errors.push(FieldError::new(
            format!("{at}.host"),
            "not supported by wasmpod: probes and hooks always target the pod IP",
        ));
    }
}

fn http_get(
    at: &str,
    get: &k8s::HTTPGetAction,
    ports: &[ContainerPort],
    errors: &mut Vec<FieldError>,
) -> Option<Handler> {
    no_host(at, &get.host, errors);
    match get.scheme.as_deref() {
        None | Some("HTTP") => {}
        Some(other) => errors.push(FieldError::new(
            format!("{at}.scheme"),
            format!("unsupported value {other:?}: wasmpod supports HTTP"),
        )),
    }
    let path = get.path.clone().unwrap_or_else(|| "/".into());
    if !path.starts_with('/') || path.contains(|c: char| c.is_whitespace() || c.is_control()) {
        errors.push(FieldError::new(
            format!("{at}.path"),
            format!("invalid value {path:?}: must be an absolute path without spaces"),
        ));
    }
    let mut headers = Vec::new();
    for (i, h) in get.http_headers.iter().flatten().enumerate() {
        let bad = |s: &str| s.contains(['\r', '\n']);
        if h.name.is_empty() || h.name.contains([':', ' ']) || bad(&h.name) || bad(&h.value) {
            errors.push(FieldError::new(
                format!("{at}.httpHeaders[{i}]"),
                format!("invalid header {:?}", h.name),
            ));
        }
        headers.push((h.name.clone(), h.value.clone()));
    }
    let port = handler_port(at, &get.port, ports, errors)?;
    Some(Handler::HttpGet(HttpGet {
        port,
        path,
        headers,
    }))
}

fn convert_probe(
    path: &str,
    p: &k8s::Probe,
    threshold_one: bool,
    ports: &[ContainerPort],
    errors: &mut Vec<FieldError>,
) -> Option<Probe> {
    let kinds = [
        p.exec.is_some(),
        p.http_get.is_some(),
        p.tcp_socket.is_some(),
        p.grpc.is_some(),
    ];
    if kinds.iter().filter(|k| **k).count() > 1 {
        errors.push(FieldError::new(
            path,
            "may not specify more than one handler type",
        ));
        return None;
    }
    let handler = if let Some(exec) = &p.exec {
        exec_handler(&format!("{path}.exec"), exec, errors)?
    } else if let Some(get) = &p.http_get {
        http_get(&format!("{path}.httpGet"), get, ports, errors)?
    } else if let Some(tcp) = &p.tcp_socket {
        let at = format!("{path}.tcpSocket");
        no_host(&at, &tcp.host, errors);
        Handler::TcpSocket(handler_port(&at, &tcp.port, ports, errors)?)
    } else if let Some(grpc) = &p.grpc {
        let at = format!("{path}.grpc");
        let port = k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(grpc.port);
        Handler::Grpc {
            port: handler_port(&at, &port, ports, errors)?,
            service: grpc.service.clone().unwrap_or_default(),
        }
    } else {
        errors.push(FieldError::new(
            path,
            "must specify a handler type (exec, httpGet, tcpSocket or grpc)",
        ));
        return None;
    };
    let mut seconds = |field: &str, value: Option<i32>, default: i32, min: i32| -> u32 {
        let v = value.unwrap_or(default);
        if v < min {
            errors.push(FieldError::new(
                format!("{path}.{field}"),
                format!("invalid value {v}: must be >= {min}"),
            ));
            return default as u32;
        }
        v as u32
    };
    let initial_delay = seconds("initialDelaySeconds", p.initial_delay_seconds, 0, 0);
    let period = seconds("periodSeconds", p.period_seconds, 10, 1);
    let timeout = seconds("timeoutSeconds", p.timeout_seconds, 1, 1);
    let success_threshold = seconds("successThreshold", p.success_threshold, 1, 1);
    let failure_threshold = seconds("failureThreshold", p.failure_threshold, 3, 1);
    if threshold_one && success_threshold != 1 {
        errors.push(FieldError::new(
            format!("{path}.successThreshold"),
            format!("invalid value {success_threshold}: must be 1"),
        ));
    }
    let grace = match p.termination_grace_period_seconds {
        Some(g) if threshold_one && g >= 0 => Some(bounded_seconds(g)),
        Some(_) if !threshold_one => {
            errors.push(FieldError::new(
                format!("{path}.terminationGracePeriodSeconds"),
                "must not be set for readiness probes",
            ));
            None
        }
        Some(g) => {
            errors.push(FieldError::new(
                format!("{path}.terminationGracePeriodSeconds"),
                format!("invalid value {g}: must be >= 0"),
            ));
            None
        }
        None => None,
    };
    Some(Probe {
        handler,
        initial_delay: Duration::from_secs(initial_delay.into()),
        period: Duration::from_secs(period.into()),
        timeout: Duration::from_secs(timeout.into()),
        success_threshold,
        failure_threshold,
        grace,
    })
}

/// The longest duration wasmpod keeps (about 100 years): larger grace periods and deadlines,
/// which Kubernetes allows up to `i64::MAX` seconds, mean "never" in practice and are held to
/// this, so that no deadline computed from them can overflow.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A non-negative number of seconds from a Pod field, held to [`MAX_DURATION`].
fn bounded_seconds(s: i64) -> Duration {
    Duration::from_secs(s.max(0).unsigned_abs()).min(MAX_DURATION)
}

/// A relative path inside a volume (`subPath`, `items[].path`): no leading `/`, no empty, `.`
/// or `..` component, at most 4096 bytes.
fn check_relative_path(path: &str) -> Result<(), &'static str> {
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
fn is_parent(dir: &str, path: &str) -> bool {
    path.strip_prefix(dir)
        .is_some_and(|rest| rest.starts_with('/'))
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
/// `\0asm` magic.
fn check_wasm_file(file: &Path) -> Result<(), &'static str> {
    use std::io::Read;
    if !file.is_file() {
        return Err("does not exist");
    }
    let mut magic = [0u8; 4];
    match std::fs::File::open(file).and_then(|mut f| f.read_exact(&mut magic)) {
        Ok(()) if &magic == b"\0asm" => Ok(()),
        Ok(()) => Err("is not a WebAssembly module or component (no \\0asm magic)"),
        Err(_) => Err("cannot be read as a WebAssembly module or component"),
    }
}

fn resolve(base: &Path, path: &str) -> PathBuf {
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

#[cfg(test)]
mod tests;
