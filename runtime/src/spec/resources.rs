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
