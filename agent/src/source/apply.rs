//! Bringing the node to a revision: what to do is decided as data ([`plan`], from the revision
//! and the objects the store holds), then done ([`act`]). The source creates what is missing,
//! replaces what changed (a pod, whose spec does not change in place, is deleted gracefully and
//! created again once gone) and prunes what it made that the revision no longer holds. Objects
//! it did not make (no `app.kubernetes.io/managed-by: wasmpod-source` label) are never touched.

use std::sync::Arc;

use super::revision::{HASH, MANAGED_BY, MANAGER, Revision};
use crate::api::Api;
use crate::api::resources::{ALL, Resource};
use crate::object::Object;

/// What is stored under a name the revision gives, as the plan sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Stored {
    Absent,
    /// Made by the source, with the hash of what it applied; `deleting` while a pod terminates.
    Ours {
        hash: String,
        deleting: bool,
    },
    /// Made by someone else.
    Theirs,
}

/// An object the source made, as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Made {
    pub(super) resource: &'static str,
    pub(super) namespace: String,
    pub(super) name: String,
    /// A pod terminating.
    pub(super) deleting: bool,
}

/// One step toward the revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    /// Create the revision's item `n`.
    Create(usize),
    /// Replace the stored object with item `n`.
    Replace(usize),
    /// Delete an object the source made (a pod gracefully).
    Delete {
        resource: &'static str,
        namespace: String,
        name: String,
    },
    /// Item `n` waits until the old object of its name is gone.
    Wait(usize),
    /// Item `n`'s name is taken by an object the source did not make: left alone.
    Conflict(usize),
}

/// The order objects are made in (namespaces first, pods last) and removed in (the reverse).
fn rank(resource: &str) -> usize {
    match resource {
        "namespaces" => 0,
        "priorityclasses" | "runtimeclasses" => 1,
        "serviceaccounts" => 2,
        "configmaps" | "secrets" => 3,
        _ => 4,
    }
}

/// What to do: `stored` says what the store holds under each item's name, `made` lists every
/// object the source made.
pub(super) fn plan(revision: &Revision, stored: &[Stored], made: &[Made]) -> Vec<Action> {
    let mut actions = Vec::new();
    let mut order: Vec<usize> = (0..revision.items.len()).collect();
    order.sort_by_key(|&n| rank(revision.items[n].applied.resource.name));
    for n in order {
        let a = &revision.items[n].applied;
        match &stored[n] {
            Stored::Absent => actions.push(Action::Create(n)),
            Stored::Theirs => actions.push(Action::Conflict(n)),
            Stored::Ours { deleting: true, .. } => actions.push(Action::Wait(n)),
            Stored::Ours { hash, .. } if *hash == revision.items[n].hash => {}
            Stored::Ours { .. } if a.resource.name == "pods" => {
                actions.push(delete(a.resource.name, &a.namespace, &a.name));
                actions.push(Action::Wait(n));
            }
            Stored::Ours { .. } => actions.push(Action::Replace(n)),
        }
    }
    let mut pruned: Vec<&Made> = made
        .iter()
        .filter(|m| {
            !m.deleting
                && !revision.items.iter().any(|i| {
                    i.applied.resource.name == m.resource
                        && i.applied.namespace == m.namespace
                        && i.applied.name == m.name
                })
        })
        .collect();
    pruned.sort_by_key(|m| std::cmp::Reverse(rank(m.resource)));
    actions.extend(
        pruned
            .into_iter()
            .map(|m| delete(m.resource, &m.namespace, &m.name)),
    );
    actions
}

fn delete(resource: &'static str, ns: &str, name: &str) -> Action {
    Action::Delete {
        resource,
        namespace: ns.to_owned(),
        name: name.to_owned(),
    }
}

/// Whether the source made `object`, and the hash it applied.
fn ours(object: &Object) -> Option<&str> {
    let labels = object.metadata.labels.as_ref()?;
    if labels.get(MANAGED_BY).map(String::as_str) != Some(MANAGER) {
        return None;
    }
    Some(
        object
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(HASH))
            .map_or("", String::as_str),
    )
}

/// What the store holds under each of the revision's names, and every object the source made.
pub(super) fn observe(api: &Api, revision: &Revision) -> (Vec<Stored>, Vec<Made>) {
    let stored = revision
        .items
        .iter()
        .map(|i| {
            let a = &i.applied;
            match api.store.get(a.resource.name, &a.namespace, &a.name) {
                None => Stored::Absent,
                Some(o) => match ours(&o) {
                    Some(hash) => Stored::Ours {
                        hash: hash.to_owned(),
                        deleting: o.metadata.deletion_timestamp.is_some(),
                    },
                    None => Stored::Theirs,
                },
            }
        })
        .collect();
    // Namespaces are never deleted through this API: the source leaves those it made.
    let mut made = Vec::new();
    for resource in managed_resources().filter(|r| crate::api::source::deletable(r)) {
        for o in api.store.list(resource.name, None).1 {
            if ours(&o).is_some() {
                made.push(Made {
                    resource: resource.name,
                    namespace: o.namespace().to_owned(),
                    name: o.name().to_owned(),
                    deleting: o.metadata.deletion_timestamp.is_some(),
                });
            }
        }
    }
    (stored, made)
}

