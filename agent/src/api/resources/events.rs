//! Events: written by the node (the kubelet's), read by clients.

use serde_json::{Value, json};

use super::{Column, Resource, Storage, Strategy, age, str_at};
use crate::object::Object;

pub(crate) static EVENTS: Resource = Resource {
    name: "events",
    singular: "event",
    kind: "Event",
    group: "",
    namespaced: true,
    short_names: &["ev"],
    verbs: &["get", "list", "watch"],
    subresources: &[],
    strategy: &Events,
};

struct Events;

impl Strategy for Events {
    fn storage(&self) -> Storage {
        Storage::ReadOnly
    }

    fn selectable(&self, field: &str) -> bool {
        field.starts_with("involvedObject.") || matches!(field, "reason" | "type" | "source")
    }

    fn columns(&self) -> &'static [Column] {
        &[
            Column("Last Seen", "string", 0),
            Column("Type", "string", 0),
            Column("Reason", "string", 0),
            Column("Object", "string", 0),
            Column("Message", "string", 0),
        ]
    }

    fn cells(&self, o: &Object, now: jiff::Timestamp) -> Vec<Value> {
        let o = &o.to_value();
        let seen = if o.pointer("/lastTimestamp").is_some_and(|t| !t.is_null()) {
            age(o, "/lastTimestamp", now)
        } else {
            age(o, "/eventTime", now)
        };
        let object = format!(
            "{}/{}",
            str_at(o, "/involvedObject/kind").to_lowercase(),
            str_at(o, "/involvedObject/name")
        );
        vec![
            seen,
            json!(str_at(o, "/type")),
            json!(str_at(o, "/reason")),
            json!(object),
            json!(str_at(o, "/message")),
        ]
    }
}
