//! The object store: every API object (pods with their status, events, ConfigMaps, ...), held in
//! memory for reads and written through to an embedded, crash-safe database (redb) under the
//! state dir. Every change gets the next `resourceVersion` and is published to watchers.
//!
//! Writes the API acknowledges are committed durably (fsync) before the answer; status and event
//! writes, which the agent can make again from the running pods, are committed without waiting
//! for the disk and become durable with the next durable commit.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::broadcast;

use crate::bounds::MAX_OBJECT;
use crate::object::Object;
use crate::status::ApiError;

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const RESOURCE_VERSION: &str = "resourceVersion";

/// Non-durable commits at most between two durable ones.
const LAZY_COMMITS: usize = 256;
/// The database's page cache (read cache and write buffer together).
const DB_CACHE: usize = 1 << 20;
/// Changes kept for watches that start from an older `resourceVersion`; older ones get 410.
const HISTORY: usize = 1024;
/// The most objects of one resource the store keeps: past it, creations are refused (an API
/// client cannot fill the disk or the memory with objects).
pub(crate) const MAX_OBJECTS: usize = 50_000;

/// What happened to an object, as a watch reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

impl ChangeKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "ADDED",
            ChangeKind::Modified => "MODIFIED",
            ChangeKind::Deleted => "DELETED",
        }
    }
}

/// One change of one object.
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) rv: u64,
    pub(crate) resource: &'static str,
    pub(crate) kind: ChangeKind,
    pub(crate) object: Arc<Object>,
}

type Objects = BTreeMap<(String, String), Arc<Object>>;

/// A watch's start: the changes it has to catch up on, and a receiver of those to come.
/// What a watch starts from: the changes so far, a receiver of those to come, and the
/// `resourceVersion` the changes so far bring a client to.
pub(crate) type Watch = (Vec<Arc<Change>>, broadcast::Receiver<Arc<Change>>, u64);

struct State {
    rv: u64,
    /// Commits since the last durable one.
    lazy: usize,
    objects: HashMap<&'static str, Objects>,
    history: VecDeque<Arc<Change>>,
}

/// How a write reaches the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durable {
    /// Committed to disk before the call returns (what the API acknowledges).
    Now,
    /// Committed with the next durable write (status and events, made again after a crash).
    Later,
}

