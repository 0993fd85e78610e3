//! Pods: run by the node. What the API server and the kubelet add for them is here beside the
//! resource: admission and graceful deletion (`admission.rs`), which updates a pod takes
//! (`update.rs`), and `kubectl get`'s columns and STATUS as kubectl's pod printer makes them
//! (`table.rs`).

mod admission;
mod table;
mod update;

use serde_json::Value;

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::{Column, NewImages, RW, Resource, Run, Storage, Strategy};
use crate::api::Api;
use crate::api::source::Applied;
use crate::object::Object;
use crate::status::ApiError;
pub(crate) use update::MIRROR;
use update::check_update;

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
        Storage::Run(&Pods)
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

/// The node runs pods: admission and start at creation, new images at an update, graceful
/// deletion (`admission.rs`, `update.rs`).
impl Run for Pods {
    fn create<'a>(
        &'a self,
        api: &'a Api,
        object: Object,
        dry_run: bool,
        pending: &'a [Applied],
    ) -> BoxFuture<'a, Result<Arc<Object>, ApiError>> {
        Box::pin(api.create_pod(object, dry_run, pending))
    }

    fn update<'a>(
        &'a self,
        api: &'a Api,
        current: &'a Object,
        next: &'a mut Object,
    ) -> BoxFuture<'a, Result<NewImages, ApiError>> {
        Box::pin(async move {
            check_update(current, next)?;
            api.load_changed_images(current, next).await
        })
    }

    fn updated<'a>(
        &'a self,
        api: &'a Api,
        stored: &'a Object,
        changes: NewImages,
    ) -> BoxFuture<'a, ()> {
        Box::pin(api.set_images(stored, changes))
    }

    fn delete(
        &self,
        api: &Api,
        ns: &str,
        name: &str,
        grace: Option<i64>,
        from_api: bool,
    ) -> Result<Arc<Object>, ApiError> {
        api.delete_pod(ns, name, grace, from_api)
    }
}
