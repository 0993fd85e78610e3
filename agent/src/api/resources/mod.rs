//! The resources the agent serves: each in a file of its own with what discovery says of it and
//! its [`Strategy`] (the API server's per-resource `strategy.go`): how its objects are checked
//! and completed, stored and deleted, which fields select them, and the table `kubectl get`
//! prints of them.

mod configmaps;
mod events;
mod namespaces;
mod nodes;
mod pods;
mod priorityclasses;
mod runtimeclasses;
mod secrets;
mod serviceaccounts;

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::Api;
use super::source::Applied;

use crate::kubelet::Kubelet;
use crate::object::Object;
use crate::status::ApiError;
use crate::store::Store;

pub(crate) use configmaps::CONFIG_MAPS;
pub(crate) use events::EVENTS;
pub(crate) use namespaces::NAMESPACES;
pub(crate) use nodes::NODES;
pub(crate) use pods::{MIRROR, PODS};
pub(crate) use priorityclasses::PRIORITY_CLASSES;
pub(crate) use runtimeclasses::RUNTIME_CLASSES;
pub(crate) use secrets::SECRETS;
pub(crate) use serviceaccounts::SERVICE_ACCOUNTS;

/// An object's fields beside its type and metadata, as a strategy prepares them.
pub(crate) type Fields = Map<String, Value>;

/// One API resource.
pub(crate) struct Resource {
    /// The plural name in paths (`pods`).
    pub(crate) name: &'static str,
    pub(crate) singular: &'static str,
    pub(crate) kind: &'static str,
    /// `""` for the core group.
    pub(crate) group: &'static str,
    pub(crate) namespaced: bool,
    pub(crate) short_names: &'static [&'static str],
    pub(crate) verbs: &'static [&'static str],
    /// Subresources (`log`, `exec`, `status`) with their verbs.
    pub(crate) subresources: &'static [(&'static str, &'static [&'static str])],
    /// What is particular to it.
    pub(crate) strategy: &'static (dyn Strategy + Sync),
}

impl std::fmt::Debug for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resource")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Resource {
    /// `v1` or `group/v1`.
    pub(crate) fn api_version(&self) -> &'static str {
        match self.group {
            "" => "v1",
            "scheduling.k8s.io" => "scheduling.k8s.io/v1",
            "node.k8s.io" => "node.k8s.io/v1",
            _ => unreachable!("no other group is served"),
        }
    }

    /// Whether this is the resource named `name`.
    pub(crate) fn is(&self, name: &str) -> bool {
        self.name == name
    }
}

/// The verbs of a resource clients create, change and delete.
const RW: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// Every resource, core group first.
pub(crate) static ALL: &[&Resource] = &[
    &PODS,
    &CONFIG_MAPS,
    &SECRETS,
    &SERVICE_ACCOUNTS,
    &EVENTS,
    &NAMESPACES,
    &NODES,
    &PRIORITY_CLASSES,
    &RUNTIME_CLASSES,
];

/// The resources kept in the store (nodes are made from the running node).
pub(crate) fn stored() -> Vec<&'static str> {
    ALL.iter()
        .filter(|r| !matches!(r.strategy.storage(), Storage::Node))
        .map(|r| r.name)
        .collect()
}

/// The resource of `group` named `name`.
pub(crate) fn find(group: &str, name: &str) -> Option<&'static Resource> {
    ALL.iter()
        .copied()
        .find(|r| r.group == group && r.name == name)
}

/// How a resource's objects are kept and changed.
#[derive(Clone, Copy)]
pub(crate) enum Storage {
    /// Stored as clients send them, once checked; `deletable` when clients may delete them.
    Stored { deletable: bool },
    /// Run by the node (pods): created, updated and deleted through these hooks.
    Run(&'static dyn Run),
    /// Written by the node only (events): clients read them.
    ReadOnly,
    /// The node itself, made from the running node at each read, never stored.
    Node,
}

/// What an update changes in what the node runs: a pod's spec with its new images, and the
/// containers whose image changed (`None`: nothing to give the pod).
pub(crate) type NewImages = Option<(wasmpod::PodSpec, Vec<String>)>;

/// The hooks of a resource the node runs, where the API server would only store: what the API
/// server's admission and the kubelet do for pods. (Futures boxed: the strategies are objects.)
pub(crate) trait Run: Sync {
    /// Admits and starts `object` (checks it only, with `dry_run`); the objects of `pending`,
    /// applied with it, count as present.
    fn create<'a>(
        &'a self,
        api: &'a Api,
        object: Object,
        dry_run: bool,
        pending: &'a [Applied],
    ) -> BoxFuture<'a, Result<Arc<Object>, ApiError>>;

    /// Checks an update of `current` to `next` (completing `next`) and makes ready what it
    /// changes in what runs, given to it by [`Run::updated`] once `next` is stored.
    fn update<'a>(
        &'a self,
        api: &'a Api,
        current: &'a Object,
        next: &'a mut Object,
    ) -> BoxFuture<'a, Result<NewImages, ApiError>>;

    /// After an update was stored: what runs takes its changes.
    fn updated<'a>(
        &'a self,
        api: &'a Api,
        stored: &'a Object,
        changes: NewImages,
    ) -> BoxFuture<'a, ()>;

    /// Deletes `ns/name` (gracefully within `grace`, or its own period); `from_api`: asked by a
    /// client rather than the node. Returns the object as it is after the call.
    fn delete(
        &self,
        api: &Api,
        ns: &str,
        name: &str,
        grace: Option<i64>,
        from_api: bool,
    ) -> Result<Arc<Object>, ApiError>;
}