pub(crate) struct Store {
    db: Database,
    state: Mutex<State>,
    bus: broadcast::Sender<Arc<Change>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

fn key(resource: &str, namespace: &str, name: &str) -> String {
    format!("{resource}/{namespace}/{name}")
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(format!("store: {e}"))
}

impl Store {
    /// Opens (or creates) the database at `path`; `resources` are the names objects may have.
    pub(crate) fn open(path: &Path, resources: &[&'static str]) -> Result<Store, String> {
        // Every object is held in memory and read back from the file only at start: the
        // database's cache need only hold a commit's pages, not redb's default of 1 GiB.
        let db = Database::builder()
            .set_cache_size(DB_CACHE)
            .create(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let mut objects: HashMap<&'static str, Objects> =
            resources.iter().map(|r| (*r, Objects::new())).collect();
        let mut rv = 0;
        {
            let txn = db.begin_write().map_err(|e| e.to_string())?;
            txn.open_table(OBJECTS).map_err(|e| e.to_string())?;
            txn.open_table(META).map_err(|e| e.to_string())?;
            txn.commit().map_err(|e| e.to_string())?;
        }
        let read = db.begin_read().map_err(|e| e.to_string())?;
        let meta = read.open_table(META).map_err(|e| e.to_string())?;
        if let Some(v) = meta.get(RESOURCE_VERSION).map_err(|e| e.to_string())? {
            rv = v.value();
        }
        let table = read.open_table(OBJECTS).map_err(|e| e.to_string())?;
        for item in table.iter().map_err(|e| e.to_string())? {
            let (k, v) = item.map_err(|e| e.to_string())?;
            let k = k.value();
            let mut parts = k.splitn(3, '/');
            let (Some(resource), Some(namespace), Some(name)) =
                (parts.next(), parts.next(), parts.next())
            else {
                tracing::warn!(key = k, "store: skipping an object with a malformed key");
                continue;
            };
            let Some(map) = objects.get_mut(resource) else {
                tracing::warn!(key = k, "store: skipping an object of an unknown resource");
                continue;
            };
            match Object::from_slice(v.value()) {
                Ok(object) => {
                    map.insert((namespace.to_owned(), name.to_owned()), Arc::new(object));
                }
                Err(e) => {
                    tracing::warn!(
                        key = k,
                        "store: skipping an unreadable object: {}",
                        e.message
                    );
                }
            }
        }
        drop(table);
        drop(meta);
        drop(read);
        let (bus, _) = broadcast::channel(HISTORY);
        Ok(Store {
            db,
            state: Mutex::new(State {
                rv,
                lazy: 0,
                objects,
                history: VecDeque::new(),
            }),
            bus,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current `resourceVersion`.
    pub(crate) fn resource_version(&self) -> u64 {
        self.state().rv
    }

    pub(crate) fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Arc<Object>> {
        let state = self.state();
        state
            .objects
            .get(resource)?
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// The objects of a resource (of one namespace, or all), by namespace and name, with the
    /// `resourceVersion` they were read at.
    pub(crate) fn list(&self, resource: &str, namespace: Option<&str>) -> (u64, Vec<Arc<Object>>) {
        let state = self.state();
        let Some(map) = state.objects.get(resource) else {
            return (state.rv, Vec::new());
        };
        let items = match namespace {
            Some(ns) => map
                .range((ns.to_owned(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
            None => map.values().cloned().collect(),
        };
        (state.rv, items)
    }

    /// Applies one change: `next` is the object's new value (`None` deletes it).
    fn commit(
        &self,
        state: &mut State,
        resource: &'static str,
        namespace: &str,
        name: &str,
        next: Option<Object>,
        durable: Durable,
    ) -> Result<Arc<Object>, ApiError> {
        let rv = state.rv + 1;
        let k = key(resource, namespace, name);
        let next = next.map(|mut v| {
            v.metadata.resource_version = Some(rv.to_string());
            v
        });
        let bytes = match &next {
            Some(v) => Some(serde_json::to_vec(v).map_err(internal)?),
            None => None,
        };
        if bytes.as_ref().is_some_and(|b| b.len() > MAX_OBJECT) {
            return Err(ApiError::too_large(format!(
                "the object is larger than {MAX_OBJECT} bytes"
            )));
        }
        let mut txn = self.db.begin_write().map_err(internal)?;
        // redb keeps what non-durable commits wrote in memory until a durable one: every
        // `LAZY_COMMITS`th commit is durable, so that memory (and what a crash can lose) is
        // bounded however long the API is idle while pods change.
        let durable = if durable == Durable::Now || state.lazy >= LAZY_COMMITS {
            state.lazy = 0;
            Durability::Immediate
        } else {
            state.lazy += 1;
            Durability::None
        };
        txn.set_durability(durable).map_err(internal)?;
        {
            let mut table = txn.open_table(OBJECTS).map_err(internal)?;
            match &bytes {
                Some(b) => drop(table.insert(k.as_str(), b.as_slice()).map_err(internal)?),
                None => drop(table.remove(k.as_str()).map_err(internal)?),
            }
            let mut meta = txn.open_table(META).map_err(internal)?;
            meta.insert(RESOURCE_VERSION, rv).map_err(internal)?;
        }
        txn.commit().map_err(internal)?;
        state.rv = rv;
        let map = state.objects.entry(resource).or_default();
        let id = (namespace.to_owned(), name.to_owned());
        let (kind, object) = match next {
            Some(v) => {
                let v = Arc::new(v);
                let kind = match map.insert(id, v.clone()) {
                    Some(_) => ChangeKind::Modified,
                    None => ChangeKind::Added,
                };
                (kind, v)
            }
            None => {
                let old = map.remove(&id).unwrap_or_default();
                // A deleted object is reported with the resourceVersion of its deletion.
                let mut old = Arc::unwrap_or_clone(old);
                old.metadata.resource_version = Some(rv.to_string());
                (ChangeKind::Deleted, Arc::new(old))
            }
        };
        let change = Arc::new(Change {
            rv,
            resource,
            kind,
            object: object.clone(),
        });
        if state.history.len() == HISTORY {
            state.history.pop_front();
        }
        state.history.push_back(change.clone());
        let _ = self.bus.send(change);
        Ok(object)
    }

    /// Creates an object durably; `AlreadyExists` if one of that name is there.
    pub(crate) fn create(
        &self,
        resource: &'static str,
        namespace: &str,
        name: &str,
        value: Object,
    ) -> Result<Arc<Object>, ApiError> {
        self.create_as(resource, namespace, name, value, Durable::Now)
    }

    /// Creates an object, committed as `durable` says (events: with the next durable write).
    pub(crate) fn create_as(
        &self,
        resource: &'static str,
        namespace: &str,
        name: &str,
        value: Object,
        durable: Durable,
    ) -> Result<Arc<Object>, ApiError> {
        let mut state = self.state();
        let exists = state
            .objects
            .get(resource)
            .is_some_and(|m| m.contains_key(&(namespace.to_owned(), name.to_owned())));
        if exists {
            return Err(ApiError::already_exists(resource, name));
        }
        if state
            .objects
            .get(resource)
            .is_some_and(|m| m.len() >= MAX_OBJECTS)
        {
            return Err(ApiError::forbidden(
                resource,
                name,
                format!(
                    "{resource} \"{name}\" is forbidden: the node keeps at most {MAX_OBJECTS} {resource}"
                ),
            ));
        }
        self.commit(&mut state, resource, namespace, name, Some(value), durable)
    }

    /// Changes an object with `change`, which sees the current value; an unchanged object is
    /// not written again. `NotFound` if there is none.
    pub(crate) fn update(
        &self,
        resource: &'static str,
        namespace: &str,
        name: &str,
        durable: Durable,
        change: impl FnOnce(&mut Object) -> Result<(), ApiError>,
    ) -> Result<Arc<Object>, ApiError> {
        let mut state = self.state();
        let current = state
            .objects
            .get(resource)
            .and_then(|m| m.get(&(namespace.to_owned(), name.to_owned())))
            .cloned()
            .ok_or_else(|| ApiError::not_found(resource, name))?;
        let mut next = (*current).clone();
        change(&mut next)?;
        if next == *current {
            return Ok(current);
        }
        self.commit(&mut state, resource, namespace, name, Some(next), durable)
    }

    /// Deletes an object if `check` holds for it; returns it as it was deleted.
    pub(crate) fn delete_if(
        &self,
        resource: &'static str,
        namespace: &str,
        name: &str,
        durable: Durable,
        check: impl FnOnce(&Object) -> bool,
    ) -> Result<Option<Arc<Object>>, ApiError> {
        let mut state = self.state();
        let found = state
            .objects
            .get(resource)
            .and_then(|m| m.get(&(namespace.to_owned(), name.to_owned())))
            .is_some_and(|v| check(v));
        if !found {
            return Ok(None);
        }
        self.commit(&mut state, resource, namespace, name, None, durable)
            .map(Some)
    }

    /// Tells the watchers of `resource` that `object`, which is not kept here (the node, made
    /// from the running node), changed; at the current resourceVersion, and not in the history
    /// (a watch resumed from before it does not see it again).
    pub(crate) fn announce(&self, resource: &'static str, object: Object) {
        // Under the lock, as commits send theirs: watchers see resourceVersions in order.
        let state = self.state();
        let _ = self.bus.send(Arc::new(Change {
            rv: state.rv,
            resource,
            kind: ChangeKind::Modified,
            object: Arc::new(object),
        }));
    }

    /// A watch of `resource` from `from` (a `resourceVersion`; `None`: from now, with every
    /// current object first as `ADDED`): the changes so far, and a receiver of those to come.
    /// A `from` older than the kept history is `410 Gone`, as the API server answers.
    pub(crate) fn watch(
        &self,
        resource: &'static str,
        from: Option<u64>,
    ) -> Result<Watch, ApiError> {
        let state = self.state();
        let rx = self.bus.subscribe();
        let backlog = match from {
            None => state
                .objects
                .get(resource)
                .into_iter()
                .flat_map(|m| m.values())
                .map(|v| {
                    Arc::new(Change {
                        rv: state.rv,
                        resource,
                        kind: ChangeKind::Added,
                        object: v.clone(),
                    })
                })
                .collect(),
            Some(from) => {
                let oldest = state.history.front().map_or(state.rv, |c| c.rv - 1);
                if from < oldest {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {from} ({oldest})"
                    )));
                }
                state
                    .history
                    .iter()
                    .filter(|c| c.rv > from && c.resource == resource)
                    .cloned()
                    .collect()
            }
        };
        Ok((backlog, rx, state.rv))
    }
}

#[cfg(test)]
mod tests;
