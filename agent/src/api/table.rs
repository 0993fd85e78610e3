//! Tables (`meta.k8s.io/v1 Table`): what `kubectl get` prints, made by the server with the
//! columns and cell strings of the API server's printers (the kubelet's pod STATUS among them).

use serde_json::{Value, json};

use super::resources::Resource;

/// One column: its name, type and priority (1: shown with `-o wide` only).
struct Column(&'static str, &'static str, u8);

fn columns(resource: &Resource) -> &'static [Column] {
    match resource.name {
        "pods" => &[
            Column("Name", "string", 0),
            Column("Ready", "string", 0),
            Column("Status", "string", 0),
            Column("Restarts", "string", 0),
            Column("Age", "string", 0),
            Column("IP", "string", 1),
            Column("Node", "string", 1),
            Column("Nominated Node", "string", 1),
            Column("Readiness Gates", "string", 1),
        ],
        "events" => &[
            Column("Last Seen", "string", 0),
            Column("Type", "string", 0),
            Column("Reason", "string", 0),
            Column("Object", "string", 0),
            Column("Message", "string", 0),
        ],
        "configmaps" => &[
            Column("Name", "string", 0),
            Column("Data", "integer", 0),
            Column("Age", "string", 0),
        ],
        "secrets" => &[
            Column("Name", "string", 0),
            Column("Type", "string", 0),
            Column("Data", "integer", 0),
            Column("Age", "string", 0),
        ],
        "namespaces" => &[
            Column("Name", "string", 0),
            Column("Status", "string", 0),
            Column("Age", "string", 0),
        ],
        "nodes" => &[
            Column("Name", "string", 0),
            Column("Status", "string", 0),
            Column("Roles", "string", 0),
            Column("Age", "string", 0),
            Column("Version", "string", 0),
            Column("Internal-IP", "string", 1),
            Column("OS-Image", "string", 1),
            Column("Kernel-Version", "string", 1),
            Column("Container-Runtime", "string", 1),
        ],
        "priorityclasses" => &[
            Column("Name", "string", 0),
            Column("Value", "integer", 0),
            Column("Global-Default", "boolean", 0),
            Column("Age", "string", 0),
        ],
        "runtimeclasses" => &[
            Column("Name", "string", 0),
            Column("Handler", "string", 0),
            Column("Age", "string", 0),
        ],
        _ => &[Column("Name", "string", 0), Column("Age", "string", 0)],
    }
}

/// A table of `objects`; `with_columns` false leaves the column definitions out (watch events
/// after the first).
pub(crate) fn table(
    resource: &Resource,
    objects: &[&Value],
    resource_version: u64,
    with_columns: bool,
) -> Value {
    let now = jiff::Timestamp::now();
    let definitions: Vec<Value> = if with_columns {
        columns(resource)
            .iter()
            .map(|Column(name, kind, priority)| {
                json!({
                    "name": name,
                    "type": kind,
                    "format": if *name == "Name" { "name" } else { "" },
                    "description": "",
                    "priority": priority,
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| json!({"cells": cells(resource, o, now), "object": partial(o)}))
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version.to_string()},
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// The object's metadata, as a `PartialObjectMetadata`.
fn partial(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or(json!({})),
    })
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn age(v: &Value, pointer: &str, now: jiff::Timestamp) -> String {
    match str_at(v, pointer).parse::<jiff::Timestamp>() {
        Ok(t) => human_duration(now.duration_since(t).as_secs().max(0) as u64),
        Err(_) => "<unknown>".into(),
    }
}

fn cells(resource: &Resource, o: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let name = json!(str_at(o, "/metadata/name"));
    let created = json!(age(o, "/metadata/creationTimestamp", now));
    match resource.name {
        "pods" => pod_cells(o, now),
        "events" => {
            let seen = if o.pointer("/lastTimestamp").is_some_and(|t| !t.is_null()) {
                age(o, "/lastTimestamp", now)
            } else {
                age(o, "/eventTime", now)
            };
            let object = format!(
                "{}/{}",
                str_at(o, "/involvedObject/kind").to_lowercase(),
                str_at(o, "/involvedObject/name")
            );
            vec![
                json!(seen),
                json!(str_at(o, "/type")),
                json!(str_at(o, "/reason")),
                json!(object),
                json!(str_at(o, "/message")),
            ]
        }
        "configmaps" => {
            let count = |f: &str| o.get(f).and_then(Value::as_object).map_or(0, |m| m.len());
            vec![name, json!(count("data") + count("binaryData")), created]
        }
        "secrets" => {
            let data = o
                .get("data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len());
            vec![name, json!(str_at(o, "/type")), json!(data), created]
        }
        "namespaces" => vec![name, json!(str_at(o, "/status/phase")), created],
        "nodes" => {
            let ready = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .is_some_and(|c| c["status"] == "True");
            vec![
                name,
                json!(if ready { "Ready" } else { "NotReady" }),
                json!("<none>"),
                created,
                json!(str_at(o, "/status/nodeInfo/kubeletVersion")),
                json!(str_at(o, "/status/addresses/0/address")),
                json!(str_at(o, "/status/nodeInfo/osImage")),
                json!(str_at(o, "/status/nodeInfo/kernelVersion")),
                json!(str_at(o, "/status/nodeInfo/containerRuntimeVersion")),
            ]
        }
        "priorityclasses" => vec![
            name,
            o.get("value").cloned().unwrap_or(json!(0)),
            json!(
                o.get("globalDefault")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            ),
            created,
        ],
        "runtimeclasses" => vec![
            name,
            o.get("handler").cloned().unwrap_or(json!("")),
            created,
        ],
        _ => vec![name, created],
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
        json!(age(pod, "/metadata/creationTimestamp", now)),
        json!(or_none(str_at(pod, "/status/podIP"))),
        json!(or_none(str_at(pod, "/spec/nodeName"))),
        json!(or_none(str_at(pod, "/status/nominatedNodeName"))),
        json!(gates),
    ]
}

/// What kubectl shows of a pod.
#[derive(Debug, PartialEq)]
pub(crate) struct PodSummary {
    pub(crate) ready: usize,
    pub(crate) total: usize,
    pub(crate) reason: String,
    pub(crate) restarts: i64,
    last_restart: Option<jiff::Timestamp>,
}

/// kubectl's `printPod`: the STATUS string (`Init:0/2`, `PodInitializing`, `CrashLoopBackOff`,
/// `Completed`, `Terminating`, ...), READY and RESTARTS.
pub(crate) fn pod_status(pod: &Value) -> PodSummary {
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

/// kubectl's `HumanDuration` of a number of seconds.
pub(crate) fn human_duration(secs: u64) -> String {
    let (minutes, hours) = (secs / 60, secs / 3600);
    let days = hours / 24;
    match secs {
        s if s < 120 => format!("{s}s"),
        s if minutes < 10 => match s % 60 {
            0 => format!("{minutes}m"),
            r => format!("{minutes}m{r}s"),
        },
        _ if minutes < 180 => format!("{minutes}m"),
        _ if hours < 8 => match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        },
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 24 * 8 => match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        },
        _ if hours < 24 * 365 * 2 => format!("{days}d"),
        _ if hours < 24 * 365 * 8 => match days % 365 {
            0 => format!("{}y", days / 365),
            d => format!("{}y{d}d", days / 365),
        },
        _ => format!("{}y", days / 365),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kubectl_prints_them() {
        let cases = [
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (10 * 3600, "10h"),
            (50 * 3600, "2d2h"),
            (30 * 86400, "30d"),
            (3 * 365 * 86400, "3y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs}");
        }
    }

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
