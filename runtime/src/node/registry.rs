//! The node's pods by name: at most one pod of a name runs at any time (Kubernetes' pod safety
//! guarantee), and terminated pods are garbage-collected past a threshold.

use std::collections::HashMap;
use std::sync::Mutex;

use super::PodHandle;

/// A name's slot: a pod being created (its name is taken), or a pod.
enum Slot {
    Creating,
    Pod { handle: PodHandle, seq: u64 },
}

/// What [`Registry::reserve`] found.
pub(super) enum Reserve {
    /// The name is now reserved for the caller.
    Reserved,
    /// A pod of that name is terminating: wait until it is gone, then try again.
    Wait(PodHandle),
    /// A pod of that name exists (or is being created) and is not being deleted.
    Taken,
}

/// Pods by (namespace, name), and the creation counter that orders them.
type Pods = (HashMap<(String, String), Slot>, u64);

#[derive(Default)]
pub(super) struct Registry {
    pods: Mutex<Pods>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pods> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn reserve(&self, namespace: &str, name: &str) -> Reserve {
        let key = (namespace.to_owned(), name.to_owned());
        let mut pods = self.lock();
        match pods.0.get(&key) {
            Some(Slot::Creating) => return Reserve::Taken,
            Some(Slot::Pod { handle, .. }) if !handle.is_deleted() => {
                return if handle.is_deleting() {
                    Reserve::Wait(handle.clone())
                } else {
                    Reserve::Taken
                };
            }
            _ => {}
        }
        pods.0.insert(key, Slot::Creating);
        Reserve::Reserved
    }

    /// Gives up a reservation (the pod could not be created).
    pub(super) fn release(&self, namespace: &str, name: &str) {
        let mut pods = self.lock();
        let key = (namespace.to_owned(), name.to_owned());
        if matches!(pods.0.get(&key), Some(Slot::Creating)) {
            pods.0.remove(&key);
        }
    }

    /// Records the created pod under its reserved name.
    pub(super) fn insert(&self, namespace: &str, name: &str, handle: PodHandle) {
        let mut pods = self.lock();
        pods.1 += 1;
        let seq = pods.1;
        pods.0.insert(
            (namespace.to_owned(), name.to_owned()),
            Slot::Pod { handle, seq },
        );
    }

    /// The pods not yet deleted, oldest first.
    pub(super) fn list(&self) -> Vec<PodHandle> {
        let mut pods = self.lock();
        pods.0
            .retain(|_, slot| !matches!(slot, Slot::Pod { handle, .. } if handle.is_deleted()));
        let mut list: Vec<(u64, PodHandle)> = pods
            .0
            .values()
            .filter_map(|slot| match slot {
                Slot::Pod { handle, seq } => Some((*seq, handle.clone())),
                Slot::Creating => None,
            })
            .collect();
        list.sort_by_key(|(seq, _)| *seq);
        list.into_iter().map(|(_, h)| h).collect()
    }

    /// Deletes the oldest terminated pods beyond `keep`, as Kubernetes' pod garbage collector
    /// does, and their directories once they are gone.
    pub(super) fn sweep(&self, keep: usize) {
        for gone in self.collect_garbage(keep) {
            tokio::spawn(async move {
                gone.deleted().await;
                for dir in [gone.dir(), &gone.inner.log_dir] {
                    if let Err(e) = std::fs::remove_dir_all(dir)
                        && e.kind() != std::io::ErrorKind::NotFound
                    {
                        tracing::warn!(dir = %dir.display(), "cannot remove a collected pod: {e}");
                    }
                }
            });
        }
    }

    fn collect_garbage(&self, keep: usize) -> Vec<PodHandle> {
        // Cheap in the common case: with no more pods than `keep`, no more are terminated.
        if self.lock().0.len() <= keep {
            return Vec::new();
        }
        let terminated: Vec<PodHandle> = self
            .list()
            .into_iter()
            .filter(|p| p.is_finished() && !p.is_deleting())
            .collect();
        let excess = terminated.len().saturating_sub(keep);
        let victims: Vec<PodHandle> = terminated.into_iter().take(excess).collect();
        for pod in &victims {
            pod.delete(Some(std::time::Duration::ZERO));
        }
        victims
    }
}
