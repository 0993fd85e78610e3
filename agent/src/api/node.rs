//! The Node object: the agent's one node as `kubectl get nodes` and `describe node` show it.

use serde_json::{Value, json};

use super::Api;
use super::discovery::GIT_VERSION;
use crate::object::Object;
use crate::status::ApiError;

impl Api {
    /// The Node named `name`; `NotFound` for any other name.
    pub(super) fn node_object(&self, name: &str) -> Result<Object, ApiError> {
        let k = &self.kubelet;
        if name != k.node_name() {
            return Err(ApiError::not_found("nodes", name));
        }
        let node = k.node();
        let a = node.allocatable();
        let resources = json!({
            "cpu": format!("{}m", a.cpu_milli),
            "memory": format!("{}Ki", a.memory / 1024),
            "pods": a.pods.to_string(),
            // An extended resource: what the scheduler's "Insufficient wasmpod.dev/containers"
            // refers to.
            "wasmpod.dev/containers": a.containers.to_string(),
        });
        let since = k.started();
        let condition = |kind: &str, status: &str, reason: &str, message: &str| {
            json!({
                "type": kind, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": crate::clock::now(), "lastTransitionTime": since,
            })
        };
        let mut conditions = vec![
            condition(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            condition(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            condition(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            condition(
                "Ready",
                "True",
                "KubeletReady",
                "wasmpod is posting ready status",
            ),
        ];
        conditions.extend(k.conditions());
        let taints: Vec<Value> = node
            .taints()
            .iter()
            .map(|t| serde_json::to_value(t).unwrap_or_default())
            .collect();
        Object::from_value(json!({
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "uid": k.node_uid(),
                "labels": node.labels(),
                // How instances use the address space: "compact" (bounds-checked memories that
                // reserve their size) on a small one.
                "annotations": { "wasmpod.dev/address-space": node.address_space().name() },
                "creationTimestamp": since,
                "resourceVersion": self.store.resource_version().to_string(),
            },
            "spec": { "taints": taints },
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": conditions,
                "addresses": [
                    {"type": "InternalIP", "address": k.address()},
                    {"type": "Hostname", "address": name},
                ],
                "nodeInfo": {
                    "machineID": "", "systemUUID": "", "bootID": "",
                    "kernelVersion": kernel_version(),
                    "osImage": "wasmpod (WASI on wasmtime)",
                    "containerRuntimeVersion": concat!("wasmpod://", env!("CARGO_PKG_VERSION")),
                    "kubeletVersion": GIT_VERSION,
                    "kubeProxyVersion": "",
                    "operatingSystem": std::env::consts::OS,
                    "architecture": match std::env::consts::ARCH { "x86_64" => "amd64", "aarch64" => "arm64", a => a },
                },
            },
        }))
    }
}

fn kernel_version() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}
