//! What the API server and the kubelet add for pods: admission (wasmpod's validation, the
//! node's modules loaded), the defaults the API server writes, graceful deletion (the object
//! stays, `Terminating`, until every container has stopped; a later delete may only shorten the
//! grace period; grace 0 removes it at once), and which updates a pod takes.

use std::sync::Arc;

use serde_json::{Value, json};

use super::update::{is_mirror, mirror_annotation_refused, mirror_refused};
use crate::api::Api;
use crate::api::source::Applied;
use crate::object::Object;
use wasmpod::FieldErrorKind;

use crate::status::{ApiError, Cause};
use crate::store::Durable;
use wasmpod::k8s_openapi::api::core::v1::Pod;
use wasmpod::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The longest grace period taken (the runtime bounds durations the same way).
const MAX_GRACE: i64 = 100 * 365 * 24 * 3600;

/// A pod's `InvalidPod` as the API server's 422.
pub(crate) fn invalid_pod(name: &str, e: &wasmpod::InvalidPod) -> ApiError {
    ApiError::invalid("Pod", name, e.errors.iter().map(Cause::from).collect())
}

impl Api {
    /// An object a pod's admission looks up (its service account, priority class, runtime
    /// class): one of `pending` (a set applied together, [`super::source`]), else the store's.
    fn present(&self, pending: &[Applied], resource: &str, ns: &str, name: &str) -> Option<Value> {
        pending
            .iter()
            .find(|a| a.resource.name == resource && a.namespace == ns && a.name == name)
            .map(|a| a.object.clone())
            .or_else(|| self.store.get(resource, ns, name).map(|o| o.to_value()))
    }

