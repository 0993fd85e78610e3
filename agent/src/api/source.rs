//! What the fleet source ([`crate::source`]) asks of the API: a revision's objects checked as one
//! set before any of them is applied (each as its create would check it, the set's other objects
//! counting as present), then created, replaced and deleted with the checks a client's request
//! gets.

use std::sync::Arc;

use serde_json::Value;

use super::Api;
use super::resources::{Resource, Storage};
use crate::object::Object;
use crate::status::ApiError;
use crate::store::Durable;

/// One object of a set applied together.
#[derive(Debug, Clone)]
pub(crate) struct Applied {
    pub(crate) resource: &'static Resource,
    /// `""` for a cluster-scoped object.
    pub(crate) namespace: String,
    pub(crate) name: String,
    /// The object as the set gives it.
    pub(crate) object: Value,
}

/// The resource of a kind the source may apply: what a client creates.
pub(crate) fn resource_of(api_version: &str, kind: &str) -> Option<&'static Resource> {
    super::resources::ALL
        .iter()
        .copied()
        .filter(|r| {
            matches!(
                r.strategy.storage(),
                Storage::Run(_) | Storage::Stored { .. }
            )
        })
        .find(|r| r.kind == kind && r.api_version() == api_version)
}

/// Whether clients may delete objects of `resource` (namespaces they may not, here).
pub(crate) fn deletable(resource: &Resource) -> bool {
    matches!(
        resource.strategy.storage(),
        Storage::Run(_) | Storage::Stored { deletable: true }
    )
}

impl Api {
    /// Checks `item` as its create would, storing nothing; the objects of `set` count as
    /// present (a pod's namespace, service account and priority class may come with it).
    pub(crate) async fn check_applied(
        &self,
        item: &Applied,
        set: &[Applied],
    ) -> Result<(), ApiError> {
        let in_set = set
            .iter()
            .any(|a| a.resource.name == "namespaces" && a.name == item.namespace);
        if item.resource.namespaced && !in_set {
            self.namespace_exists(&item.namespace)?;
        }
        let ns = item.resource.namespaced.then_some(item.namespace.as_str());
        let mut object = self.new_object(item.resource, ns, item.object.clone())?;
        match item.resource.strategy.storage() {
            Storage::Run(run) => run.create(self, object, true, set).await.map(drop),
            _ => {
                let mut fields = object.fields();
                item.resource
                    .strategy
                    .prepare(&self.store, &item.name, &mut fields)?;
                object.set_fields(fields);
                Ok(())
            }
        }
    }

    /// Creates `item` as a client's create would.
    pub(crate) async fn create_applied(&self, item: &Applied) -> Result<Arc<Object>, ApiError> {
        let ns = item.resource.namespaced.then_some(item.namespace.as_str());
        if let Some(ns) = ns {
            self.namespace_exists(ns)?;
        }
        self.create_object(item.resource, ns, item.object.clone(), false)
            .await
    }

    /// Replaces the stored object of `item` with it, as a client's `PUT` would.
    pub(crate) async fn replace_applied(&self, item: &Applied) -> Result<Arc<Object>, ApiError> {
        let body = item.object.clone();
        self.update(item.resource, &item.namespace, &item.name, |_| Ok(body))
            .await
    }

    /// Deletes an object the source made: a pod gracefully, within its own grace period.
    pub(crate) fn delete_applied(
        &self,
        resource: &'static Resource,
        ns: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        match resource.strategy.storage() {
            Storage::Run(run) => run.delete(self, ns, name, None, true).map(drop),
            _ => self
                .delete_stored(resource, ns, name, Durable::Now)
                .map(drop),
        }
    }
}
