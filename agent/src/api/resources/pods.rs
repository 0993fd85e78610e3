//! Pods: run by the node; `kubectl get`'s columns and STATUS as kubectl's pod printer makes
//! them.

use serde_json::{Value, json};

use super::{Column, RW, Resource, Storage, Strategy, age, human_duration, str_at};
use crate::object::Object;

pub(crate) static PODS: Resource = Resource {
    name: "pods",
    singular: "pod",
    kind: "Pod",
    group: "",
    namespaced: true,
    short_names: &["po"],
    verbs: RW,
    subresources: &[
        ("attach", &["create", "get"]),
        ("exec", &["create", "get"]),
        ("log", &["get"]),
        ("portforward", &["create", "get"]),
        ("status", &["get"]),
    ],
    strategy: &Pods,
};

struct Pods;

impl Strategy for Pods {
    fn storage(&self) -> Storage {
        Storage::Pods
    }

    fn selectable(&self, field: &str) -> bool {
        matches!(
            field,
            "spec.nodeName"
                | "spec.restartPolicy"
                | "spec.schedulerName"
                | "spec.serviceAccountName"
                | "status.phase"
                | "status.podIP"
                | "status.nominatedNodeName"
        )
    }

    fn columns(&self) -> &'static [Column] {
        &[
            Column("Name", "string", 0),
            Column("Ready", "string", 0),
            Column("Status", "string", 0),
            Column("Restarts", "string", 0),
            Column("Age", "string", 0),
            Column("IP", "string", 1),
            Column("Node", "string", 1),
            Column("Nominated Node", "string", 1),
            Column("Readiness Gates", "string", 1),
        ]
    }

    fn cells(&self, o: &Object, now: jiff::Timestamp) -> Vec<Value> {
        pod_cells(&o.to_value(), now)
    }
}

/// NAME READY STATUS RESTARTS AGE IP NODE NOMINATED-NODE READINESS-GATES, as kubectl's pod
/// printer computes them.
fn pod_cells(pod: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let status = pod.get("status").cloned().unwrap_or(json!({}));
    let s = pod_status(pod);
    let restarts = match s.last_restart {
        Some(t) => format!(
            "{} ({} ago)",
            s.restarts,
            human_duration(now.duration_since(t).as_secs().max(0) as u64)
        ),
        None => s.restarts.to_string(),
    };
    let or_none = |v: &str| {
        if v.is_empty() {
            "<none>".to_owned()
        } else {
            v.to_owned()
        }
    };
    let gates = pod
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .filter(|g| !g.is_empty())
        .map(|gates| {
            let met = gates
                .iter()
                .filter(|g| {
                    let t = g["conditionType"].as_str().unwrap_or("");
                    status["conditions"].as_array().is_some_and(|cs| {
                        cs.iter().any(|c| c["type"] == t && c["status"] == "True")
                    })
                })
                .count();
            format!("{met}/{}", gates.len())
        })
        .unwrap_or_else(|| "<none>".into());
    vec![
        json!(str_at(pod, "/metadata/name")),
        json!(format!("{}/{}", s.ready, s.total)),
        json!(s.reason),
        json!(restarts),
        age(pod, "/metadata/creationTimestamp", now),
        json!(or_none(str_at(pod, "/status/podIP"))),
        json!(or_none(str_at(pod, "/spec/nodeName"))),
        json!(or_none(str_at(pod, "/status/nominatedNodeName"))),
        json!(gates),
    ]
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

/// kubectl's `printPod`: the STATUS string (`Init:0/2`, `PodInitializing`, `CrashLoopBackOff`,
/// `Completed`, `Terminating`, ...), READY and RESTARTS.
fn pod_status(pod: &Value) -> PodSummary {
    let empty = Vec::new();
    let list = |p: &str| pod.pointer(p).and_then(Value::as_array).unwrap_or(&empty);
    let (spec_inits, spec_containers) = (list("/spec/initContainers"), list("/spec/containers"));
    let (init_statuses, statuses) = (
        list("/status/initContainerStatuses"),
        list("/status/containerStatuses"),
    );
    let conditions = list("/status/conditions");
    let sidecar = |name: &str| {
        spec_inits
            .iter()
            .any(|c| c["name"] == name && c["restartPolicy"] == "Always")
    };
    let phase = str_at(pod, "/status/phase");
    let mut reason = phase.to_owned();
    if !str_at(pod, "/status/reason").is_empty() {
        reason = str_at(pod, "/status/reason").to_owned();
    }
    let total = spec_containers.len()
        + spec_inits
            .iter()
            .filter(|c| c["restartPolicy"] == "Always")
            .count();
    let mut ready = 0;
    let mut restarts = 0i64;
    let mut last_restart: Option<jiff::Timestamp> = None;
    let mut sidecar_restarts = 0i64;
    let mut sidecar_last: Option<jiff::Timestamp> = None;
    let finished = |c: &Value, p: &str| {
        c.pointer(p)
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    };
    let later = |a: Option<jiff::Timestamp>, b: Option<jiff::Timestamp>| a.max(b);
    let mut initializing = false;
    for (i, c) in init_statuses.iter().enumerate() {
        let n = c["restartCount"].as_i64().unwrap_or(0);
        restarts += n;
        let last = finished(c, "/lastState/terminated/finishedAt");
        if last.is_some() {
            last_restart = later(last_restart, last);
        }
        let name = c["name"].as_str().unwrap_or("");
        if sidecar(name) {
            sidecar_restarts += n;
            if last.is_some() {
                sidecar_last = later(sidecar_last, last);
            }
        }
        let terminated = c.pointer("/state/terminated");
        let waiting_reason = c
            .pointer("/state/waiting/reason")
            .and_then(Value::as_str)
            .unwrap_or("");
        if terminated.is_some_and(|t| t["exitCode"] == 0) {
            continue;
        }
        if sidecar(name) && c["started"] == true {
            if c["ready"] == true {
                ready += 1;
            }
            continue;
        }
        if let Some(t) = terminated {
            reason = match t["reason"].as_str().unwrap_or("") {
                "" => format!("Init:ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0)),
                r => format!("Init:{r}"),
            };
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{i}/{}", spec_inits.len());
        }
        initializing = true;
        break;
    }
    let initialized = conditions
        .iter()
        .any(|c| c["type"] == "Initialized" && c["status"] == "True");
    if !initializing || initialized {
        restarts = sidecar_restarts;
        last_restart = sidecar_last;
        let mut has_running = false;
        for c in statuses.iter().rev() {
            restarts += c["restartCount"].as_i64().unwrap_or(0);
            let last = finished(c, "/lastState/terminated/finishedAt");
            if last.is_some() {
                last_restart = later(last_restart, last);
            }
            let waiting = c
                .pointer("/state/waiting/reason")
                .and_then(Value::as_str)
                .unwrap_or("");
            let terminated = c.pointer("/state/terminated");
            if !waiting.is_empty() {
                reason = waiting.to_owned();
            } else if let Some(t) = terminated {
                reason = match t["reason"].as_str().unwrap_or("") {
                    "" => format!("ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0)),
                    r => r.to_owned(),
                };
            } else if c["ready"] == true && c.pointer("/state/running").is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let has_ready = conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            reason = if has_ready { "Running" } else { "NotReady" }.to_owned();
        }
    }
    let deleting = pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
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

    fn summary(pod: Value) -> (usize, usize, String, i64) {
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
