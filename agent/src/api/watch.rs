//! Watches: a resource's changes from a `resourceVersion` as JSON lines, with bookmarks and
//! streaming lists as the API server sends them.

use std::time::Duration;

use bytes::Bytes;
use http::Response;
use serde_json::json;

use super::resources::{Resource, Storage};
use super::select::{Fields, Labels};
use super::{Api, Call, table};
use crate::body::{Body, Ended};
use crate::object::Object;
use crate::status::ApiError;
use crate::store::ChangeKind;

/// The longest a watch stays open (the API server's default is 30 to 60 minutes).
const MAX_WATCH: Duration = Duration::from_secs(3600);
/// How often a watch that allows bookmarks gets one (the API server's are about a minute apart).
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);

impl Api {
    /// A watch: JSON lines `{"type": ..., "object": ...}` from the given `resourceVersion` (or
    /// every object as `ADDED`, then what changes), until `timeoutSeconds` or the client leaves.
    /// With `allowWatchBookmarks`, a `BOOKMARK` every [`BOOKMARK_EVERY`] carries the
    /// `resourceVersion` reached; with `sendInitialEvents` (a streaming list) every object comes
    /// first as `ADDED`, then a `BOOKMARK` annotated `k8s.io/initial-events-end`, as the API
    /// server sends them.
    pub(super) fn watch(
        &self,
        resource: &'static Resource,
        namespace: Option<&str>,
        labels: Labels,
        fields: Fields,
        call: &Call,
    ) -> Result<Response<Body>, ApiError> {
        let bookmarks = call.query.flag("allowWatchBookmarks") && !call.table;
        let initial = call.query.get("sendInitialEvents").map(|v| v == "true");
        if initial == Some(true) && !bookmarks {
            return Err(ApiError::field_invalid(
                "ListOptions",
                "",
                "sendInitialEvents",
                "Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true".into(),
            ));
        }
        let from = match call.query.get("resourceVersion") {
            // A streaming list starts from the current objects, whatever version it names.
            _ if initial == Some(true) => None,
            None | Some("" | "0") => None,
            Some(v) => Some(v.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("resourceVersion: invalid value {v:?}"))
            })?),
        };
        let timeout = call
            .query
            .number("timeoutSeconds")?
            .map_or(MAX_WATCH, |s| Duration::from_secs(s.clamp(1, 3600) as u64));
        let nodes = matches!(resource.strategy.storage(), Storage::Node)
            .then(|| self.objects(resource, None).1);
        let (backlog, mut rx, mut reached) = self.store.watch(resource.name, from)?;
        // `sendInitialEvents=false` without a version: only what changes from now.
        let backlog = if initial == Some(false) && from.is_none() {
            Vec::new()
        } else {
            backlog
        };
        let kind_of = (resource.kind, resource.api_version());
        let bookmark = move |rv: u64, end_of_initial: bool| -> Bytes {
            let mut metadata = json!({"resourceVersion": rv.to_string()});
            if end_of_initial {
                metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            let event = json!({
                "type": "BOOKMARK",
                "object": {"kind": kind_of.0, "apiVersion": kind_of.1, "metadata": metadata},
            });
            let mut bytes = serde_json::to_vec(&event).unwrap_or_default();
            bytes.push(b'\n');
            Bytes::from(bytes)
        };
        let (tx, body) = Body::channel();
        let namespace = namespace.map(str::to_owned);
        let table = call.table;
        let wanted = move |resource_name: &str, object: &Object| {
            resource_name == resource.name
                && namespace
                    .as_deref()
                    .is_none_or(|ns| object.namespace() == ns)
                && labels.matches(object)
                && fields.matches(object)
        };
        let mut first = true;
        let mut line = move |kind: ChangeKind, object: &Object, rv: u64| -> Bytes {
            #[derive(serde::Serialize)]
            struct Event<'a, T> {
                #[serde(rename = "type")]
                kind: &'static str,
                object: &'a T,
            }
            let kind = kind.as_str();
            let mut bytes = if table {
                let t = table::table(resource, &[object], rv, first);
                first = false;
                serde_json::to_vec(&Event { kind, object: &t })
            } else {
                serde_json::to_vec(&Event { kind, object })
            }
            .unwrap_or_default();
            bytes.push(b'\n');
            Bytes::from(bytes)
        };
        tokio::spawn(async move {
            let deadline = tokio::time::sleep(timeout);
            tokio::pin!(deadline);
            if let Some(nodes) = nodes {
                for n in nodes {
                    if tx.send(line(ChangeKind::Added, &n, 0)).await.is_err() {
                        return;
                    }
                }
            }
            let mut pending = backlog.into_iter();
            let mut initial_end = initial == Some(true);
            let mut ticks = tokio::time::interval(BOOKMARK_EVERY);
            ticks.reset();
            loop {
                let change = match pending.next() {
                    Some(change) => change,
                    None if initial_end => {
                        initial_end = false;
                        if tx.send(bookmark(reached, true)).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    None => tokio::select! {
                        c = rx.recv() => match c {
                            Ok(change) => change,
                            // A watcher that fell behind is ended; the client lists again.
                            Err(_) => return,
                        },
                        _ = ticks.tick(), if bookmarks => {
                            if tx.send(bookmark(reached, false)).await.is_err() {
                                return;
                            }
                            continue;
                        }
                        _ = &mut deadline => return,
                        _ = tx.closed() => return,
                    },
                };
                reached = reached.max(change.rv);
                if wanted(change.resource, &change.object)
                    && let Err(why) = tx.send(line(change.kind, &change.object, change.rv)).await
                {
                    if why == Ended::TooSlow {
                        tracing::debug!(
                            resource = resource.name,
                            "a watch that did not read what it was sent is ended"
                        );
                    }
                    return;
                }
            }
        });
        let mut r = Response::new(body);
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        Ok(r)
    }
}