fn managed_resources() -> impl Iterator<Item = &'static Resource> {
    ALL.iter()
        .copied()
        .filter(|r| crate::api::source::resource_of(r.api_version(), r.kind).is_some())
}

/// What doing a plan came to: whether the node is at the revision, and what failed.
#[derive(Debug, Default)]
pub(super) struct Done {
    pub(super) converged: bool,
    pub(super) failed: Vec<String>,
    pub(super) changed: usize,
}

/// Does `actions`.
pub(super) async fn act(api: &Arc<Api>, revision: &Revision, actions: &[Action]) -> Done {
    let mut done = Done {
        converged: true,
        ..Done::default()
    };
    for action in actions {
        let outcome = match action {
            Action::Create(n) => {
                let item = &revision.items[*n];
                api.create_applied(&item.applied)
                    .await
                    .map(|_| tracing::info!(object = %item.shown(), kind = item.applied.resource.kind, "source: created"))
                    .map_err(|e| format!("{}: {}", item.file, e.message))
            }
            Action::Replace(n) => {
                let item = &revision.items[*n];
                api.replace_applied(&item.applied)
                    .await
                    .map(|_| tracing::info!(object = %item.shown(), kind = item.applied.resource.kind, "source: replaced"))
                    .map_err(|e| format!("{}: {}", item.file, e.message))
            }
            Action::Delete {
                resource,
                namespace,
                name,
            } => {
                let resource = ALL.iter().copied().find(|r| r.name == *resource);
                match resource {
                    Some(r) => api
                        .delete_applied(r, namespace, name)
                        .map(|()| {
                            tracing::info!(resource = r.name, namespace, name, "source: deleted")
                        })
                        .map_err(|e| format!("{} {namespace}/{name}: {}", r.kind, e.message)),
                    None => Ok(()),
                }
            }
            Action::Wait(_) => {
                done.converged = false;
                continue;
            }
            Action::Conflict(n) => {
                let item = &revision.items[*n];
                Err(format!(
                    "{}: {} {} exists and was not made by the source: left alone",
                    item.file,
                    item.applied.resource.kind,
                    item.shown()
                ))
            }
        };
        match outcome {
            Ok(()) => done.changed += 1,
            Err(why) => {
                done.converged = false;
                done.failed.push(why);
            }
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::super::revision::Item;
    use super::*;

    fn revision(objects: &[(&str, &str)]) -> Revision {
        let items = objects
            .iter()
            .map(|(kind, name)| {
                let api_version = if *kind == "PriorityClass" {
                    "scheduling.k8s.io/v1"
                } else {
                    "v1"
                };
                Item::for_test(serde_json::json!({
                    "apiVersion": api_version, "kind": kind, "metadata": {"name": name},
                }))
            })
            .collect();
        Revision {
            digest: "sha256:1".into(),
            revision: None,
            verified_by: None,
            items,
        }
    }

    fn ours(hash: &str) -> Stored {
        Stored::Ours {
            hash: hash.into(),
            deleting: false,
        }
    }

    #[test]
    fn plans_create_in_dependency_order_and_prune_in_reverse() {
        let r = revision(&[("Pod", "web"), ("ConfigMap", "conf"), ("Namespace", "apps")]);
        let made = |name: &str, resource, deleting| Made {
            resource,
            namespace: "default".into(),
            name: name.into(),
            deleting,
        };
        let made = [
            made("old", "pods", false),
            made("gone", "configmaps", false),
            made("leaving", "pods", true),
        ];
        let plan = plan(&r, &[Stored::Absent, Stored::Absent, Stored::Absent], &made);
        assert_eq!(
            plan,
            vec![
                Action::Create(2),
                Action::Create(1),
                Action::Create(0),
                delete("pods", "default", "old"),
                delete("configmaps", "default", "gone"),
            ]
        );
    }

    #[test]
    fn plans_what_changed_only_and_leaves_others_objects_alone() {
        let r = revision(&[
            ("Pod", "same"),
            ("Pod", "changed"),
            ("ConfigMap", "conf"),
            ("Secret", "theirs"),
            ("Pod", "old"),
        ]);
        let same = r.items[0].hash.clone();
        let stored = [
            ours(&same),
            ours("before"),
            ours("before"),
            Stored::Theirs,
            Stored::Ours {
                hash: "x".into(),
                deleting: true,
            },
        ];
        assert_eq!(
            plan(&r, &stored, &[]),
            vec![
                Action::Replace(2),
                Action::Conflict(3),
                delete("pods", "default", "changed"),
                Action::Wait(1),
                Action::Wait(4),
            ]
        );
    }
}
