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
    /// Its handle holds its place in the order of creation.
    Pod(PodHandle),
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

struct Pods {
    by_name: HashMap<(String, String), Slot>,
    /// The creation counter that orders them.
    created: u64,
    /// The terminated pods, by creation.
    terminated: BTreeMap<u64, PodHandle>,
    /// The table's size at which the slots of deleted pods are swept out next.
    sweep_at: usize,
}

impl Default for Pods {
    fn default() -> Pods {
        Pods {
            by_name: HashMap::new(),
            created: 0,
            terminated: BTreeMap::new(),
            sweep_at: FIRST_SWEEP,
        }
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
        match pods.by_name.get(&key) {
            Some(Slot::Creating) => return Reserve::Taken,
            Some(Slot::Pod(handle)) if !handle.is_deleted() => {
                return if handle.is_deleting() {
                    Reserve::Wait(handle.clone())
                } else {
                    Reserve::Taken
                };
            }
            _ => {}
        }
        pods.by_name.insert(key, Slot::Creating);
        Reserve::Reserved
    }

    /// Gives up a reservation (the pod could not be created).
    pub(super) fn release(&self, namespace: &str, name: &str) {
        let mut pods = self.lock();
        let key = (namespace.to_owned(), name.to_owned());
        if matches!(pods.by_name.get(&key), Some(Slot::Creating)) {
            pods.by_name.remove(&key);
        }
    }

    /// Records the created pod under its reserved name.
    pub(super) fn insert(&self, namespace: &str, name: &str, handle: PodHandle) {
        let mut pods = self.lock();
        pods.created += 1;
        let seq = pods.created;
        handle
            .inner
            .seq
            .store(seq, std::sync::atomic::Ordering::Relaxed);
        // A pod may end before it is recorded, when its stop found no order to keep it by.
        if handle.is_finished() && !handle.is_deleting() {
            pods.terminated.insert(seq, handle.clone());
        }
        pods.by_name
            .insert((namespace.to_owned(), name.to_owned()), Slot::Pod(handle));
        if pods.by_name.len() >= pods.sweep_at {
            pods.by_name
                .retain(|_, slot| !matches!(slot, Slot::Pod(handle) if handle.is_deleted()));
            pods.sweep_at = (pods.by_name.len() * 2).max(FIRST_SWEEP);
        }
    }

    /// The pods not yet deleted, oldest first.
    pub(super) fn list(&self) -> Vec<PodHandle> {
        let mut pods = self.lock();
        pods.by_name
            .retain(|_, slot| !matches!(slot, Slot::Pod(handle) if handle.is_deleted()));
        let mut list: Vec<(u64, PodHandle)> = pods
            .by_name
            .values()
            .filter_map(|slot| match slot {
                Slot::Pod(handle) => Some((handle.seq(), handle.clone())),
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
                for dir in [gone.dir(), gone.inner.logs.dir()] {
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
        let seq = pod.seq();
        if seq != 0 && pod.is_finished() && !pod.is_deleting() {
            pods.terminated.insert(seq, pod.clone());
        }
        if pods.terminated.len() <= keep {
            return Vec::new();
        }
        // Those deleted since they finished do not count.
        pods.terminated.retain(|_, p| !p.is_deleting());
        let excess = pods.terminated.len().saturating_sub(keep);
        let victims: Vec<PodHandle> = (0..excess)
            .filter_map(|_| pods.terminated.pop_first().map(|(_, pod)| pod))
            .collect();
        drop(pods);
        for pod in &victims {
            pod.delete(Some(std::time::Duration::ZERO));
        }
        victims
    }
}
