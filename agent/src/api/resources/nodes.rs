//! Nodes: the one node, made from the running node at each read.

use serde_json::{Value, json};

use super::{Column, Resource, Storage, Strategy, created, name, str_at};
use crate::object::Object;

pub(crate) static NODES: Resource = Resource {
    name: "nodes",
    singular: "node",
    kind: "Node",
    group: "",
    namespaced: false,
    short_names: &["no"],
    verbs: &["get", "list", "patch"],
    subresources: &[("proxy", &["get"]), ("status", &["get"])],
    strategy: &Nodes,
};

struct Nodes;

impl Strategy for Nodes {
    fn storage(&self) -> Storage {
        Storage::Node
    }

    fn columns(&self) -> &'static [Column] {
        &[
            Column("Name", "string", 0),
            Column("Status", "string", 0),
            Column("Roles", "string", 0),
            Column("Age", "string", 0),
            Column("Version", "string", 0),
            Column("Internal-IP", "string", 1),
            Column("OS-Image", "string", 1),
            Column("Kernel-Version", "string", 1),
            Column("Container-Runtime", "string", 1),
        ]
    }

    fn cells(&self, object: &Object, now: jiff::Timestamp) -> Vec<Value> {
        let o = &object.to_value();
        let ready = o
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            .is_some_and(|c| c["status"] == "True");
        vec![
            name(object),
            json!(if ready { "Ready" } else { "NotReady" }),
            json!("<none>"),
            created(object, now),
            json!(str_at(o, "/status/nodeInfo/kubeletVersion")),
            json!(str_at(o, "/status/addresses/0/address")),
            json!(str_at(o, "/status/nodeInfo/osImage")),
            json!(str_at(o, "/status/nodeInfo/kernelVersion")),
            json!(str_at(o, "/status/nodeInfo/containerRuntimeVersion")),
        ]
    }
}
