//! The conversion of a whole Pod: metadata, restart policy, volumes, containers, grace period and
//! deadline, hostname, priority class.

use super::config::{ConfigStore, Kind};
use super::containers::{PodContext, convert_container};
use super::env;
use super::errors::{FieldError, FieldPath};
use super::model::{ContainerSpec, PodSpec, RestartPolicy, Scheduling};
use super::names::{bounded_seconds, check_label, check_subdomain, check_uid};
use super::ports::check_host_ports;
use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub(super) fn convert(
    pod: &k8s::Pod,
    base_dir: &Path,
    store: &ConfigStore,
    errors: &mut Vec<FieldError>,
) -> Option<PodSpec> {
    let meta = &pod.metadata;
    let (name, namespace) = check_metadata(meta, errors);
    let spec = pod.spec.as_ref()?;
    // The pod's service account, as the API server defaults it.
    let account = spec
        .service_account_name
        .as_deref()
        .or(spec.service_account.as_deref())
        .unwrap_or("default");
    let restart_policy = restart_policy(spec, errors);
    let mut incomplete_volumes = Vec::new();
    let volumes = super::volumes::convert(
        spec,
        base_dir,
        account,
        store,
        &mut incomplete_volumes,
        errors,
    );
    let field_len = |f: &env::FieldRef| downward_len(f, meta, account);
    let context = PodContext {
        base_dir,
        volumes: &volumes,
        store,
        field_len: &field_len,
    };
    let (mut containers, extended_resources) = convert_containers(spec, &context, errors);
    let host_network = spec.host_network == Some(true);
    if host_network {
        host_network_ports(&mut containers, errors);
    }
    let (grace_period, active_deadline) = lifetimes(spec, errors);
    let readiness_gates = spec
        .readiness_gates
        .iter()
        .flatten()
        .map(|g| g.condition_type.clone())
        .collect();
    let hostname = hostname(spec, &name, errors);
    check_host_ports(&containers, errors);
    check_scheduling(spec, errors);
    let priority_class = spec.priority_class_name.clone();
    if let Some(class) = &priority_class
        && let Err(why) = check_subdomain(class)
    {
        errors.push(FieldError::invalid(
            "spec.priorityClassName",
            format!("invalid value {class:?}: {why}"),
        ));
    }

    let labels = meta.labels.clone().unwrap_or_default();
    let annotations = meta.annotations.clone().unwrap_or_default();
    let (pull_secrets, missing_pull_secrets) = pull_secrets(spec, store, errors);
    let pod_resources = super::resources::pod_level(spec.resources.as_ref(), &containers, errors);
    let scheduling = Scheduling {
        overhead: super::resources::overhead(spec.overhead.as_ref(), errors),
        tolerations: check_tolerations(spec.tolerations.as_deref().unwrap_or_default(), errors),
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        node_affinity: super::affinity::check_affinity(spec.affinity.as_ref(), errors),
        extended_resources,
        placement: super::placement::check(spec, &namespace, &labels, errors),
        priority_class,
        preemption_policy: spec.preemption_policy.clone(),
        runtime_class: spec.runtime_class_name.clone(),
    };
    Some(PodSpec {
        scheduling: scheduling.boxed(),
        host_network,
        pod_resources,
        serving: super::serving::check(&annotations, errors),
        pull_secrets,
        missing_pull_secrets,
        incomplete_volumes,
        dns: super::dns::shared(super::dns::check(spec, errors)),
        node_name: spec.node_name.clone().filter(|n| !n.is_empty()),
        service_account: account.to_owned(),
        priority: spec.priority,
        hostname,
        labels,
        annotations,
        name,
        namespace,
        uid: meta.uid.clone(),
        containers: shared(containers),
        restart_policy,
        volumes,
        grace_period,
        active_deadline,
        readiness_gates,
    })
}

