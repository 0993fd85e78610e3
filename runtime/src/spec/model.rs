//! wasmpod's own model of a pod: what validation makes of a Kubernetes Pod, holding only what
//! wasmpod honours.

mod volumes;

pub(crate) use volumes::{FileData, FileDir, HostCreate, Mount, Volume, VolumeSource};

use super::env::EnvValue;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The restart policy of a pod, or of one init container (`Always` makes it a sidecar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

/// What part a container plays in its pod (the event stream's `role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Role {
    /// An init container: runs to completion, in order, before the regular containers.
    Init,
    /// An init container with `restartPolicy: Always`: starts in order, runs beside the
    /// regular containers.
    Sidecar,
    /// A regular container.
    Regular,
}

impl Role {
    /// The role as the event stream writes it.
    pub fn as_str(self) -> &'static str {
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
    // Probes, hooks and a registry image's pull are boxed: most containers have none of them,
    // and each sleeping pod keeps its containers' specs for good.
    pub startup: Option<Box<Probe>>,
    pub liveness: Option<Box<Probe>>,
    pub readiness: Option<Box<Probe>>,
    pub post_start: Option<Box<Handler>>,
    pub pre_stop: Option<Box<Handler>>,
    pub resources: Resources,
    /// `terminationMessagePath`/`terminationMessagePolicy`, when the container declares them.
    pub termination: Option<TerminationMessage>,
    /// Its single-file mounts, by guest directory.
    pub file_dirs: Vec<FileDir>,
    /// A registry image, pulled when the container first starts (`image` is then empty until
    /// it is).
    pub pull: Option<Box<ImagePull>>,
    /// `stdin: true`: each instance reads a stream that attachers write to; with `stdinOnce`,
    /// the stream ends when the first attacher leaves.
    pub stdin: Option<StdinMode>,
}

impl ContainerSpec {
    /// Whether it runs for as long as its pod, whose restart policy is `pod`: a sidecar, or a
    /// regular container under `Always` (a Job's containers and init containers end).
    pub(crate) fn lives_as_long_as_its_pod(&self, pod: RestartPolicy) -> bool {
        match self.role {
            Role::Sidecar => true,
            Role::Regular => pod == RestartPolicy::Always,
            Role::Init => false,
        }
    }
}

/// How a container's stdin stays open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StdinMode {
    /// `stdinOnce`: closed when the first attach session ends.
    pub once: bool,
}

/// A container's registry image and how it is pulled.
#[derive(Debug, Clone)]
pub(crate) struct ImagePull {
    pub reference: oci_spec::distribution::Reference,
    /// The reference as `status.containerStatuses[].image` shows it.
    pub shown: String,
    pub policy: super::image::PullPolicy,
    /// The container's `command` and `args`: with the image config's `Entrypoint` and `Cmd`
    /// they make argv, as Kubernetes makes it.
    pub command: Option<Vec<String>>,
    pub args: Option<Vec<String>>,
}

/// Where a container writes its termination message (the kubelet's `terminationMessagePath`):
/// a file `file` in a directory of its own, preopened at `dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TerminationMessage {
    pub dir: String,
    pub file: String,
    /// `FallbackToLogsOnError`: an empty file and a failure give the log's tail.
    pub fallback_to_logs: bool,
}

/// What a pod asks of its node: memory in bytes, CPU in thousandths of a core, and containers
/// running at once (each one a live instance, whose memory mappings count against the process's
/// `vm.max_map_count`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Requests {
    pub memory: u64,
    pub cpu_milli: u64,
    pub containers: u64,
}

impl Requests {
    pub(crate) fn plus(self, other: Requests) -> Requests {
        Requests {
            memory: self.memory.saturating_add(other.memory),
            cpu_milli: self.cpu_milli.saturating_add(other.cpu_milli),
            containers: self.containers.saturating_add(other.containers),
        }
    }

