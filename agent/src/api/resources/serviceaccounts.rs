//! ServiceAccounts (their tokens are issued by `serviceaccounts/{name}/token`).

use serde_json::Value;

use super::{Fields, RW, Resource, Strategy};
use crate::status::ApiError;
use crate::store::Store;

pub(crate) static SERVICE_ACCOUNTS: Resource = Resource {
    name: "serviceaccounts",
    singular: "serviceaccount",
    kind: "ServiceAccount",
    group: "",
    namespaced: true,
    short_names: &["sa"],
    verbs: RW,
    subresources: &[("token", &["create"])],
    strategy: &ServiceAccounts,
};

struct ServiceAccounts;

impl Strategy for ServiceAccounts {
    fn prepare(&self, _store: &Store, name: &str, body: &mut Fields) -> Result<(), ApiError> {
        let bad = |field: &str, message: String| {
            ApiError::field_invalid(SERVICE_ACCOUNTS.kind, name, field, message)
        };
        serde_json::from_value::<wasmpod::k8s_openapi::api::core::v1::ServiceAccount>(
            Value::Object(body.clone()),
        )
        .map_err(|e| bad("", e.to_string()))?;
        Ok(())
    }

    /// The service account controller's: a namespace's `default` account, deleted, is made
    /// again (with a new uid, so the old one's tokens stay refused).
    fn deleted(&self, store: &Store, ns: &str, name: &str) -> Result<(), ApiError> {
        if name == "default" && store.get("namespaces", "", ns).is_some() {
            crate::ensure_default_account(store, ns)?;
        }
        Ok(())
    }
}