/// `metadata`: the name (required), the namespace (`default` when not given), the UID.
fn check_metadata(meta: &ObjectMeta, errors: &mut Vec<FieldError>) -> (String, String) {
    let name = meta.name.clone().unwrap_or_default();
    if name.is_empty() {
        errors.push(FieldError::required("metadata.name", "required value"));
    } else if let Err(why) = check_subdomain(&name) {
        errors.push(FieldError::invalid(
            "metadata.name",
            format!("invalid value {name:?}: {why}"),
        ));
    }
    let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
    if let Err(why) = check_label(&namespace) {
        errors.push(FieldError::invalid(
            "metadata.namespace",
            format!("invalid value {namespace:?}: {why}"),
        ));
    }
    if let Some(uid) = &meta.uid
        && let Err(why) = check_uid(uid)
    {
        errors.push(FieldError::invalid(
            "metadata.uid",
            format!("invalid value {uid:?}: {why}"),
        ));
    }
    (name, namespace)
}

fn restart_policy(spec: &k8s::PodSpec, errors: &mut Vec<FieldError>) -> RestartPolicy {
    match spec.restart_policy.as_deref() {
        None | Some("Always") => RestartPolicy::Always,
        Some("OnFailure") => RestartPolicy::OnFailure,
        Some("Never") => RestartPolicy::Never,
        Some(other) => {
            errors.push(FieldError::unsupported(
                "spec.restartPolicy",
                format!("unsupported value {other:?}: must be Always, OnFailure or Never"),
            ));
            RestartPolicy::Always
        }
    }
}

/// The longest a downward-API value can be once the pod runs: its own metadata, or a generated
/// UID, a node name, an IPv6 address.
fn downward_len(f: &env::FieldRef, meta: &ObjectMeta, account: &str) -> u64 {
    use env::FieldRef;
    let of = |map: &Option<BTreeMap<String, String>>, k: &str| {
        map.as_ref()
            .and_then(|m| m.get(k))
            .map_or(0, |v| v.len() as u64)
    };
    match f {
        FieldRef::Name => meta.name.as_ref().map_or(0, |n| n.len() as u64),
        FieldRef::Namespace => meta.namespace.as_ref().map_or(7, |n| n.len() as u64),
        FieldRef::Uid => 64,
        FieldRef::Label(k) => of(&meta.labels, k),
        FieldRef::Annotation(k) => of(&meta.annotations, k),
        FieldRef::NodeName => 253,
        FieldRef::ServiceAccountName => account.len() as u64,
        FieldRef::PodIp | FieldRef::HostIp => 45,
    }
}

/// The containers' specs as the pod keeps them, shared with its supervisor and sized exactly (the
/// list they were checked in grew one by one: a pod of one container would keep room for four,
/// and collecting it in place would keep its whole buffer).
fn shared(containers: Vec<ContainerSpec>) -> Vec<Arc<ContainerSpec>> {
    let mut shared = Vec::with_capacity(containers.len());
    shared.extend(containers.into_iter().map(Arc::new));
    shared
}

/// `spec.initContainers` then `spec.containers`, each named once; and the extended resources
/// they ask for.
fn convert_containers(
    spec: &k8s::PodSpec,
    context: &PodContext<'_>,
    errors: &mut Vec<FieldError>,
) -> (Vec<ContainerSpec>, BTreeSet<String>) {
    let asked: Vec<_> = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| (FieldPath::new("spec").child("initContainers").index(i), c))
        .chain(
            spec.containers
                .iter()
                .enumerate()
                .map(|(i, c)| (FieldPath::new("spec").child("containers").index(i), c)),
        )
        .collect();
    let extended_resources = super::resources::extended(&asked, errors);
    let mut containers = Vec::new();
    let inits = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| {
            (
                FieldPath::new("spec").child("initContainers").index(i),
                c,
                true,
            )
        });
    let regulars = spec.containers.iter().enumerate().map(|(i, c)| {
        (
            FieldPath::new("spec").child("containers").index(i),
            c,
            false,
        )
    });
    for (path, c, is_init) in inits.chain(regulars) {
        if let Some(container) = convert_container(&path, c, is_init, context, errors) {
            if containers
                .iter()
                .any(|o: &ContainerSpec| o.name == container.name)
            {
                errors.push(FieldError::duplicate(
                    path.child("name"),
                    format!("duplicate value {:?}", container.name),
                ));
            }
            containers.push(container);
        }
    }
    if spec.containers.is_empty() {
        errors.push(FieldError::required(
            "spec.containers",
            "required value: a pod needs at least one container",
        ));
    }

    (containers, extended_resources)
}

