//! Get, list, watch, create, update, patch and delete of any resource, with what the API server
//! checks for all of them (names, namespaces, resourceVersion preconditions); pods add what is
//! particular to them through their strategy's `Storage::Run` hooks (`resources/pods/`).

use http::{Response, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;

use super::resources::{Resource, Storage};
use super::select::{Fields, Labels};
use super::{Api, Call, json, patch, table};
use crate::body::Body;
use crate::object::{Object, TypeMeta};
use wasmpod::FieldErrorKind;

use crate::status::{ApiError, Cause};
use crate::store::Durable;

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
    /// A new object from a request's body, with the metadata the API server sets (`uid`,
    /// `creationTimestamp`, `namespace`; `generateName` made into a name).
    pub(super) fn new_object(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        body: Value,
    ) -> Result<Object, ApiError> {
        let mut object = Object::from_value(body)?;
        let types = &object.types;
        if (!types.kind.is_empty() && types.kind != resource.kind)
            || (!types.api_version.is_empty() && types.api_version != resource.api_version())
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version ({})",
                types.api_version,
                resource.api_version()
            )));
        }
        object.types = TypeMeta {
            api_version: resource.api_version().into(),
            kind: resource.kind.into(),
        };
        let meta = &mut object.metadata;
        let ns = match (namespace, meta.namespace.as_deref()) {
            (Some(path), Some(given)) if !given.is_empty() && given != path => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            (Some(path), _) => path.to_owned(),
            (None, _) => String::new(),
        };
        let name = match (meta.name.as_deref(), meta.generate_name.as_deref()) {
            (Some(n), _) if !n.is_empty() => n.to_owned(),
            (_, Some(prefix)) if !prefix.is_empty() => format!("{prefix}{}", random_suffix()),
            _ => {
                return Err(ApiError::invalid(
                    resource.kind,
                    "",
                    vec![Cause {
                        kind: FieldErrorKind::Required,
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
        meta.namespace = resource.namespaced.then_some(ns);
        meta.name = Some(name);
        meta.uid = Some(uuid::Uuid::new_v4().to_string());
        meta.creation_timestamp = Some(crate::clock::time());
        // Set by the server only.
        meta.resource_version = None;
        meta.deletion_timestamp = None;
        meta.deletion_grace_period_seconds = None;
        meta.managed_fields = None;
        meta.self_link = None;
        meta.generation = None;
        Ok(object)
    }

    pub(super) fn get(
        &self,
        resource: &'static Resource,
        namespace: Option<&str>,
        name: &str,
        call: &Call,
    ) -> Result<Response<Body>, ApiError> {
        let object = if matches!(resource.strategy.storage(), Storage::Node) {
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
                &table::table(resource, &[&*object], rv, true),
            )
        } else {
            json(StatusCode::OK, &*object)
        })
    }

    pub(super) fn objects(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
    ) -> (u64, Vec<Arc<Object>>) {
        if matches!(resource.strategy.storage(), Storage::Node) {
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
        let items: Vec<&Object> = items
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
        // Written as they are stored: each item's JSON text goes out without being parsed.
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct List<'a> {
            kind: String,
            api_version: &'static str,
            metadata: Value,
            items: Vec<&'a Object>,
        }
        Ok(json(
            StatusCode::OK,
            &List {
                kind: format!("{}List", resource.kind),
                api_version: resource.api_version(),
                metadata: json!({"resourceVersion": rv.to_string()}),
                items,
            },
        ))
    }

    pub(super) async fn create(
        &self,
        resource: &'static Resource,
        namespace: Option<&str>,
        body: Value,
        call: &Call,
    ) -> Result<Response<Body>, ApiError> {
        let dry_run = call.query.get("dryRun").is_some();
        let created = self
            .create_object(resource, namespace, body, dry_run)
            .await?;
        Ok(json(StatusCode::CREATED, &*created))
    }

    /// Creates an object from a request's body (checks it only, with `dry_run`).
    pub(super) async fn create_object(
        &self,
        resource: &'static Resource,
        namespace: Option<&str>,
        body: Value,
        dry_run: bool,
    ) -> Result<Arc<Object>, ApiError> {
        let mut object = self.new_object(resource, namespace, body)?;
        let (ns, name) = (object.namespace().to_owned(), object.name().to_owned());
        let created = match resource.strategy.storage() {
            Storage::Run(run) => run.create(self, object, dry_run, &[]).await?,
            Storage::Stored { .. } => {
                let mut fields = object.fields();
                resource.strategy.prepare(&self.store, &name, &mut fields)?;
                object.set_fields(fields);
                if dry_run {
                    Arc::new(object)
                } else {
                    let created = self.store.create(resource.name, &ns, &name, object)?;
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
        Ok(created)
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
        Ok(json(StatusCode::OK, &*updated))
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
            && !matches!(resource.strategy.storage(), Storage::Node)
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
        let apply = |current: &Value| patched(resource, name, kind, body, current);
        let updated = if matches!(resource.strategy.storage(), Storage::Node) {
            Arc::new(self.patch_node(name, apply)?)
        } else {
            self.update(resource, ns, name, apply).await?
        };
        Ok(json(StatusCode::OK, &*updated))
    }

    /// Replaces an object with what `make` returns from the current one, keeping what the
    /// client may not change (uid, creation time, status of pods) and checking the new one.
    pub(super) async fn update(
        &self,
        resource: &'static Resource,
        ns: &str,
        name: &str,
        make: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Arc<Object>, ApiError> {
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
        let modified = || {
            ApiError::conflict(
                resource.name,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        };
        let mut next = Object::from_value(make(&current.to_value())?)?;
        let explicit = next.resource_version().is_some();
        if explicit && next.resource_version() != current.resource_version() {
            return Err(modified());
        }
        if next.metadata.name.as_deref().is_some_and(|n| n != name) {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        // What the client may not change.
        let (meta, kept) = (&mut next.metadata, &current.metadata);
        meta.uid.clone_from(&kept.uid);
        meta.creation_timestamp.clone_from(&kept.creation_timestamp);
        meta.namespace.clone_from(&kept.namespace);
        meta.name.clone_from(&kept.name);
        meta.deletion_timestamp.clone_from(&kept.deletion_timestamp);
        meta.deletion_grace_period_seconds = kept.deletion_grace_period_seconds;
        next.types = TypeMeta {
            api_version: resource.api_version().into(),
            kind: resource.kind.into(),
        };
        // New images are loaded before the update is taken; a bad one is refused with its field.
        let changes = match resource.strategy.storage() {
            Storage::Run(run) => run.update(self, &current, &mut next).await?,
            _ => {
                let mut fields = next.fields();
                resource.strategy.prepare(&self.store, name, &mut fields)?;
                next.set_fields(fields);
                None
            }
        };
        let before = current.resource_version().map(str::to_owned);
        let updated = self
            .store
            .update(resource.name, ns, name, Durable::Now, |stored| {
                if stored.resource_version() != before.as_deref() {
                    // Changed since it was read (the new images loaded meanwhile). The kubelet's
                    // status may change at any time: that is taken as it is now; any other change
                    // is a conflict, and so is any change when the client named a resourceVersion.
                    let without_status = |o: &Object| {
                        let mut o = o.clone();
                        o.set_field("status", None);
                        o.metadata.resource_version = None;
                        o
                    };
                    if explicit || without_status(stored) != without_status(&current) {
                        return Err(modified());
                    }
                    next.set_field("status", stored.field("status"));
                }
                *stored = next;
                Ok(())
            })?;
        resource.strategy.changed(&self.kubelet)?;
        if let Storage::Run(run) = resource.strategy.storage() {
            run.updated(self, &updated, changes).await;
        }
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
            Storage::Run(run) => {
                let object = run.delete(self, ns, name, grace, true)?;
                Ok(json(StatusCode::OK, &*object))
            }
            Storage::Stored { deletable: true } => {
                let gone = self.delete_stored(resource, ns, name, Durable::Now)?;
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
                            "uid": gone.metadata.uid,
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

    /// Deletes a stored object at once, with what its strategy does on deletion.
    pub(super) fn delete_stored(
        &self,
        resource: &'static Resource,
        ns: &str,
        name: &str,
        durable: Durable,
    ) -> Result<Arc<Object>, ApiError> {
        let gone = self
            .store
            .delete_if(resource.name, ns, name, durable, |_| true)?
            .ok_or_else(|| ApiError::not_found(resource.name, name))?;
        resource.strategy.deleted(&self.store, ns, name)?;
        resource.strategy.changed(&self.kubelet)?;
        Ok(gone)
    }
}

/// `current` with a patch of media type `kind` applied.
fn patched(
    resource: &Resource,
    name: &str,
    kind: &str,
    body: &[u8],
    current: &Value,
) -> Result<Value, ApiError> {
    let mut next = current.clone();
    match kind {
        "application/json-patch+json" => {
            crate::bounds::json_patch(&mut next, body).map_err(|message| {
                ApiError::invalid(
                    resource.kind,
                    name,
                    vec![Cause {
                        kind: FieldErrorKind::Invalid,
                        field: String::new(),
                        message,
                    }],
                )
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
}
