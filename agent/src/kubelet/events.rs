//! A pod's events in the store: each of the pod's event stream's records as a `v1 Event`, the
//! last few hundred kept, all removed with the pod.

use super::*;

/// Events kept per pod (the oldest go first), as the API server keeps events for a while.
const EVENTS_PER_POD: u64 = 256;

/// The name of a pod's event number `n`.
fn event_name(pod: &str, n: u64) -> String {
    format!("{pod}.{n:x}")
}

/// The events of one pod the agent stored: their numbers, oldest to next.
pub(super) struct Recorded {
    numbers: std::ops::Range<u64>,
    /// The pod ran before the agent's restart: it may have stored events of another range.
    resumed: bool,
}

impl Kubelet {
    /// Stores the pod's events as `v1 Event`s, the last [`EVENTS_PER_POD`] of them.
    /// Their names are the pod's name and a number counted from the time the agent began
    /// recording them (as the kubelet names events after the time), so the events of a pod
    /// run again after the agent's restart do not take the names of those from before.
    pub(super) async fn record_events(
        self: Arc<Self>,
        pod: PodHandle,
        ns: String,
        name: String,
        uid: String,
        resumed: bool,
    ) {
        let mut events = pod.events();
        let first = u64::try_from(jiff::Timestamp::now().as_microsecond()).unwrap_or(0);
        let mut n = first;
        while let Some(e) = events.next().await {
            n += 1;
            let this = event_name(&name, n);
            let field_path = e.container.as_ref().map(|c| {
                let list = if e.role == Some(wasmpod::ContainerRole::Regular) {
                    "containers"
                } else {
                    "initContainers"
                };
                format!("spec.{list}{{{c}}}")
            });
            let reason = serde_json::to_value(e.reason).unwrap_or_default();
            let object = json!({
                "kind": "Event",
                "apiVersion": "v1",
                "metadata": {
                    "name": this,
                    "namespace": ns,
                    "uid": uuid::Uuid::new_v4().to_string(),
                    "creationTimestamp": e.time,
                },
                "involvedObject": {
                    "kind": "Pod", "apiVersion": "v1", "namespace": ns, "name": name, "uid": uid,
                    "fieldPath": field_path,
                },
                "reason": reason,
                "message": e.message,
                "type": serde_json::to_value(e.kind).unwrap_or_default(),
                "source": {"component": "kubelet", "host": self.node_name()},
                "firstTimestamp": e.time,
                "lastTimestamp": e.time,
                "count": 1,
                "reportingComponent": "kubelet",
                "reportingInstance": self.node_name(),
            });
            // The pod's object may be gone (force-deleted): its events go with it.
            if self.store.get("pods", &ns, &name).is_none() {
                continue;
            }
            let Ok(object) = Object::from_value(object) else {
                continue;
            };
            if self
                .store
                .create_as("events", &ns, &this, object, Durable::Later)
                .is_err()
            {
                continue;
            }
            let oldest = {
                let mut all = lock(&self.events);
                let kept = all.entry(uid.clone()).or_insert(Recorded {
                    numbers: n..n,
                    resumed,
                });
                kept.numbers.end = n + 1;
                (kept.numbers.end - kept.numbers.start > EVENTS_PER_POD).then(|| {
                    kept.numbers.start += 1;
                    kept.numbers.start - 1
                })
            };
            if let Some(old) = oldest {
                let _ = self.store.delete_if(
                    "events",
                    &ns,
                    &event_name(&name, old),
                    Durable::Later,
                    |_| true,
                );
            }
        }
    }

    /// Removes a pod's stored events (its object is gone).
    pub(super) fn forget_events(&self, ns: &str, name: &str, uid: &str) {
        let recorded = lock(&self.events).remove(uid);
        let stored: Vec<String> = match recorded {
            Some(r) if !r.resumed => r.numbers.map(|n| event_name(name, n)).collect(),
            // A pod the node ran before the agent's restart may have events from then: find
            // them all by the involved object.
            _ => self
                .store
                .list("events", Some(ns))
                .1
                .iter()
                .filter(|e| {
                    e.field("involvedObject")
                        .is_some_and(|o| o.get("uid").and_then(Value::as_str) == Some(uid))
                })
                .map(|e| e.name().to_owned())
                .collect(),
        };
        for n in stored {
            let _ = self
                .store
                .delete_if("events", ns, &n, Durable::Later, |_| true);
        }
    }
}
