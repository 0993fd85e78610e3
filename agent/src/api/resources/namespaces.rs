//! Namespaces: created (never deleted) with their phase; each gets its `default` service account.

use serde_json::{Value, json};

use super::{Column, Fields, Resource, Storage, Strategy, created, dns_name, name};
use crate::kubelet::Kubelet;
use crate::object::Object;
use crate::status::ApiError;
use crate::store::Store;

pub(crate) static NAMESPACES: Resource = Resource {
    name: "namespaces",
    singular: "namespace",
    kind: "Namespace",
    group: "",
    namespaced: false,
    short_names: &["ns"],
    verbs: &["create", "get", "list", "watch"],
    subresources: &[("status", &["get"])],
    strategy: &Namespaces,
};

struct Namespaces;

impl Strategy for Namespaces {
    /// A new namespace gets its `kube-root-ca.crt`.
    fn changed(&self, kubelet: &Kubelet) -> Result<(), ApiError> {
        kubelet.publish_root_ca()
    }

    fn storage(&self) -> Storage {
        Storage::Stored { deletable: false }
    }

    fn prepare(&self, _store: &Store, _name: &str, body: &mut Fields) -> Result<(), ApiError> {
        body.insert("status".into(), json!({"phase": "Active"}));
        Ok(())
    }

    /// A namespace's name is a DNS-1123 label.
    fn check_name(&self, name: &str) -> Result<(), String> {
        dns_name(name, true)
    }

    /// The service account controller's: every namespace has `default`.
    fn created(&self, store: &Store, name: &str) -> Result<(), ApiError> {
        crate::ensure_default_account(store, name)
    }

    fn columns(&self) -> &'static [Column] {
        &[
            Column("Name", "string", 0),
            Column("Status", "string", 0),
            Column("Age", "string", 0),
        ]
    }

    fn cells(&self, o: &Object, now: jiff::Timestamp) -> Vec<Value> {
        let phase = o.field("status").and_then(|s| s.get("phase").cloned());
        vec![name(o), phase.unwrap_or(json!("")), created(o, now)]
    }
}