    pub(super) async fn create_pod(
        &self,
        object: Object,
        dry_run: bool,
        pending: &[Applied],
    ) -> Result<Arc<Object>, ApiError> {
        let name = object.name();
        // The node's own mark of a static pod's mirror: only the node sets it (as the API server
        // lets only a kubelet create mirror pods); from a client it would make the pod one that
        // the API can neither change nor delete.
        if is_mirror(&object) {
            return Err(mirror_annotation_refused(name));
        }
        // As the Pod Security Standards' baseline: a hostPath volume reads and writes the
        // host's files, so pods from the API may have one only where the node allows it.
        let spec = object.field("spec");
        let host_path = spec
            .as_ref()
            .and_then(|s| s.get("volumes"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .position(|v| v.get("hostPath").is_some());
        if let Some(i) = host_path
            && !self.allow_host_path
        {
            return Err(ApiError::forbidden(
                "pods",
                name,
                format!(
                    "pods \"{name}\" is forbidden: spec.volumes[{i}].hostPath: hostPath volumes \
                     are not allowed on this node (wasmpod serve --allow-host-path allows them)"
                ),
            ));
        }
        // The ServiceAccount admission plugin's: a pod runs as an account that exists.
        let account = crate::kubelet::account_of(spec.as_ref());
        let ns = object.namespace();
        if self
            .present(pending, "serviceaccounts", ns, account)
            .is_none()
        {
            return Err(ApiError::forbidden(
                "pods",
                name,
                format!(
                    "pods \"{name}\" is forbidden: error looking up service account \
                     {ns}/{account}: serviceaccount \"{account}\" not found"
                ),
            ));
        }
        self.admit_pod(object, dry_run, pending).await
    }

    /// Admits a pod: the API server's defaults and priority admission, wasmpod's validation,
    /// the node's modules loaded; then stores it and runs it.
    async fn admit_pod(
        &self,
        object: Object,
        dry_run: bool,
        pending: &[Applied],
    ) -> Result<Arc<Object>, ApiError> {
        let (ns, name) = (object.namespace(), object.name());
        let mut pod = object.to_value();
        if !pod.get("spec").is_some_and(Value::is_object) {
            return Err(ApiError::invalid(
                "Pod",
                name,
                vec![Cause {
                    kind: FieldErrorKind::Required,
                    field: "spec.containers".into(),
                    message: "Required value".into(),
                }],
            ));
        }
        // What the API server and the scheduler write into a new pod.
        let spec = &mut pod["spec"];
        for (field, default) in [
            ("restartPolicy", json!("Always")),
            ("terminationGracePeriodSeconds", json!(30)),
            ("dnsPolicy", json!("ClusterFirst")),
            ("schedulerName", json!("default-scheduler")),
            ("nodeName", json!(self.kubelet.node_name())),
        ] {
            if spec.get(field).is_none_or(Value::is_null) {
                spec[field] = default;
            }
        }
        if let Some(m) = pod.as_object_mut() {
            m.remove("status");
        }
        // The priority admission: the class must exist, and gives the pod its priority.
        if let Some(class) = pod
            .pointer("/spec/priorityClassName")
            .and_then(Value::as_str)
        {
            let found = self.present(pending, "priorityclasses", "", class).ok_or_else(|| {
                ApiError::forbidden(
                    "pods",
                    name,
                    format!("pods \"{name}\" is forbidden: no PriorityClass with name {class} was found"),
                )
            })?;
            if pod.pointer("/spec/priority").is_none_or(Value::is_null) {
                pod["spec"]["priority"] = found.get("value").cloned().unwrap_or(json!(0));
            }
            if pod
                .pointer("/spec/preemptionPolicy")
                .is_none_or(Value::is_null)
            {
                pod["spec"]["preemptionPolicy"] = found
                    .get("preemptionPolicy")
                    .cloned()
                    .unwrap_or(json!("PreemptLowerPriority"));
            }
        }
        self.runtime_class_admission(name, &mut pod, pending)?;
        let spec = self.validate_and_load(name, &pod, pending).await?;
        pod["status"] = json!({"phase": "Pending"});
        let pod = Object::from_value(pod)?;
        if dry_run {
            return Ok(Arc::new(pod));
        }
        let created = self.store.create("pods", ns, name, pod)?;
        self.kubelet.run(created.clone(), spec);
        Ok(created)
    }

    /// The RuntimeClass admission: the class must be one the node has (a stored RuntimeClass or
    /// a name built into the node), and a stored class's `scheduling` joins the pod's
    /// `nodeSelector` (a different value for a key is a conflict) and `tolerations`.
    fn runtime_class_admission(
        &self,
        name: &str,
        pod: &mut Value,
        pending: &[Applied],
    ) -> Result<(), ApiError> {
        let forbidden = |why: String| {
            ApiError::forbidden("pods", name, format!("pods \"{name}\" is forbidden: {why}"))
        };
        let unclassed_overhead = || {
            forbidden(
                "pod rejected: Pod Overhead set without corresponding RuntimeClass defined \
                 Overhead"
                    .into(),
            )
        };
        let own_overhead = pod.pointer("/spec/overhead").is_some_and(|v| !v.is_null());
        let Some(class) = pod
            .pointer("/spec/runtimeClassName")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return if own_overhead {
                Err(unclassed_overhead())
            } else {
                Ok(())
            };
        };
        match self.kubelet.node().check_runtime_class(Some(&class)) {
            Err(wasmpod::Error::UnknownRuntimeClass(_)) => {
                return Err(forbidden(format!(
                    "pod rejected: RuntimeClass {class:?} not found"
                )));
            }
            Err(other) => return Err(forbidden(other.to_string())),
            Ok(()) => {}
        }
        let Some(found) = self.present(pending, "runtimeclasses", "", &class) else {
            return if own_overhead {
                Err(unclassed_overhead())
            } else {
                Ok(())
            };
        };
        let spec = &mut pod["spec"];
        // The class's overhead becomes the pod's; a pod that names another is refused.
        match (
            found.pointer("/overhead/podFixed").filter(|v| !v.is_null()),
            spec.get("overhead").filter(|v| !v.is_null()),
        ) {
            (Some(fixed), None) => spec["overhead"] = fixed.clone(),
            (Some(fixed), Some(own)) if own != fixed => {
                return Err(forbidden(
                    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
                        .into(),
                ));
            }
            (None, Some(_)) => return Err(unclassed_overhead()),
            _ => {}
        }
        if let Some(selector) = found
            .pointer("/scheduling/nodeSelector")
            .and_then(Value::as_object)
        {
            if !spec.get("nodeSelector").is_some_and(Value::is_object) {
                spec["nodeSelector"] = json!({});
            }
            for (key, value) in selector {
                match spec["nodeSelector"].get(key) {
                    Some(have) if have != value => {
                        return Err(forbidden(format!(
                            "conflict: runtimeClass.scheduling.nodeSelector[{key}] = {}; \
                             pod.spec.nodeSelector[{key}] = {}",
                            value.as_str().unwrap_or_default(),
                            have.as_str().unwrap_or_default()
                        )));
                    }
                    _ => spec["nodeSelector"][key] = value.clone(),
                }
            }
        }
        if let Some(tolerations) = found
            .pointer("/scheduling/tolerations")
            .and_then(Value::as_array)
        {
            if !spec.get("tolerations").is_some_and(Value::is_array) {
                spec["tolerations"] = json!([]);
            }
            if let Some(list) = spec["tolerations"].as_array_mut() {
                for t in tolerations {
                    if !list.contains(t) {
                        list.push(t.clone());
                    }
                }
            }
        }
        Ok(())
    }

    /// Validates a pod by wasmpod's rules and loads its modules (a module that cannot be loaded
    /// is a field error, as an invalid field is).
    async fn validate_and_load(
        &self,
        name: &str,
        pod: &Value,
        pending: &[Applied],
    ) -> Result<wasmpod::PodSpec, ApiError> {
        // The ConfigMaps and Secrets of a set applied with the pod count as its namespace's.
        let ns = pod.pointer("/metadata/namespace").and_then(Value::as_str);
        let config: Vec<Value> = pending
            .iter()
            .filter(|a| matches!(a.resource.name, "configmaps" | "secrets"))
            .filter(|a| Some(a.namespace.as_str()) == ns)
            .map(|a| a.object.clone())
            .collect();
        let spec = self
            .kubelet
            .validate(pod, config)
            .map_err(|e| invalid_pod(name, &e))?;
        self.kubelet
            .node()
            .load_images(&spec)
            .await
            .map_err(|e| match e {
                wasmpod::Error::Image { field, source } => ApiError::invalid(
                    "Pod",
                    name,
                    vec![Cause {
                        kind: FieldErrorKind::Invalid,
                        field,
                        message: source.to_string(),
                    }],
                ),
                other => ApiError::internal(other.to_string()),
            })?;
        Ok(spec)
    }

    /// The containers whose image an update changes, and the updated spec (validated, its new
    /// `.wasm` files loaded, so a module that cannot be loaded refuses the update, naming its
    /// field); `None` when no image changes.
    pub(super) async fn load_changed_images(
        &self,
        current: &Object,
        next: &Object,
    ) -> Result<Option<(wasmpod::PodSpec, Vec<String>)>, ApiError> {
        let name = next.name();
        let (current, next) = (&current.to_value(), &next.to_value());
        let image_of = |pod: &Value, list: &str, container: &str| -> Option<String> {
            pod.pointer(&format!("/spec/{list}"))?
                .as_array()?
                .iter()
                .find(|c| c["name"] == container)?
                .get("image")?
                .as_str()
                .map(str::to_owned)
        };
        let mut changed = Vec::new();
        for list in ["initContainers", "containers"] {
            for c in next
                .pointer(&format!("/spec/{list}"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let container = c["name"].as_str().unwrap_or("");
                if image_of(current, list, container) != image_of(next, list, container) {
                    changed.push(container.to_owned());
                }
            }
        }
        if changed.is_empty() {
            return Ok(None);
        }
        let spec = self.validate_and_load(name, next, &[]).await?;
        Ok(Some((spec, changed)))
    }

    /// Gives the running pod its containers' new images (files, or registry images pulled when
    /// the containers start again).
    pub(super) async fn set_images(
        &self,
        pod: &Object,
        images: Option<(wasmpod::PodSpec, Vec<String>)>,
    ) {
        let Some((spec, changed)) = images else {
            return;
        };
        let Some(handle) = self.kubelet.handle(pod.uid()) else {
            return;
        };
        for container in changed {
            if let Err(e) = handle.update_image(&spec, &container).await {
                tracing::warn!(
                    pod = handle.name(),
                    container,
                    "cannot change the image: {e}"
                );
            }
        }
    }

    /// Creates a static pod from its manifest, with the UID the manifest gives.
    pub(crate) async fn create_static(
        &self,
        ns: &str,
        pod: Value,
        uid: &str,
    ) -> Result<Arc<Object>, ApiError> {
        let mut pod = self.new_object(&super::PODS, Some(ns), pod)?;
        pod.metadata.uid = Some(uid.to_owned());
        // The host's own user placed the manifest: hostPath is theirs to use.
        self.admit_pod(pod, false, &[]).await
    }

    /// Deletes a pod: gracefully within `grace` (the pod's own period when `None`), or at once
    /// for 0, a pod that has finished, or one the node does not run. Returns the pod as it is
    /// after the call. A static pod's mirror is deleted only by the node (`from_api` false).
    pub(crate) fn delete_pod(
        &self,
        ns: &str,
        name: &str,
        grace: Option<i64>,
        from_api: bool,
    ) -> Result<Arc<Object>, ApiError> {
        let pod = self
            .store
            .get("pods", ns, name)
            .ok_or_else(|| ApiError::not_found("pods", name))?;
        if is_mirror(&pod) && from_api {
            return Err(mirror_refused(name, "deleted"));
        }
        let uid = pod.uid().to_owned();
        let Pod { spec, status, .. } = pod.pod();
        let own = spec.and_then(|s| s.termination_grace_period_seconds);
        let mut grace = grace.or(own).unwrap_or(30).clamp(0, MAX_GRACE);
        let phase = status.and_then(|s| s.phase);
        if matches!(phase.as_deref(), Some("Succeeded" | "Failed")) || !self.kubelet.runs(&uid) {
            grace = 0;
        }
        if grace == 0 {
            let gone = self
                .store
                .delete_if("pods", ns, name, Durable::Now, |p| p.uid() == uid)?
                .unwrap_or(pod);
            if self.kubelet.runs(&uid) {
                // Its supervision ends with the pod, and forgets it then.
                self.kubelet.delete(&uid, 0);
            } else {
                self.kubelet.forget(ns, name, &uid);
            }
            return Ok(gone);
        }
        if pod
            .metadata
            .deletion_grace_period_seconds
            .is_some_and(|c| c <= grace)
        {
            return Ok(pod);
        }
        let at = crate::clock::time()
            .0
            .checked_add(jiff::SignedDuration::from_secs(grace))
            .unwrap_or(jiff::Timestamp::MAX);
        let updated = self.store.update("pods", ns, name, Durable::Now, |p| {
            p.metadata.deletion_timestamp = Some(Time(at));
            p.metadata.deletion_grace_period_seconds = Some(grace);
            Ok(())
        })?;
        self.kubelet.delete(&uid, grace);
        Ok(updated)
    }
}
