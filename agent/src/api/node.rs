//! The Node object: the agent's one node as `kubectl get nodes` and `describe node` show it.

use serde_json::{Value, json};

use std::collections::BTreeMap;

use super::Api;
use super::discovery::GIT_VERSION;
use crate::kubelet::NodeMeta;
use crate::object::Object;
use crate::status::ApiError;

/// The node's annotation of how instances use the address space.
const ADDRESS_SPACE: &str = "wasmpod.dev/address-space";

/// The longest label value (and name part of a key) the API server takes.
const LABEL_VALUE: usize = 63;

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
        for (key, value) in &labels {
            let field = format!("metadata.labels.{key}");
            label_key(key).map_err(|why| invalid(&field, format!("{key:?}: {why}")))?;
            label_value(value).map_err(|why| invalid(&field, format!("{value:?}: {why}")))?;
        }
        let mut annotations = map("annotations")?;
        for key in annotations.keys() {
            label_key(key).map_err(|why| {
                invalid(
                    &format!("metadata.annotations.{key}"),
                    format!("{key:?}: {why}"),
                )
            })?;
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

/// A label's or annotation's key: an optional DNS subdomain prefix and `/`, then a name of at
/// most 63 characters, alphanumeric at both ends, with `-`, `_` and `.` between.
fn label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        super::resources::dns_name(prefix, false).map_err(|why| format!("prefix part: {why}"))?;
    }
    if name.is_empty() {
        return Err("name part must be non-empty".into());
    }
    label_value(name).map_err(|why| format!("name part {why}"))
}

/// A label's value: empty, or at most 63 characters, alphanumeric at both ends, with `-`, `_`
/// and `.` between.
fn label_value(value: &str) -> Result<(), String> {
    if value.len() > LABEL_VALUE {
        return Err(format!("must be no more than {LABEL_VALUE} characters"));
    }
    let ends = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        || !ends(value.chars().next())
        || !ends(value.chars().last())
    {
        return Err(
            "must consist of alphanumeric characters, '-', '_' or '.', and must start \
                    and end with an alphanumeric character"
                .into(),
        );
    }
    Ok(())
}
