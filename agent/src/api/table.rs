//! Tables (`meta.k8s.io/v1 Table`): what `kubectl get` prints, made by the server with the
//! columns and cell strings of the API server's printers (the kubelet's pod STATUS among them).

use serde_json::{Value, json};

use super::resources::{Column, Resource};
use crate::object::Object;

/// A table of `objects`; `with_columns` false leaves the column definitions out (watch events
/// after the first).
pub(crate) fn table(
    resource: &Resource,
    objects: &[&Object],
    resource_version: u64,
    with_columns: bool,
) -> Value {
    let now = jiff::Timestamp::now();
    let definitions: Vec<Value> = if with_columns {
        resource
            .strategy
            .columns()
            .iter()
            .map(|Column(name, kind, priority)| {
                json!({
                    "name": name,
                    "type": kind,
                    "format": if *name == "Name" { "name" } else { "" },
                    "description": "",
                    "priority": priority,
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| json!({"cells": resource.strategy.cells(o, now), "object": partial(o)}))
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version.to_string()},
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// The object's metadata, as a `PartialObjectMetadata`.
fn partial(object: &Object) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.metadata,
    })
}
