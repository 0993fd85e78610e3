//! Pods: run by the node. What the API server and the kubelet add for them is here beside the
//! resource: admission and graceful deletion (`admission.rs`), which updates a pod takes
//! (`update.rs`), and `kubectl get`'s columns and STATUS as kubectl's pod printer makes them
//! (`table.rs`).

mod admission;
mod table;
mod update;

use serde_json::Value;

use super::{Column, RW, Resource, Storage, Strategy};
use crate::object::Object;
pub(crate) use update::{MIRROR, check_update};

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
        table::pod_cells(&o.pod(), now)
    }
}
