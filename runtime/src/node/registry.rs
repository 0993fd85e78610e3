//! The node's pods by name: at most one pod of a name runs at any time (Kubernetes' pod safety
//! guarantee), and terminated pods are garbage-collected past a threshold.
//!
//! Nothing here is linear in the number of pods per pod event: the terminated pods are kept in
//! creation order as they finish, so collecting the oldest past the threshold looks at them
//! alone, and the slots of deleted pods are swept out when the table has doubled since the last
//! sweep (amortized constant per pod).

use std::collections::{BTreeMap, HashMap};
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

/// The fewest slots a sweep of deleted pods waits for.
const FIRST_SWEEP: usize = 1024;

/// Pods by (namespace, name), the creation counter that orders them, the terminated pods by
/// creation, and the table's size at which deleted pods' slots are swept out next.
struct Pods(
    HashMap<(String, String), Slot>,
    u64,
    BTreeMap<u64, PodHandle>,
    usize,
);

impl Default for Pods {
    fn default() -> Pods {
        Pods(HashMap::new(), 0, BTreeMap::new(), FIRST_SWEEP)
    }
}

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
        handle
            .inner
            .seq
            .store(seq, std::sync::atomic::Ordering::Relaxed);
        // A pod may end before it is recorded, when its stop found no order to keep it by.
        if handle.is_finished() && !handle.is_deleting() {
            pods.2.insert(seq, handle.clone());
        }
        pods.0.insert(
            (namespace.to_owned(), name.to_owned()),
            Slot::Pod { handle, seq },
        );
        if pods.0.len() >= pods.3 {
            pods.0
                .retain(|_, slot| !matches!(slot, Slot::Pod { handle, .. } if handle.is_deleted()));
            pods.3 = (pods.0.len() * 2).max(FIRST_SWEEP);
        }
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

    /// A pod stopped for good (it finished, or is being deleted): a finished pod joins the
    /// terminated ones, and the oldest terminated pods beyond `keep` are deleted, as Kubernetes'
    /// pod garbage collector does, and their directories once they are gone.
    pub(super) fn stopped(&self, pod: &PodHandle, keep: usize) {
        for gone in self.collect_garbage(pod, keep) {
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

    fn collect_garbage(&self, pod: &PodHandle, keep: usize) -> Vec<PodHandle> {
        let mut pods = self.lock();
        let seq = pod.inner.seq.load(std::sync::atomic::Ordering::Relaxed);
        if seq != 0 && pod.is_finished() && !pod.is_deleting() {
            pods.2.insert(seq, pod.clone());
        }
        if pods.2.len() <= keep {
            return Vec::new();
        }
        // Those deleted since they finished do not count.
        pods.2.retain(|_, p| !p.is_deleting());
        let mut victims = Vec::new();
        while pods.2.len() > keep {
            if let Some((_, oldest)) = pods.2.pop_first() {
                victims.push(oldest);
            }
        }
        drop(pods);
        for pod in &victims {
            pod.delete(Some(std::time::Duration::ZERO));
        }
        victims
    }
}