/// `terminationGracePeriodSeconds` (30 s when not given) and `activeDeadlineSeconds`.
fn lifetimes(spec: &k8s::PodSpec, errors: &mut Vec<FieldError>) -> (Duration, Option<Duration>) {
    let grace_period = match spec.termination_grace_period_seconds {
        None => Duration::from_secs(30),
        Some(s) if s >= 0 => bounded_seconds(s),
        Some(s) => {
            errors.push(FieldError::invalid(
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
            errors.push(FieldError::invalid(
                "spec.activeDeadlineSeconds",
                format!("invalid value {s}: must be between 1 and 2147483647, inclusive"),
            ));
            None
        }
    };
    (grace_period, active_deadline)
}

/// `spec.hostname`, else the pod's name up to its first dot.
fn hostname(spec: &k8s::PodSpec, name: &str, errors: &mut Vec<FieldError>) -> String {
    match &spec.hostname {
        Some(h) => {
            if let Err(why) = check_label(h) {
                errors.push(FieldError::invalid(
                    "spec.hostname",
                    format!("invalid value {h:?}: {why}"),
                ));
            }
            h.clone()
        }
        None => name.split('.').next().unwrap_or_default().to_owned(),
    }
}

/// What decides where and whether the pod may run: its security context and namespaces, its
/// scheduler, preemption policy, runtime class and OS.
fn check_scheduling(spec: &k8s::PodSpec, errors: &mut Vec<FieldError>) {
    super::security::check_pod(spec.security_context.as_ref(), errors);
    // The node is its own scheduler: a pod for another one would never run.
    if let Some(name) = spec.scheduler_name.as_deref()
        && name != "default-scheduler"
    {
        errors.push(FieldError::unsupported(
            "spec.schedulerName",
            format!("unsupported value {name:?}: wasmpod admits pods itself, as default-scheduler"),
        ));
    }
    if let Some(policy) = spec.preemption_policy.as_deref()
        && !matches!(policy, "PreemptLowerPriority" | "Never")
    {
        errors.push(FieldError::unsupported(
            "spec.preemptionPolicy",
            format!("unsupported value {policy:?}: must be PreemptLowerPriority or Never"),
        ));
    }
    // No API server runs on a node, so no service account token is mounted: the names are
    // accepted (an exported pod carries them) and a token volume would have to be given.
    // The node resolves the runtime class when it creates the pod.
    if let Some(class) = spec.runtime_class_name.as_deref()
        && let Err(why) = check_subdomain(class)
    {
        errors.push(FieldError::invalid(
            "spec.runtimeClassName",
            format!("invalid value {class:?}: {why}"),
        ));
    }
    // `enableServiceLinks` adds variables for the namespace's Services: a node has none, so
    // either value leaves the environment as it is.
    super::security::check_namespaces(spec, errors);
    // The kubelet admits only pods for its own OS; the node is Linux (`kubernetes.io/os`).
    if let Some(os) = &spec.os
        && os.name != "linux"
    {
        errors.push(FieldError::unsupported(
            "spec.os.name",
            format!(
                "unsupported value {:?}: the pod's OS must be the node's, linux (wasm guests run \
                 on the node's own)",
                os.name
            ),
        ));
    }
}

/// A host-network pod's ports are the host's: a `hostPort` must be its `containerPort` (as the
/// API server checks), and nothing is published for it (the guest binds the host's port).
fn host_network_ports(containers: &mut [ContainerSpec], errors: &mut Vec<FieldError>) {
    for c in containers {
        for (i, p) in c.ports.iter_mut().enumerate() {
            if let Some(host) = p.host.take()
                && host.port() != p.port
            {
                errors.push(FieldError::invalid(
                    format!("{}.ports[{i}].hostPort", c.field),
                    format!(
                        "invalid value {}: must match containerPort when hostNetwork is true",
                        host.port()
                    ),
                ));
            }
        }
    }
}

/// `tolerations[]` as the API server validates them: `Exists` or `Equal` (the default), no value
/// with `Exists`, a key unless `Exists` tolerates every taint, a known effect, and
/// `tolerationSeconds` only for `NoExecute`.
fn check_tolerations(
    list: &[k8s::Toleration],
    errors: &mut Vec<FieldError>,
) -> Vec<k8s::Toleration> {
    let at = FieldPath::new("spec").child("tolerations");
    for (i, t) in list.iter().enumerate() {
        let at = at.index(i);
        let key = t.key.as_deref().unwrap_or_default();
        match t.operator.as_deref() {
            None | Some("" | "Equal") if key.is_empty() => errors.push(FieldError::invalid(
                at.child("operator"),
                "must be Exists when key is empty, which means \"match all values and all keys\"",
            )),
            None | Some("" | "Equal") => {}
            Some("Exists") if t.value.as_deref().is_some_and(|v| !v.is_empty()) => {
                errors.push(FieldError::invalid(
                    at.child("value"),
                    "value must be empty when `operator` is 'Exists'",
                ))
            }
            Some("Exists") => {}
            Some(other) => errors.push(FieldError::unsupported(
                at.child("operator"),
                format!("unsupported value {other:?}: must be Equal or Exists"),
            )),
        }
        match t.effect.as_deref() {
            None | Some("" | "NoSchedule" | "PreferNoSchedule" | "NoExecute") => {}
            Some(other) => errors.push(FieldError::unsupported(
                at.child("effect"),
                format!(
                    "unsupported value {other:?}: must be NoSchedule, PreferNoSchedule or NoExecute"
                ),
            )),
        }
        if t.toleration_seconds.is_some() && t.effect.as_deref() != Some("NoExecute") {
            errors.push(FieldError::invalid(
                at.child("effect"),
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
    }
    list.to_vec()
}

/// `imagePullSecrets`: Secrets of type `kubernetes.io/dockerconfigjson` given with the pod,
/// their `.dockerconfigjson` key a docker-style config.
/// The docker configs of the pod's `imagePullSecrets`, and the names of those it was not given
/// (the kubelet pulls without them, and warns).
fn pull_secrets(
    spec: &k8s::PodSpec,
    store: &ConfigStore,
    errors: &mut Vec<FieldError>,
) -> (Vec<serde_json::Value>, Vec<String>) {
    let (mut configs, mut missing) = (Vec::new(), Vec::new());
    for (i, r) in spec.image_pull_secrets.iter().flatten().enumerate() {
        let at = FieldPath::new("spec")
            .child("imagePullSecrets")
            .index(i)
            .child("name");
        let name = r.name.as_str();
        let Some(data) = store.get(Kind::Secret, name) else {
            missing.push(name.to_owned());
            continue;
        };
        match data
            .get(".dockerconfigjson")
            .and_then(|d| serde_json::from_slice::<serde_json::Value>(d).ok())
        {
            Some(config)
                if config
                    .get("auths")
                    .is_some_and(serde_json::Value::is_object) =>
            {
                configs.push(config)
            }
            _ => errors.push(FieldError::invalid(
                at,
                format!(
                    "invalid value {name:?}: the secret has no .dockerconfigjson key holding a \
                     docker config ({{\"auths\": {{...}}}}); make it with kubectl create secret \
                     docker-registry"
                ),
            )),
        }
    }
    (configs, missing)
}
