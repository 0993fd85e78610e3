//! Get, list, watch, create, update, patch and delete of any resource, with what the API server
//! checks for all of them (names, namespaces, resourceVersion preconditions); [`super::pods`] adds
//! what is particular to pods.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{Value, json};

use super::resources::{Resource, Storage};
use super::select::{Fields, Labels};
use super::{Api, Call, json, patch, table};
use crate::body::{Body, Ended};
use crate::status::{ApiError, Cause};
use crate::store::{ChangeKind, Durable};

/// The longest a watch stays open (the API server's default is 30 to 60 minutes).
const MAX_WATCH: Duration = Duration::from_secs(3600);

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4()
        .as_bytes()
        .iter()
        .take(5)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

impl Api {
    /// The namespace and name a new object gets, with the metadata the API server sets
    /// (`uid`, `creationTimestamp`, `namespace`; `generateName` made into a name).
    pub(super) fn new_object(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        body: &mut Value,
    ) -> Result<(String, String), ApiError> {
        if !body.is_object() {
            return Err(ApiError::bad_request("the body is not a JSON object"));
        }
        let (kind, version) = (body.get("kind"), body.get("apiVersion"));
        if kind.is_some_and(|k| k != resource.kind)
            || version.is_some_and(|v| v != resource.api_version())
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version ({})",
                version.and_then(Value::as_str).unwrap_or(""),
                resource.api_version()
            )));
        }
        body["kind"] = json!(resource.kind);
        body["apiVersion"] = json!(resource.api_version());
        if !body.get("metadata").is_some_and(Value::is_object) {
            body["metadata"] = json!({});
        }
        let meta = &mut body["metadata"];
        let ns = match (namespace, meta.get("namespace").and_then(Value::as_str)) {
            (Some(path), Some(given)) if !given.is_empty() && given != path => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            (Some(path), _) => path.to_owned(),
            (None, _) => String::new(),
        };
        let name = match (
            meta.get("name").and_then(Value::as_str),
            meta.get("generateName").and_then(Value::as_str),
        ) {
            (Some(n), _) if !n.is_empty() => n.to_owned(),
            (_, Some(prefix)) if !prefix.is_empty() => format!("{prefix}{}", random_suffix()),
            _ => {
                return Err(ApiError::invalid(
                    resource.kind,
                    "",
                    vec![Cause {
                        reason: "FieldValueRequired".into(),
                        field: "metadata.name".into(),
                        message: "Required value: name or generateName is required".into(),
                    }],
                ));
            }
        };
        resource
            .strategy
            .check_name(&name)
            .map_err(|m| ApiError::field_invalid(resource.kind, &name, "metadata.name", m))?;
        if resource.namespaced {
            meta["namespace"] = json!(ns);
        } else if let Some(m) = meta.as_object_mut() {
            m.remove("namespace");
        }
        meta["name"] = json!(name);
        meta["uid"] = json!(uuid::Uuid::new_v4().to_string());
        meta["creationTimestamp"] = json!(crate::clock::now());
        if let Some(m) = meta.as_object_mut() {
            for set_by_server in [
                "resourceVersion",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "managedFields",
                "selfLink",
                "generation",
            ] {
                m.remove(set_by_server);
            }
        }
        Ok((ns, name))
    }

    pub(super) fn get(
        &self,
        resource: &'static Resource,
        namespace: Option<&str>,
        name: &str,
        call: &Call,
    ) -> Result<Response<Body>, ApiError> {
        let object = if resource.strategy.storage() == Storage::Node {
            Arc::new(self.node_object(name)?)
        } else {
            self.store
                .get(resource.name, namespace.unwrap_or(""), name)
                .ok_or_else(|| ApiError::not_found(resource.name, name))?
        };
        Ok(if call.table {
            let rv = self.store.resource_version();
            json(
                StatusCode::OK,
                &table::table(resource, &[&object], rv, true),
            )
        } else {
            json(StatusCode::OK, &object)
        })
    }

    fn objects(&self, resource: &Resource, namespace: Option<&str>) -> (u64, Vec<Arc<Value>>) {
        if resource.strategy.storage() == Storage::Node {
            let node = self.node_object(self.kubelet.node_name()).ok();
            (
                self.store.resource_version(),
                node.map(Arc::new).into_iter().collect(),
            )
        } else {
            self.store.list(resource.name, namespace)
        }
    }

    pub(super) fn list_or_watch(
        &self,
        resource: &'static Resource,
        namespace: Option<&str>,
        call: &Call,
    ) -> Result<Response<Body>, ApiError> {
        let labels = Labels::parse(call.query.get("labelSelector").unwrap_or(""))?;
        let fields = Fields::parse(call.query.get("fieldSelector").unwrap_or(""), resource)?;
        if call.query.flag("watch") {
            return self.watch(resource, namespace, labels, fields, call);
        }
        let (rv, items) = self.objects(resource, namespace);
        let items: Vec<&Value> = items
            .iter()
            .map(|v| &**v)
            .filter(|v| labels.matches(v) && fields.matches(v))
            .collect();
        if call.table {
            return Ok(json(
                StatusCode::OK,
                &table::table(resource, &items, rv, true),
            ));
        }
        Ok(json(
            StatusCode::OK,
            &json!({
                "kind": format!("{}List", resource.kind),
                "apiVersion": resource.api_version(),
                "metadata": {"resourceVersion": rv.to_string()},
                "items": items,
            }),
        ))
    }

    /// A watch: JSON lines `{"type": ..., "object": ...}` from the given `resourceVersion` (or
    /// every object as `ADDED`, then what changes), until `timeoutSeconds` or the client leaves.
    fn watch(
        &self,
        resource: &'static Resource,
        namespace: Option<&str>,
        labels: Labels,
        fields: Fields,
        call: &Call,
    ) -> Result<Response<Body>, ApiError> {
        let from = match call.query.get("resourceVersion") {
            None | Some("" | "0") => None,
            Some(v) => Some(v.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("resourceVersion: invalid value {v:?}"))
            })?),
        };
        let timeout = call
            .query
            .number("timeoutSeconds")?
            .map_or(MAX_WATCH, |s| Duration::from_secs(s.clamp(1, 3600) as u64));
        let nodes =
            (resource.strategy.storage() == Storage::Node).then(|| self.objects(resource, None).1);
        let (backlog, mut rx) = self.store.watch(resource.name, from)?;
        let (tx, body) = Body::channel();
        let namespace = namespace.map(str::to_owned);
        let table = call.table;
        let wanted = move |resource_name: &str, object: &Value| {
            resource_name == resource.name
                && namespace.as_deref().is_none_or(|ns| {
                    object
                        .pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        == Some(ns)
                })
                && labels.matches(object)
                && fields.matches(object)
        };
        let mut first = true;
        let mut line = move |kind: ChangeKind, object: &Value, rv: u64| -> Bytes {
            let object = if table {
                let t = table::table(resource, &[object], rv, first);
                first = false;
                t
            } else {
                object.clone()
            };
            let mut bytes = serde_json::to_vec(&json!({"type": kind.as_str(), "object": object}))
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
            loop {
                let change = match pending.next() {
                    Some(change) => change,
                    None => tokio::select! {
                        c = rx.recv() => match c {
                            Ok(change) => change,
                            // A watcher that fell behind is ended; the client lists again.
                            Err(_) => return,
                        },
                        _ = &mut deadline => return,
                        _ = tx.closed() => return,
                    },
                };
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

    pub(super) async fn create(
        &self,
        resource: &'static Resource,
        namespace: Option<&str>,
        mut body: Value,
        call: &Call,
    ) -> Result<Response<Body>, ApiError> {
        let (ns, name) = self.new_object(resource, namespace, &mut body)?;
        let dry_run = call.query.get("dryRun").is_some();
        let created = match resource.strategy.storage() {
            Storage::Pods => self.create_pod(&ns, &name, body, dry_run).await?,
            Storage::Stored { .. } => {
                resource.strategy.prepare(&self.store, &name, &mut body)?;
                if dry_run {
                    Arc::new(body)
                } else {
                    let created = self.store.create(resource.name, &ns, &name, body)?;
                    resource.strategy.created(&self.store, &name)?;
                    resource.strategy.changed(&self.kubelet)?;
                    created
                }
            }
            Storage::ReadOnly | Storage::Node => {
                return Err(ApiError::method_not_allowed(format!(
                    "{} cannot be created through this API",
                    resource.name
                )));
            }
        };
        Ok(json(StatusCode::CREATED, &created))
    }

    /// `PUT`: the whole object, with a `resourceVersion` precondition when it carries one.
    pub(super) async fn replace(
        &self,
        resource: &'static Resource,
        namespace: Option<&str>,
        name: &str,
        body: Value,
    ) -> Result<Response<Body>, ApiError> {
        let updated = self
            .update(resource, namespace.unwrap_or(""), name, |_| Ok(body))
            .await?;
        Ok(json(StatusCode::OK, &updated))
    }

    /// `PATCH` with a JSON patch, a merge patch, a strategic merge patch or a server-side apply
    /// (which creates the object when there is none).
    pub(super) async fn patch(
        &self,
        resource: &'static Resource,
        namespace: Option<&str>,
        name: &str,
        body: &[u8],
        call: &Call,
    ) -> Result<Response<Body>, ApiError> {
        let ns = namespace.unwrap_or("");
        let kind = call.content_type.as_str();
        if kind == "application/apply-patch+yaml"
            && resource.strategy.storage() != Storage::Node
            && self.store.get(resource.name, ns, name).is_none()
        {
            if let Some(ns) = namespace {
                self.namespace_exists(ns)?;
            }
            let mut object = super::parse_json(body)?;
            match object.get_mut("metadata") {
                None | Some(Value::Null) => object["metadata"] = json!({"name": name}),
                Some(Value::Object(meta)) => {
                    meta.entry("name").or_insert_with(|| json!(name));
                }
                Some(_) => return Err(ApiError::bad_request("metadata: must be an object")),
            }
            return self.create(resource, namespace, object, call).await;
        }
        let updated = self.update(resource, ns, name, |current| {
            let mut next = current.clone();
            match kind {
                "application/json-patch+json" => {
                    crate::bounds::json_patch(&mut next, body).map_err(|message| {
                        ApiError::invalid(resource.kind, name, vec![Cause {
                            reason: "FieldValueInvalid".into(),
                            field: String::new(),
                            message,
                        }])
                    })?;
                }
                "application/merge-patch+json" => {
                    json_patch::merge(&mut next, &super::parse_json(body)?);
                }
                "application/strategic-merge-patch+json" | "application/apply-patch+yaml" => {
                    patch::strategic(&mut next, &super::parse_json(body)?);
                }
                other => {
                    return Err(ApiError::unsupported_media(format!(
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (not {other:?})"
                    )));
                }
            }
            Ok(next)
        })
        .await?;
        Ok(json(StatusCode::OK, &updated))
    }

    /// Replaces an object with what `make` returns from the current one, keeping what the
    /// client may not change (uid, creation time, status of pods) and checking the new one.
    async fn update(
        &self,
        resource: &'static Resource,
        ns: &str,
        name: &str,
        make: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Arc<Value>, ApiError> {
        if matches!(
            resource.strategy.storage(),
            Storage::Node | Storage::ReadOnly
        ) {
            return Err(ApiError::method_not_allowed(format!(
                "{} cannot be changed through this API",
                resource.name
            )));
        }
        let current = self
            .store
            .get(resource.name, ns, name)
            .ok_or_else(|| ApiError::not_found(resource.name, name))?;
        let rv = |v: &Value| {
            v.pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let modified = || {
            ApiError::conflict(
                resource.name,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        };
        let mut next = make(&current)?;
        if !next.is_object() {
            return Err(ApiError::bad_request("the object is not a JSON object"));
        }
        let explicit = rv(&next).is_some();
        if rv(&next).is_some_and(|given| Some(given) != rv(&current)) {
            return Err(modified());
        }
        if next
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .is_some_and(|n| n != name)
        {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        if !next.get("metadata").is_some_and(Value::is_object) {
            next["metadata"] = json!({});
        }
        for kept in [
            "uid",
            "creationTimestamp",
            "namespace",
            "name",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            match current["metadata"].get(kept) {
                Some(v) => next["metadata"][kept] = v.clone(),
                None => {
                    if let Some(m) = next["metadata"].as_object_mut() {
                        m.remove(kept);
                    }
                }
            }
        }
        next["kind"] = json!(resource.kind);
        next["apiVersion"] = json!(resource.api_version());
        // New images are loaded before the update is taken; a bad one is refused with its field.
        let images = if resource.strategy.storage() == Storage::Pods {
            super::pods::check_update(&current, &mut next)?;
            self.load_changed_images(&current, &next).await?
        } else {
            resource.strategy.prepare(&self.store, name, &mut next)?;
            None
        };
        let before = rv(&current);
        let updated = self
            .store
            .update(resource.name, ns, name, Durable::Now, |stored| {
                if rv(stored) != before {
                    // Changed since it was read (the new images loaded meanwhile). The kubelet's
                    // status may change at any time: that is taken as it is now; any other change
                    // is a conflict, and so is any change when the client named a resourceVersion.
                    let without_status = |v: &Value| {
                        let mut v = v.clone();
                        if let Some(o) = v.as_object_mut() {
                            o.remove("status");
                        }
                        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                            m.remove("resourceVersion");
                        }
                        v
                    };
                    if explicit || without_status(stored) != without_status(&current) {
                        return Err(modified());
                    }
                    if let Some(status) = stored.get("status") {
                        next["status"] = status.clone();
                    }
                }
                *stored = next;
                Ok(())
            })?;
        resource.strategy.changed(&self.kubelet)?;
        self.set_images(&updated, images).await;
        Ok(updated)
    }

    pub(super) async fn delete(
        &self,
        resource: &'static Resource,
        namespace: Option<&str>,
        name: &str,
        body: Option<Value>,
        call: &Call,
    ) -> Result<Response<Body>, ApiError> {
        let ns = namespace.unwrap_or("");
        let grace =
            match body.as_ref().and_then(|b| b.get("gracePeriodSeconds")) {
                Some(v) => Some(v.as_i64().ok_or_else(|| {
                    ApiError::bad_request("gracePeriodSeconds: must be an integer")
                })?),
                None => call.query.number("gracePeriodSeconds")?,
            };
        match resource.strategy.storage() {
            Storage::Pods => {
                let pod = self.delete_pod(ns, name, grace, true)?;
                Ok(json(StatusCode::OK, &pod))
            }
            Storage::Stored { deletable: true } => {
                let gone = self
                    .store
                    .delete_if(resource.name, ns, name, Durable::Now, |_| true)?
                    .ok_or_else(|| ApiError::not_found(resource.name, name))?;
                resource.strategy.changed(&self.kubelet)?;
                Ok(json(
                    StatusCode::OK,
                    &json!({
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": {
                            "name": name,
                            "kind": resource.name,
                            "uid": gone.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
                        },
                    }),
                ))
            }
            Storage::Stored { deletable: false } | Storage::ReadOnly | Storage::Node => {
                Err(ApiError::method_not_allowed(format!(
                    "{} cannot be deleted through this API",
                    resource.name
                )))
            }
        }
    }
}