/// What the API server's strategy for a resource decides; every method has the behaviour most
/// resources share.
pub(crate) trait Strategy {
    /// How its objects are kept and changed.
    fn storage(&self) -> Storage {
        Storage::Stored { deletable: true }
    }

    /// Checks and completes the fields (beside its type and metadata) of an object named `name`
    /// about to be created or replaced, as the API server's `PrepareForCreate`/
    /// `PrepareForUpdate` and `Validate` do (pods are checked by the node instead).
    fn prepare(&self, _store: &Store, _name: &str, _fields: &mut Fields) -> Result<(), ApiError> {
        Ok(())
    }

    /// After one of its objects was created: what the API server's controllers add.
    fn created(&self, _store: &Store, _name: &str) -> Result<(), ApiError> {
        Ok(())
    }

    /// After one of its objects, `name` in namespace `ns`, was deleted: what the API server's
    /// controllers make again.
    fn deleted(&self, _store: &Store, _ns: &str, _name: &str) -> Result<(), ApiError> {
        Ok(())
    }

    /// After any change of its objects: the node reads them anew where it uses them.
    fn changed(&self, _kubelet: &Kubelet) -> Result<(), ApiError> {
        Ok(())
    }

    /// Checks an object's name: a DNS-1123 subdomain for most resources.
    fn check_name(&self, name: &str) -> Result<(), String> {
        dns_name(name, false)
    }

    /// Whether a field selector may name `field` (beside `metadata.name` and
    /// `metadata.namespace`, which every resource has).
    fn selectable(&self, _field: &str) -> bool {
        false
    }

    /// The columns of `kubectl get`'s table.
    fn columns(&self) -> &'static [Column] {
        &[Column("Name", "string", 0), Column("Age", "string", 0)]
    }

    /// One object's cells, in the order of [`Strategy::columns`].
    fn cells(&self, object: &Object, now: jiff::Timestamp) -> Vec<Value> {
        vec![name(object), created(object, now)]
    }
}

/// A DNS-1123 subdomain, or a DNS-1123 label when `label`.
pub(super) fn dns_name(name: &str, label: bool) -> Result<(), String> {
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.len() <= 63
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !p.starts_with('-')
            && !p.ends_with('-')
    };
    let ok = if label {
        part_ok(name)
    } else {
        !name.is_empty() && name.len() <= 253 && name.split('.').all(part_ok)
    };
    if ok {
        return Ok(());
    }
    Err(if label {
        format!(
            "Invalid value: {name:?}: a lowercase RFC 1123 label must consist of lower case \
             alphanumeric characters or '-', and must start and end with an alphanumeric character"
        )
    } else {
        format!(
            "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case \
             alphanumeric characters, '-' or '.', and must start and end with an alphanumeric \
             character"
        )
    })
}

/// One column of a table: its name, type and priority (1: shown with `-o wide` only).
#[derive(Debug)]
pub(crate) struct Column(pub &'static str, pub &'static str, pub u8);

/// The string at `pointer`, or `""`.
fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The object's name, as a cell.
fn name(o: &Object) -> Value {
    json!(o.name())
}

/// The object's age, as kubectl prints it, as a cell.
fn created(o: &Object, now: jiff::Timestamp) -> Value {
    json!(match &o.metadata.creation_timestamp {
        Some(t) => human_duration(now.duration_since(t.0).as_secs().max(0) as u64),
        None => "<unknown>".into(),
    })
}

/// The age of the timestamp at `pointer`, as kubectl prints it, as a cell.
fn age(v: &Value, pointer: &str, now: jiff::Timestamp) -> Value {
    json!(match str_at(v, pointer).parse::<jiff::Timestamp>() {
        Ok(t) => human_duration(now.duration_since(t).as_secs().max(0) as u64),
        Err(_) => "<unknown>".into(),
    })
}

/// The number of keys of the map `field` holds.
fn count(v: &Map<String, Value>, field: &str) -> usize {
    v.get(field)
        .and_then(Value::as_object)
        .map_or(0, |m| m.len())
}

/// The keys of the data map `field`, checked as the API server checks config keys.
fn check_keys(
    kind: &str,
    name: &str,
    body: &Map<String, Value>,
    field: &str,
) -> Result<(), ApiError> {
    let keys = body
        .get(field)
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.keys());
    for k in keys {
        let ok = !k.is_empty()
            && k.len() <= 253
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
            && k != "."
            && k != "..";
        if !ok {
            return Err(ApiError::field_invalid(
                kind,
                name,
                &format!("{field}[{k}]"),
                format!(
                    "Invalid value: {k:?}: a valid config key must consist of alphanumeric \
                     characters, '-', '_' or '.'"
                ),
            ));
        }
    }
    Ok(())
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

    /// Objects of every served resource hold their type without an allocation.
    #[test]
    fn every_resource_type_is_known_to_objects() {
        for r in ALL {
            for text in [r.kind, r.api_version()] {
                assert!(crate::object::KNOWN_TYPES.contains(&text), "{text}");
            }
        }
    }

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
}
