//! `resources`: limits and requests of memory and CPU, with the API server's defaulting, and the
//! other resources a container may name (extended resources, ephemeral storage).

use super::errors::{FieldError, FieldPath};
use super::model::Resources;
use super::quantity;
use k8s_openapi::api::core::v1 as k8s;

pub(super) fn convert_resources(
    path: &FieldPath,
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
            .map_err(|e| {
                errors.push(FieldError::invalid(
                    path.child("resources").child(kind).child(key),
                    e,
                ))
            })
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
        errors.push(FieldError::invalid(
            path.child("resources").child("requests").child("cpu"),
            "must be less than or equal to the cpu limit",
        ));
    }
    if let (Some(request), Some(limit)) = (memory_request, memory_limit)
        && request > limit
    {
        errors.push(FieldError::invalid(
            path.child("resources").child("requests").child("memory"),
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

/// `spec.overhead`: what running the pod costs beside its containers, set by the RuntimeClass
/// admission from the pod's class (`overhead.podFixed`). The node counts it with the pod's
/// requests; its memory and CPU are all a wasm node has to count.
pub(super) fn overhead(
    map: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
    errors: &mut Vec<FieldError>,
) -> super::Requests {
    let path = FieldPath::new("spec").child("overhead");
    let mut parsed = super::Requests::default();
    for (key, q) in map.into_iter().flatten() {
        let (scale, into) = match key.as_str() {
            "memory" => (1.0, &mut parsed.memory),
            "cpu" => (1000.0, &mut parsed.cpu_milli),
            _ => {
                errors.push(FieldError::not_supported(
                    path.child(key),
                    "not supported: a wasm node counts a pod's overhead of cpu and memory",
                ));
                continue;
            }
        };
        match quantity::parse(&q.0, scale) {
            Ok(v) => *into = v,
            Err(e) => errors.push(FieldError::invalid(path.child(key), e)),
        }
    }
    parsed
}

/// Pod-level `spec.resources` (Kubernetes' PodLevelResources): CPU and memory for the pod as a
/// whole. Its requests replace the sum of the containers' for scheduling and must cover it; its
/// limits cap every container together, and each container's own limit must fit in them.
pub(super) fn pod_level(
    r: Option<&k8s::ResourceRequirements>,
    containers: &[super::ContainerSpec],
    errors: &mut Vec<FieldError>,
) -> Resources {
    let path = FieldPath::new("spec");
    let Some(r) = r else {
        return Resources::default();
    };
    for (kind, map) in [("limits", &r.limits), ("requests", &r.requests)] {
        for key in map.iter().flatten().map(|(k, _)| k) {
            if key != "cpu" && key != "memory" {
                errors.push(FieldError::not_supported(
                    path.child("resources").child(kind).child(key),
                    "not supported: pod-level resources may be cpu and memory",
                ));
            }
        }
    }
    if r.claims.as_ref().is_some_and(|c| !c.is_empty()) {
        errors.push(FieldError::not_supported(
            path.child("resources").child("claims"),
            "not supported by wasmpod: a wasm node has no dynamic resources (DRA)",
        ));
    }
    let pod = convert_resources(&path, Some(r), errors);
    let running = containers
        .iter()
        .filter(|c| c.role != super::Role::Init)
        .map(|c| &c.resources);
    let (memory, cpu) = running.fold((0u64, 0u64), |(m, c), r| {
        (
            m.saturating_add(r.memory_request.unwrap_or(0)),
            c.saturating_add(r.cpu_request_milli.unwrap_or(0)),
        )
    });
    let requests = path.child("resources").child("requests");
    if pod.memory_request.is_some_and(|p| p < memory) {
        errors.push(FieldError::invalid(
            requests.child("memory"),
            "must be greater than or equal to aggregate container requests",
        ));
    }
    if pod.cpu_request_milli.is_some_and(|p| p < cpu) {
        errors.push(FieldError::invalid(
            requests.child("cpu"),
            "must be greater than or equal to aggregate container requests",
        ));
    }
    for c in containers {
        let at = FieldPath::new(c.field.as_str())
            .child("resources")
            .child("limits");
        if let (Some(pod), Some(own)) = (pod.memory_limit, c.resources.memory_limit)
            && own > pod
        {
            errors.push(FieldError::invalid(
                at.child("memory"),
                "must be less than or equal to the pod-level memory limit",
            ));
        }
        if let (Some(pod), Some(own)) = (pod.cpu_limit_milli, c.resources.cpu_limit_milli)
            && own > pod
        {
            errors.push(FieldError::invalid(
                at.child("cpu"),
                "must be less than or equal to the pod-level cpu limit",
            ));
        }
    }
    pod
}

/// The resources besides CPU and memory that `containers` ask a positive amount of
/// (`nvidia.com/gpu`, `hugepages-2Mi`, ...): the node advertises none, so a pod asking for one
/// stays Pending, as the scheduler leaves it. `ephemeral-storage` is accepted and not counted
/// (the node keeps no disk budget for pods' writable layers: a wasm container has none).
pub(super) fn extended(
    containers: &[(FieldPath, &k8s::Container)],
    errors: &mut Vec<FieldError>,
) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for (path, c) in containers {
        let Some(r) = &c.resources else { continue };
        for (kind, map) in [("limits", &r.limits), ("requests", &r.requests)] {
            for (name, q) in map.iter().flatten() {
                if matches!(name.as_str(), "cpu" | "memory") {
                    continue;
                }
                match quantity::parse(&q.0, 1.0) {
                    Ok(n) if n > 0 && name != "ephemeral-storage" => {
                        names.insert(name.clone());
                    }
                    Ok(_) => {}
                    Err(e) => errors.push(FieldError::invalid(
                        path.child("resources").child(kind).child(name),
                        e,
                    )),
                }
            }
        }
    }
    names
}
