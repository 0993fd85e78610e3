//! The Node object: the agent's one node as `kubectl get nodes` and `describe node` show it.

use serde_json::{Value, json};

use std::collections::BTreeMap;

use super::Api;
use super::discovery::GIT_VERSION;
use crate::kubelet::NodeMeta;
use crate::object::Object;
use crate::status::{ApiError, Cause};

/// The node's annotation of how instances use the address space.
const ADDRESS_SPACE: &str = "wasmpod.dev/address-space";

impl Api {
    /// A patch of the node (`kubectl label node`, `kubectl annotate node`): its labels and
    /// annotations may change, and nothing else, which is the node's own to report.
    pub(super) fn patch_node(
        &self,
        name: &str,
        patch: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Object, ApiError> {
        let current = self.node_object(name)?.to_value();
        let next = patch(&current)?;
        let invalid =
            |field: &str, message: String| ApiError::field_invalid("Node", name, field, message);
        for field in ["spec", "status"] {
            if next.get(field) != current.get(field) {
                return Err(invalid(
                    field,
                    "Forbidden: a wasmpod node reports its own spec and status; only its \
                     labels and annotations may be changed"
                        .into(),
                ));
            }
        }
        let map = |field: &str| -> Result<BTreeMap<String, String>, ApiError> {
            let value = next
                .pointer(&format!("/metadata/{field}"))
                .cloned()
                .unwrap_or(Value::Null);
            if value.is_null() {
                return Ok(BTreeMap::new());
            }
            serde_json::from_value(value)
                .map_err(|e| invalid(&format!("metadata.{field}"), e.to_string()))
        };
        let labels = map("labels")?;
        let mut annotations = map("annotations")?;
        let mut errors = wasmpod::check_metadata_map("metadata.labels", &labels, true);
        errors.extend(wasmpod::check_metadata_map(
            "metadata.annotations",
            &annotations,
            false,
        ));
        if !errors.is_empty() {
            let causes = errors.iter().map(Cause::from).collect();
            return Err(ApiError::invalid("Node", name, causes));
        }
        annotations.remove(ADDRESS_SPACE);
        self.kubelet.set_node_meta(NodeMeta {
            labels,
            annotations,
            ..NodeMeta::default()
        })?;
        let node = self.node_object(name)?;
        self.store.announce("nodes", node.clone());
        Ok(node)
    }

    /// The Node named `name`; `NotFound` for any other name.
    pub(super) fn node_object(&self, name: &str) -> Result<Object, ApiError> {
        let k = &self.kubelet;
        if name != k.node_name() {
            return Err(ApiError::not_found("nodes", name));
        }
        let node = k.node();
        let meta = k.node_meta();
        let mut annotations = meta.annotations;
        // How instances use the address space: "compact" (bounds-checked memories that reserve
        // their size) on a small one.
        annotations.insert(ADDRESS_SPACE.into(), node.address_space().name().into());
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
                "labels": meta.labels,
                "annotations": annotations,
                "creationTimestamp": k.node_created(),
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