    fn max(self, other: Requests) -> Requests {
        Requests {
            memory: self.memory.max(other.memory),
            cpu_milli: self.cpu_milli.max(other.cpu_milli),
            containers: self.containers.max(other.containers),
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

    /// A pod-level CPU limit as a share of one core (more than one for a limit of several).
    pub(crate) fn pod_cpu_share(&self) -> Option<f64> {
        self.cpu_limit_milli.map(|m| m.max(1) as f64 / 1000.0)
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
/// assert_eq!(paths, ["spec.containers[0].image", "spec.containers[0].securityContext.privileged"]);
/// ```
#[derive(Debug, Clone)]
pub struct PodSpec {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) uid: Option<String>,
    /// Init containers (and sidecars) first, in order, then regular containers.
    /// Shared with the supervisor's record of each container (a sleeping pod keeps one copy).
    pub(crate) containers: Vec<std::sync::Arc<ContainerSpec>>,
    /// `spec.resources`: the pod's CPU and memory as a whole (empty when not given).
    pub(crate) pod_resources: Resources,
    pub(crate) restart_policy: RestartPolicy,
    pub(crate) volumes: Vec<Volume>,
    pub(crate) grace_period: Duration,
    pub(crate) active_deadline: Option<Duration>,
    pub(crate) readiness_gates: Vec<String>,
    /// `spec.hostname`, or the pod's name.
    pub(crate) hostname: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) annotations: BTreeMap<String, String>,
    /// `spec.priority` as written (the API server fills it in from the PriorityClass; given, it
    /// must agree with it).
    pub(crate) priority: Option<i32>,
    /// `spec.nodeName`: the node the pod is bound to, when the manifest says.
    pub(crate) node_name: Option<String>,
    /// `spec.serviceAccountName` (or the deprecated `serviceAccount`), else `default`.
    pub(crate) service_account: String,
    /// `hostAliases`, `dnsPolicy` and `dnsConfig`: what the pod's name lookup does.
    pub(crate) dns: std::sync::Arc<super::Dns>,
    /// `imagePullSecrets`: their `.dockerconfigjson` documents, in order.
    pub(crate) pull_secrets: Vec<serde_json::Value>,
    /// `imagePullSecrets` naming no secret the pod was given: pulls go on without them, with a
    /// warning (as the kubelet's).
    pub(crate) missing_pull_secrets: Vec<String>,
    /// Volumes mounted without part of what they name (the API server's injected
    /// `kube-api-access-*` volume without a token or CA): a warning each, as the kubelet's
    /// `FailedMount`, and the pod runs.
    pub(crate) incomplete_volumes: Vec<String>,
    /// How its HTTP handler containers serve (`wasmpod.dev/http-*` annotations).
    pub(crate) serving: super::Serving,
    /// `spec.hostNetwork`: its components' sockets are the host's (a node must allow it).
    pub(crate) host_network: bool,
    /// What places it beyond its requests, when any of it is set ([`PodSpec::scheduling`]).
    pub(crate) scheduling: Option<Box<Scheduling>>,
}

/// What places a pod on a node beyond its requests. Few pods set any of it, and each sleeping
/// pod keeps its spec for as long as it lives: a spec holds it boxed, and only when some of it
/// is set.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Scheduling {
    /// `spec.overhead`: counted with the requests (no container is ever charged for it).
    pub overhead: Requests,
    /// `spec.tolerations`, validated.
    pub tolerations: Vec<k8s_openapi::api::core::v1::Toleration>,
    /// `spec.nodeSelector`: labels the node must have.
    pub node_selector: BTreeMap<String, String>,
    /// `spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`'s terms,
    /// validated (`None`: no requirement).
    pub node_affinity: Option<Vec<k8s_openapi::api::core::v1::NodeSelectorTerm>>,
    /// Resources besides CPU and memory its containers ask for (extended resources): the node
    /// advertises none, so such a pod stays Pending.
    pub extended_resources: std::collections::BTreeSet<String>,
    /// Pod (anti-)affinity and topology spread: evaluated against the node's pods at admission.
    pub placement: super::Placement,
    /// `spec.priorityClassName`, resolved by the node at admission.
    pub priority_class: Option<String>,
    /// `spec.preemptionPolicy` as written (given, it must agree with the PriorityClass).
    pub preemption_policy: Option<String>,
    /// `spec.runtimeClassName`, resolved by the node at creation.
    pub runtime_class: Option<String>,
}

impl Scheduling {
    /// Nothing set.
    const NONE: Scheduling = Scheduling {
        overhead: Requests {
            memory: 0,
            cpu_milli: 0,
            containers: 0,
        },
        tolerations: Vec::new(),
        node_selector: BTreeMap::new(),
        node_affinity: None,
        extended_resources: std::collections::BTreeSet::new(),
        placement: super::Placement::NONE,
        priority_class: None,
        preemption_policy: None,
        runtime_class: None,
    };

    /// `self`, boxed if any of it is set.
    pub(crate) fn boxed(self) -> Option<Box<Scheduling>> {
        (self != Scheduling::NONE).then(|| Box::new(self))
    }
}

impl PodSpec {
    /// What places the pod beyond its requests (all empty when none of it is set).
    pub(crate) fn scheduling(&self) -> &Scheduling {
        static NONE: Scheduling = Scheduling::NONE;
        self.scheduling.as_deref().unwrap_or(&NONE)
    }

    /// The pod's name (`metadata.name`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pod's namespace (`metadata.namespace`, `default` when absent).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Binds the pod to the node named `node`, as the kubelet binds a pod it reads from a file
    /// (its file source sets `spec.nodeName` to its own name). Returns the node the pod named
    /// before, when another (a pod exported from a cluster names the cluster's node).
    pub fn bind_to(&mut self, node: &str) -> Option<String> {
        let before = self.node_name.replace(node.to_owned());
        before.filter(|b| b != node)
    }

    /// The .wasm files the pod's containers run, one per container in spec order, with the
    /// field that names each (`spec.containers[0].image`); an empty path for a container whose
    /// image comes from a registry (it is pulled when the container starts).
    pub fn images(&self) -> impl Iterator<Item = (String, &Path)> {
        self.containers
            .iter()
            .map(|c| (format!("{}.image", c.field), c.image.as_path()))
    }

    /// The containers with `stdin: true`, in spec order: each one's name and the field that says
    /// so (`spec.containers[0].stdin`).
    pub fn stdin_containers(&self) -> impl Iterator<Item = (&str, String)> {
        self.containers
            .iter()
            .filter(|c| c.stdin.is_some())
            .map(|c| (c.name.as_str(), format!("{}.stdin", c.field)))
    }

    /// The pod's QoS class, as Kubernetes computes it.
    pub(crate) fn qos_class(&self) -> &'static str {
        // Pod-level resources, when given, decide (PodLevelResources).
        if !self.pod_resources.is_empty() {
            return if self.pod_resources.guaranteed() {
                "Guaranteed"
            } else {
                "Burstable"
            };
        }
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
                containers: 1,
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
        let mut total = long_running.max(init_peak);
        // Pod-level requests are the pod's, whatever its containers ask.
        if let Some(memory) = self.pod_resources.memory_request {
            total.memory = memory;
        }
        if let Some(cpu) = self.pod_resources.cpu_request_milli {
            total.cpu_milli = cpu;
        }
        // As the scheduler and the kubelet's admission count it: on top of the requests.
        total.plus(Requests {
            containers: 0,
            ..self.scheduling().overhead
        })
    }

    pub(crate) fn has_init(&self) -> bool {
        self.containers.iter().any(|c| c.role != Role::Regular)
    }
}
