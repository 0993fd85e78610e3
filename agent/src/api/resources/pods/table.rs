//! `kubectl get pods`: the columns and the STATUS string as kubectl's pod printer makes them,
//! from the typed pod.

use serde_json::{Value, json};
use wasmpod::k8s_openapi::api::core::v1::{
    ContainerStateTerminated, ContainerStatus, Pod, PodStatus,
};

use super::super::human_duration;

/// NAME READY STATUS RESTARTS AGE IP NODE NOMINATED-NODE READINESS-GATES, as kubectl's pod
/// printer computes them.
pub(super) fn pod_cells(pod: &Pod, now: jiff::Timestamp) -> Vec<Value> {
    let s = pod_status(pod);
    let restarts = match s.last_restart {
        Some(t) => format!(
            "{} ({} ago)",
            s.restarts,
            human_duration(now.duration_since(t).as_secs().max(0) as u64)
        ),
        None => s.restarts.to_string(),
    };
    let status = pod.status.as_ref();
    let or_none = |v: Option<&String>| match v {
        Some(v) if !v.is_empty() => v.clone(),
        _ => "<none>".to_owned(),
    };
    let gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .filter(|g| !g.is_empty())
        .map(|gates| {
            let met = gates
                .iter()
                .filter(|g| condition_true(status, &g.condition_type))
                .count();
            format!("{met}/{}", gates.len())
        })
        .unwrap_or_else(|| "<none>".into());
    let age = match &pod.metadata.creation_timestamp {
        Some(t) => human_duration(now.duration_since(t.0).as_secs().max(0) as u64),
        None => "<unknown>".into(),
    };
    vec![
        json!(pod.metadata.name.as_deref().unwrap_or("")),
        json!(format!("{}/{}", s.ready, s.total)),
        json!(s.reason),
        json!(restarts),
        json!(age),
        json!(or_none(status.and_then(|s| s.pod_ip.as_ref()))),
        json!(or_none(
            pod.spec.as_ref().and_then(|s| s.node_name.as_ref())
        )),
        json!(or_none(status.and_then(|s| s.nominated_node_name.as_ref()))),
        json!(gates),
    ]
}

/// Whether the pod's condition `kind` is `True`.
fn condition_true(status: Option<&PodStatus>, kind: &str) -> bool {
    status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind && c.status == "True"))
}

/// What kubectl shows of a pod.
#[derive(Debug, PartialEq)]
struct PodSummary {
    ready: usize,
    total: usize,
    reason: String,
    restarts: i64,
    last_restart: Option<jiff::Timestamp>,
}

/// When a container's last instance finished, if it terminated.
fn last_finished(c: &ContainerStatus) -> Option<jiff::Timestamp> {
    let terminated = c.last_state.as_ref()?.terminated.as_ref()?;
    terminated.finished_at.as_ref().map(|t| t.0)
}

/// The reason a container waits, `""` when it does not.
fn waiting_reason(c: &ContainerStatus) -> &str {
    c.state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.as_deref())
        .unwrap_or("")
}

fn terminated(c: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    c.state.as_ref()?.terminated.as_ref()
}

