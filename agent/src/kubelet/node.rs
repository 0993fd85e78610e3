//! What the node reports of itself beside its pods: conditions of its own (the fleet source's
//! `SourceApplied`) and events about the node, as `kubectl describe node` shows them.

use std::collections::VecDeque;

use super::*;

/// Events about the node kept (the oldest go first).
const NODE_EVENTS: usize = 64;

/// A condition of the node beyond those of its resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Condition {
    pub(crate) kind: &'static str,
    /// `True`, `False` or `Unknown`.
    pub(crate) status: &'static str,
    pub(crate) reason: String,
    pub(crate) message: String,
}

/// The node's own conditions, with when each last changed status, and its stored events.
#[derive(Debug, Default)]
pub(super) struct NodeReport {
    conditions: Vec<(Condition, String)>,
    /// Names of the node's stored events, oldest first; `None` until read from the store.
    events: Option<VecDeque<String>>,
}

impl Kubelet {
    /// Sets one of the node's own conditions (by its type).
    pub(crate) fn set_condition(&self, condition: Condition) {
        let mut report = lock(&self.report);
        let now = crate::clock::now();
        match report
            .conditions
            .iter_mut()
            .find(|(c, _)| c.kind == condition.kind)
        {
            Some((c, since)) => {
                if c.status != condition.status {
                    *since = now;
                }
                *c = condition;
            }
            None => report.conditions.push((condition, now)),
        }
    }

    /// The node's own conditions as the Node object's `status.conditions` holds them.
    pub(crate) fn conditions(&self) -> Vec<Value> {
        lock(&self.report)
            .conditions
            .iter()
            .map(|(c, since)| {
                json!({
                    "type": c.kind, "status": c.status, "reason": c.reason, "message": c.message,
                    "lastHeartbeatTime": crate::clock::now(), "lastTransitionTime": since,
                })
            })
            .collect()
    }

    /// Stores an event about the node (in `default`, as the kubelet's node events are), keeping
    /// the last [`NODE_EVENTS`].
    pub(crate) fn node_event(&self, warning: bool, reason: &str, message: &str) {
        let now = jiff::Timestamp::now();
        let name = format!(
            "{}.{:016x}",
            self.node_name,
            u64::try_from(now.as_microsecond()).unwrap_or(0)
        );
        let time = crate::clock::now();
        let object = json!({
            "kind": "Event", "apiVersion": "v1",
            "metadata": {
                "name": name, "namespace": "default",
                "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": time,
            },
            "involvedObject": {"kind": "Node", "apiVersion": "v1", "name": self.node_name, "uid": self.node_uid},
            "reason": reason,
            "message": message,
            "type": if warning { "Warning" } else { "Normal" },
            "source": {"component": "wasmpod-source", "host": self.node_name},
            "firstTimestamp": time, "lastTimestamp": time, "count": 1,
            "reportingComponent": "wasmpod-source", "reportingInstance": self.node_name,
        });
        let Ok(object) = Object::from_value(object) else {
            return;
        };
        let mut report = lock(&self.report);
        let node = self.node_name.clone();
        let events = report.events.get_or_insert_with(|| {
            // Those of earlier runs of the agent count too.
            let mut names: Vec<String> = self
                .store
                .list("events", Some("default"))
                .1
                .iter()
                .filter(|e| {
                    e.field("involvedObject").is_some_and(|o| {
                        o.get("kind").and_then(Value::as_str) == Some("Node")
                            && o.get("name").and_then(Value::as_str) == Some(&node)
                    })
                })
                .map(|e| e.name().to_owned())
                .collect();
            names.sort();
            names.into()
        });
        if self
            .store
            .create_as("events", "default", &name, object, Durable::Later)
            .is_err()
        {
            return;
        }
        events.push_back(name);
        while events.len() > NODE_EVENTS {
            if let Some(old) = events.pop_front() {
                let _ = self
                    .store
                    .delete_if("events", "default", &old, Durable::Later, |_| true);
            }
        }
    }
}