/// kubectl's `printPod`: the STATUS string (`Init:0/2`, `PodInitializing`, `CrashLoopBackOff`,
/// `Completed`, `Terminating`, ...), READY and RESTARTS.
fn pod_status(pod: &Pod) -> PodSummary {
    let (spec, status) = (pod.spec.as_ref(), pod.status.as_ref());
    let spec_inits = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[]);
    let spec_containers = spec.map_or(&[][..], |s| &s.containers[..]);
    // A pod not admitted yet (`PodScheduled` False) has, in a cluster, no container statuses
    // before a node takes it: kubectl shows it `Pending`, not its containers' waiting reason.
    let unscheduled = status
        .and_then(|s| s.conditions.as_deref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "PodScheduled" && c.status == "False")
        });
    let (init_statuses, statuses) = match status {
        Some(s) if !unscheduled => (
            s.init_container_statuses.as_deref().unwrap_or(&[]),
            s.container_statuses.as_deref().unwrap_or(&[]),
        ),
        _ => (&[][..], &[][..]),
    };
    let sidecar = |name: &str| {
        spec_inits
            .iter()
            .any(|c| c.name == name && c.restart_policy.as_deref() == Some("Always"))
    };
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("");
    let mut reason = match status.and_then(|s| s.reason.as_deref()) {
        Some(r) if !r.is_empty() => r.to_owned(),
        _ => phase.to_owned(),
    };
    let total = spec_containers.len()
        + spec_inits
            .iter()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"))
            .count();
    let mut ready = 0;
    let mut restarts = 0i64;
    let mut last_restart: Option<jiff::Timestamp> = None;
    let mut sidecar_restarts = 0i64;
    let mut sidecar_last: Option<jiff::Timestamp> = None;
    let mut initializing = false;
    for (i, c) in init_statuses.iter().enumerate() {
        let n = i64::from(c.restart_count);
        restarts += n;
        let last = last_finished(c);
        last_restart = last_restart.max(last);
        if sidecar(&c.name) {
            sidecar_restarts += n;
            sidecar_last = sidecar_last.max(last);
        }
        let ended = terminated(c);
        if ended.is_some_and(|t| t.exit_code == 0) {
            continue;
        }
        if sidecar(&c.name) && c.started == Some(true) {
            if c.ready {
                ready += 1;
            }
            continue;
        }
        let waiting = waiting_reason(c);
        reason = match ended {
            Some(t) => match t.reason.as_deref().unwrap_or("") {
                "" => format!("Init:ExitCode:{}", t.exit_code),
                r => format!("Init:{r}"),
            },
            None if !waiting.is_empty() && waiting != "PodInitializing" => {
                format!("Init:{waiting}")
            }
            None => format!("Init:{i}/{}", spec_inits.len()),
        };
        initializing = true;
        break;
    }
    if !initializing || condition_true(status, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = sidecar_last;
        let mut has_running = false;
        for c in statuses.iter().rev() {
            restarts += i64::from(c.restart_count);
            last_restart = last_restart.max(last_finished(c));
            let waiting = waiting_reason(c);
            if !waiting.is_empty() {
                reason = waiting.to_owned();
            } else if let Some(t) = terminated(c) {
                reason = match t.reason.as_deref().unwrap_or("") {
                    "" => format!("ExitCode:{}", t.exit_code),
                    r => r.to_owned(),
                };
            } else if c.ready && c.state.as_ref().is_some_and(|s| s.running.is_some()) {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let has_ready = condition_true(status, "Ready");
            reason = if has_ready { "Running" } else { "NotReady" }.to_owned();
        }
    }
    let deleting = pod.metadata.deletion_timestamp.is_some();
    if deleting && !matches!(phase, "Succeeded" | "Failed") {
        reason = "Terminating".to_owned();
    }
    PodSummary {
        ready,
        total,
        reason,
        restarts,
        last_restart,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod written as JSON, its container statuses given the fields the kubelet always
    /// writes (image, imageID, ready, restartCount) where the test leaves them out.
    fn summary(mut pod: Value) -> (usize, usize, String, i64) {
        for list in ["initContainerStatuses", "containerStatuses"] {
            for c in pod["status"][list].as_array_mut().into_iter().flatten() {
                for (field, default) in [
                    ("image", json!("a.wasm")),
                    ("imageID", json!("")),
                    ("ready", json!(false)),
                    ("restartCount", json!(0)),
                ] {
                    if c.get(field).is_none() {
                        c[field] = default;
                    }
                }
            }
        }
        let pod: Pod = serde_json::from_value(pod).expect("a pod");
        let s = pod_status(&pod);
        (s.ready, s.total, s.reason, s.restarts)
    }

    #[test]
    fn pod_status_strings_are_kubectls() {
        let waiting = |r: &str| json!({"waiting": {"reason": r}});
        let inits = json!([{"name": "a"}, {"name": "b"}]);
        // Init:0/2 while the first init container runs.
        let pod = json!({
            "spec": {"initContainers": inits, "containers": [{"name": "m"}]},
            "status": {"phase": "Pending",
                "initContainerStatuses": [
                    {"name": "a", "state": {"running": {}}, "restartCount": 0},
                    {"name": "b", "state": waiting("PodInitializing"), "restartCount": 0}],
                "containerStatuses": [{"name": "m", "state": waiting("PodInitializing"), "restartCount": 0}]}
        });
        assert_eq!(summary(pod), (0, 1, "Init:0/2".into(), 0));
        // Not admitted: Pending, whatever its containers wait for.
        let pod = json!({
            "spec": {"containers": [{"name": "m"}]},
            "status": {"phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
                "containerStatuses": [{"name": "m", "state": waiting("ContainerCreating"), "restartCount": 0}]}
        });
        assert_eq!(summary(pod), (0, 1, "Pending".into(), 0));
        // A failing init container in backoff.
        let pod = json!({
            "spec": {"initContainers": inits, "containers": [{"name": "m"}]},
            "status": {"phase": "Pending",
                "initContainerStatuses": [
                    {"name": "a", "state": waiting("CrashLoopBackOff"), "restartCount": 3}],
                "containerStatuses": []}
        });
        assert_eq!(summary(pod), (0, 1, "Init:CrashLoopBackOff".into(), 3));
        // Inits done, main container creating.
        let pod = json!({
            "spec": {"containers": [{"name": "m"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "Initialized", "status": "True"}],
                "containerStatuses": [{"name": "m", "state": waiting("ContainerCreating"), "restartCount": 0}]}
        });
        assert_eq!(summary(pod).2, "ContainerCreating");
        // Running and ready, with a sidecar.
        let pod = json!({
            "spec": {"initContainers": [{"name": "s", "restartPolicy": "Always"}], "containers": [{"name": "m"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Initialized", "status": "True"}],
                "initContainerStatuses": [{"name": "s", "started": true, "ready": true, "state": {"running": {}}, "restartCount": 1}],
                "containerStatuses": [{"name": "m", "ready": true, "state": {"running": {}}, "restartCount": 2}]}
        });
        assert_eq!(summary(pod), (2, 2, "Running".into(), 3));
        // Completed; and CrashLoopBackOff.
        let done = json!({"terminated": {"exitCode": 0, "reason": "Completed"}});
        let pod = json!({"spec": {"containers": [{"name": "m"}]},
            "status": {"phase": "Succeeded", "containerStatuses": [{"name": "m", "state": done, "restartCount": 0}]}});
        assert_eq!(summary(pod).2, "Completed");
        let pod = json!({"spec": {"containers": [{"name": "m"}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "m", "state": waiting("CrashLoopBackOff"), "restartCount": 4}]}});
        assert_eq!(summary(pod).2, "CrashLoopBackOff");
        // Terminating while it runs.
        let pod = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "m"}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "m", "ready": true, "state": {"running": {}}, "restartCount": 0}]}});
        assert_eq!(summary(pod), (1, 1, "Terminating".into(), 0));
    }
}
