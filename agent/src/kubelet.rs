//! The kubelet: runs the store's pods on the node, writes their status and events back into the
//! store, deletes their objects once every container has stopped, and after a restart of the
//! agent brings each pod back as the kubelet does after a node restart.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use wasmpod::k8s_openapi::api::core::v1::{Pod, PodStatus};
use wasmpod::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use wasmpod::{Node, PodHandle, PodOptions, PodSpec};

use crate::object::Object;
use wasmpod::FieldErrorKind;

use crate::status::{ApiError, Cause};
use crate::store::{Durable, Store};
use crate::tokens::{Claims, Tokens};

/// How long a pod whose termination starts again after a restart may take to start its
/// containers before they are told to stop.
const STARTING: Duration = Duration::from_secs(30);
/// Events kept per pod (the oldest go first), as the API server keeps events for a while.
const EVENTS_PER_POD: u64 = 256;

/// How a pod comes to run on the node.
enum Start {
    /// Admitted through the API now, with the spec its admission validated.
    Admitted(Box<PodSpec>),
    /// Run again after the agent restarted, from the status it had.
    Resumed(Box<PodStatus>),
}

/// The ConfigMap of the cluster's CA certificate, in every namespace.
const ROOT_CA: &str = "kube-root-ca.crt";

pub(crate) struct Kubelet {
    /// The agent's CA certificate (PEM).
    root_ca: String,
    /// What signs the pods' service-account tokens.
    tokens: Arc<Tokens>,
    node: Node,
    node_name: String,
    store: Arc<Store>,
    node_uid: String,
    started: String,
    address: String,
    /// Where relative image paths are resolved.
    images: PathBuf,
    /// The node's pods by uid.
    pods: Mutex<HashMap<String, PodHandle>>,
    /// Each pod's stored events, by pod uid.
    events: Mutex<HashMap<String, Recorded>>,
    /// How many pods brought back by [`Kubelet::restore`] do not run again yet.
    restoring: tokio::sync::watch::Sender<usize>,
}

impl std::fmt::Debug for Kubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelet").finish_non_exhaustive()
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Kubelet {
    pub(crate) fn new(
        node: Node,
        node_name: String,
        store: Arc<Store>,
        images: PathBuf,
        address: String,
        root_ca: String,
        tokens: Arc<Tokens>,
    ) -> Kubelet {
        Kubelet {
            root_ca,
            tokens,
            node,
            node_name,
            store,
            node_uid: uuid::Uuid::new_v4().to_string(),
            started: crate::clock::now(),
            address,
            images,
            pods: Mutex::default(),
            events: Mutex::default(),
            restoring: tokio::sync::watch::Sender::new(0),
        }
    }

    /// How many pods brought back after a restart do not run again yet
    /// ([`crate::ready::started_again`]).
    pub(crate) fn restoring(&self) -> tokio::sync::watch::Receiver<usize> {
        self.restoring.subscribe()
    }

    /// The pods the node runs.
    pub(crate) fn pod_count(&self) -> usize {
        lock(&self.pods).len()
    }

    fn restored_one(&self) {
        self.restoring.send_modify(|n| *n = n.saturating_sub(1));
    }

    pub(crate) fn node(&self) -> &Node {
        &self.node
    }

    pub(crate) fn node_name(&self) -> &str {
        &self.node_name
    }

    pub(crate) fn node_uid(&self) -> &str {
        &self.node_uid
    }

    pub(crate) fn started(&self) -> &str {
        &self.started
    }

    pub(crate) fn address(&self) -> &str {
        &self.address
    }

    /// Validates a pod against wasmpod's rules, with the ConfigMaps and Secrets of its namespace
    /// (and, unless one is stored, the `kube-root-ca.crt` ConfigMap every namespace has: the
    /// agent's CA certificate, as the root CA publisher gives a cluster's).
    pub(crate) fn validate(&self, pod: &Value) -> Result<PodSpec, wasmpod::InvalidPod> {
        let ns = str_at(pod, "/metadata/namespace");
        let mut config: Vec<Value> = Vec::new();
        if self.store.get("configmaps", ns, ROOT_CA).is_none() {
            config.push(serde_json::json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": ROOT_CA, "namespace": ns},
                "data": {"ca.crt": self.root_ca},
            }));
        }
        for resource in ["configmaps", "secrets"] {
            config.extend(
                self.store
                    .list(resource, Some(ns))
                    .1
                    .iter()
                    .map(|o| o.to_value()),
            );
        }
        config.extend(self.account_tokens(pod));
        PodSpec::from_value(pod, &self.images, &config)
    }

    /// The tokens the pod's `serviceAccountToken` projections show, as Secrets of type
    /// `kubernetes.io/service-account-token` for its service account, one per projection's
    /// audience and lifetime (annotated with both, as `wasmpod::TOKEN_AUDIENCE` and
    /// `TOKEN_EXPIRATION` say): issued by the agent, bound to the pod (they die with it), each
    /// for exactly its projection's audience (the API's when none) and `expirationSeconds`
    /// (an hour when not said), as the kubelet asks one TokenRequest per projection. Only the
    /// `kube-api-access` default (the API's audience, 3607 s) is extended to a year, as the API
    /// server extends it; the others are rewritten before they expire ([`Self::refresh_tokens`]).
    /// None for a pod without such a projection.
    fn account_tokens(&self, pod: &Value) -> Vec<Value> {
        let ns = str_at(pod, "/metadata/namespace");
        let account = account_of(pod.get("spec"));
        let mut seen = Vec::new();
        let mut secrets = Vec::new();
        for p in token_projections(pod) {
            let key = (p.audience.clone(), p.expiration);
            if seen.contains(&key) || seen.len() >= 16 {
                continue;
            }
            let token = self.issue_token(pod, &p, jiff::Timestamp::now().as_second());
            let mut annotations = serde_json::Map::new();
            annotations.insert("kubernetes.io/service-account.name".into(), json!(account));
            annotations.insert(wasmpod::TOKEN_AUDIENCE.into(), json!(p.audience));
            annotations.insert(
                wasmpod::TOKEN_EXPIRATION.into(),
                json!(p.expiration.to_string()),
            );
            secrets.push(json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": format!("{account}-token-wasmpod-{}", seen.len()),
                    "namespace": ns,
                    "annotations": annotations,
                },
                "type": "kubernetes.io/service-account-token",
                "stringData": {"token": token},
            }));
            seen.push(key);
        }
        secrets
    }

    /// A token for projection `p` of `pod`, issued at `now`. A pod whose service account is gone
    /// (deleted while it ran; admission refuses a pod without one) still gets a token, with no
    /// account uid: the API refuses it, and the pod is not kept from resuming for want of it.
    fn issue_token(&self, pod: &Value, p: &Projection, now: i64) -> String {
        let ns = str_at(pod, "/metadata/namespace");
        let account = account_of(pod.get("spec"));
        let account_uid = self
            .store
            .get("serviceaccounts", ns, account)
            .map(|a| a.uid().to_owned())
            .unwrap_or_default();
        let audience = if p.audience.is_empty() {
            crate::tokens::API_AUDIENCE
        } else {
            &p.audience
        };
        let uid = str_at(pod, "/metadata/uid");
        self.tokens.issue(&Claims {
            namespace: ns.to_owned(),
            account: account.to_owned(),
            account_uid,
            audiences: vec![audience.to_owned()],
            issued: now,
            expires: now.saturating_add(p.lifetime()),
            pod: (!uid.is_empty())
                .then(|| (str_at(pod, "/metadata/name").to_owned(), uid.to_owned())),
        })
    }

    /// Rewrites the pod's projected tokens that are not extended when 80 % of their lifetime
    /// has passed (at most a day), as the kubelet's token manager does, until the pod is gone.
    async fn refresh_tokens(self: Arc<Self>, handle: PodHandle, pod: Value) {
        let due: Vec<Projection> = token_projections(&pod)
            .into_iter()
            .filter(|p| !p.extended())
            .collect();
        let Some(every) = due.iter().map(Projection::refresh_after).min() else {
            return;
        };
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = handle.deleted() => return,
            }
            let now = jiff::Timestamp::now().as_second();
            for p in &due {
                let token = self.issue_token(&pod, p, now);
                if let Err(e) = handle.rewrite_file(&p.volume, &p.path, token.as_bytes()) {
                    tracing::warn!(pod = %handle.name(), "cannot rewrite a projected token: {e}");
                }
            }
        }
    }

    /// Whether the node runs the pod of this uid.
    pub(crate) fn runs(&self, uid: &str) -> bool {
        lock(&self.pods).contains_key(uid)
    }

    pub(crate) fn handle(&self, uid: &str) -> Option<PodHandle> {
        lock(&self.pods).get(uid).cloned()
    }

    /// Deletes the pod of this uid from the node within `grace` seconds.
    pub(crate) fn delete(&self, uid: &str, grace: i64) {
        if let Some(pod) = self.handle(uid) {
            pod.delete(Some(Duration::from_secs(grace.max(0) as u64)));
        }
    }

    /// Gives the node the stored PriorityClasses.
    pub(crate) fn sync_priority_classes(&self) -> Result<(), ApiError> {
        let classes: Vec<_> = self
            .store
            .list("priorityclasses", None)
            .1
            .iter()
            .filter_map(|o| serde_json::from_value(o.to_value()).ok())
            .collect();
        self.node.set_priority_classes(&classes).map_err(|e| {
            ApiError::invalid(
                "PriorityClass",
                "",
                vec![Cause {
                    kind: FieldErrorKind::Invalid,
                    field: String::new(),
                    message: e.to_string(),
                }],
            )
        })
    }

    /// Gives the node the stored RuntimeClasses.
    pub(crate) fn sync_runtime_classes(&self) {
        let classes: Vec<_> = self
            .store
            .list("runtimeclasses", None)
            .1
            .iter()
            .filter_map(|o| serde_json::from_value(o.to_value()).ok())
            .collect();
        self.node.set_runtime_classes(&classes);
    }

    /// Runs a pod the API admitted: `spec` is what its admission validated.
    pub(crate) fn run(self: &Arc<Self>, pod: Arc<Object>, spec: PodSpec) {
        let kubelet = self.clone();
        tokio::spawn(async move {
            kubelet
                .supervise(pod, Start::Admitted(Box::new(spec)))
                .await
        });
    }

    /// Runs again a stored pod the node ran before the agent stopped, from its last `status`.
    fn resume(self: &Arc<Self>, pod: Arc<Object>, status: PodStatus) {
        let kubelet = self.clone();
        tokio::spawn(async move {
            kubelet
                .supervise(pod, Start::Resumed(Box::new(status)))
                .await
        });
    }

    async fn supervise(self: Arc<Self>, pod: Arc<Object>, start: Start) {
        let resumed = matches!(start, Start::Resumed(_));
        let (ns, name, uid) = (
            pod.namespace().to_owned(),
            pod.name().to_owned(),
            pod.uid().to_owned(),
        );
        // Boxed: making the pod is a large future, and the task lives as long as the pod.
        let created = Box::pin(self.create(&pod, start)).await;
        // Kept only for a pod with tokens to rewrite.
        let tokens_of =
            Some(pod.to_value()).filter(|v| token_projections(v).iter().any(|p| !p.extended()));
        // The object as it was created: the store has it as it is now, with its status.
        drop(pod);
        let handle = match created {
            Ok(h) => h,
            Err(message) => {
                if resumed {
                    self.restored_one();
                }
                tracing::warn!(pod = %name, "cannot run the pod: {message}");
                self.set_status(&ns, &name, &uid, |s| {
                    end_lost(
                        s,
                        "CreatePodError",
                        &format!("The pod cannot run: {message}"),
                    );
                });
                return;
            }
        };
        lock(&self.pods).insert(uid.clone(), handle.clone());
        // A deletion asked while the pod was being made: graceful, or forced (the object is
        // already gone, or is another pod's of the same name).
        match self.store.get("pods", &ns, &name) {
            Some(p) if p.uid() == uid => {
                if let Some(grace) = p.metadata.deletion_grace_period_seconds {
                    let grace = Duration::from_secs(grace.max(0) as u64);
                    if resumed {
                        // A termination the agent's restart cut short starts again from the
                        // beginning: the containers run again, then get TERM and the whole
                        // grace period (document 003: a process always gets at least the grace
                        // period to terminate cleanly).
                        let pod = handle.clone();
                        tokio::spawn(async move {
                            let running = pod.wait_until(|s| {
                                matches!(s.phase.as_deref(), Some("Succeeded" | "Failed"))
                                    || s.container_statuses.iter().flatten().all(|c| {
                                        c.state.as_ref().is_some_and(|s| s.running.is_some())
                                    })
                            });
                            let _ = tokio::time::timeout(STARTING, running).await;
                            pod.delete(Some(grace));
                        });
                    } else {
                        handle.delete(Some(grace));
                    }
                }
            }
            _ => handle.delete(Some(Duration::ZERO)),
        }
        let events = tokio::spawn(self.clone().record_events(
            handle.clone(),
            ns.clone(),
            name.clone(),
            uid.clone(),
            resumed,
        ));
        let refresh =
            tokens_of.map(|v| tokio::spawn(self.clone().refresh_tokens(handle.clone(), v)));
        // What was written last, as a digest: the store has the status itself, and the pod
        // its own copy (one more per pod would be a few KiB of the node's memory each).
        let mut last = digest(&PodStatus::default());
        // A pod brought back counts as restored once the API shows it running again.
        let mut restoring = resumed;
        loop {
            let status = tokio::select! {
                s = handle.wait_until(|s| digest(s) != last) => s,
                () = handle.deleted() => break,
            };
            let now = digest(&status);
            if now != last {
                let value = serde_json::to_value(&status).unwrap_or_default();
                self.set_status(&ns, &name, &uid, |s| *s = value);
                last = now;
            }
            if restoring && crate::ready::started_again(&status) {
                restoring = false;
                self.restored_one();
            }
        }
        if restoring {
            self.restored_one();
        }
        if let Some(refresh) = refresh {
            refresh.abort();
        }
        let _ = events.await;
        lock(&self.pods).remove(&uid);
        let _ = self
            .store
            .delete_if("pods", &ns, &name, Durable::Now, |p| p.uid() == uid);
        self.forget(&ns, &name, &uid);
    }

    /// Forgets a pod whose object is gone: its events, and its files (logs, volumes).
    pub(crate) fn forget(&self, ns: &str, name: &str, uid: &str) {
        self.forget_events(ns, name, uid);
        if let Err(e) = self.node.remove_pod_files(ns, name, uid) {
            tracing::warn!(pod = name, "cannot remove the pod's files: {e}");
        }
    }

    /// Makes the pod on the node. A pod resumed right after the agent was killed may find its
    /// uid still held by the dying process for a moment: that is retried for a few seconds.
    async fn create(&self, pod: &Object, start: Start) -> Result<PodHandle, String> {
        let status = match start {
            Start::Admitted(spec) => {
                let created = self.node.create_pod(*spec, PodOptions::default()).await;
                return created.map_err(|e| e.to_string());
            }
            Start::Resumed(status) => status,
        };
        let mut tries = 0;
        loop {
            let spec = self.validate(&pod.to_value()).map_err(|e| e.to_string())?;
            let options = PodOptions::default().resume(&status);
            match self.node.create_pod(spec, options).await {
                Err(wasmpod::Error::UidInUse(_)) if tries < 50 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => return other.map_err(|e| e.to_string()),
            }
        }
    }

    fn set_status(&self, ns: &str, name: &str, uid: &str, change: impl FnOnce(&mut Value)) {
        let result = self.store.update("pods", ns, name, Durable::Later, |p| {
            if p.uid() == uid {
                // The object's fields read and written once.
                let mut fields = p.fields();
                let status = fields.entry("status").or_insert_with(|| json!({}));
                if !status.is_object() {
                    *status = json!({});
                }
                change(status);
                p.set_fields(fields);
            }
            Ok(())
        });
        if let Err(e) = result
            && e.code != http::StatusCode::NOT_FOUND
        {
            tracing::warn!(pod = %name, "cannot write the pod's status: {}", e.message);
        }
    }

    /// Stores the pod's events as `v1 Event`s, the last [`EVENTS_PER_POD`] of them.
    /// Their names are the pod's name and a number counted from the time the agent began
    /// recording them (as the kubelet names events after the time), so the events of a pod
    /// run again after the agent's restart do not take the names of those from before.
    async fn record_events(
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
    fn forget_events(&self, ns: &str, name: &str, uid: &str) {
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

    /// Brings the stored pods back after the agent started again, as the kubelet does after a
    /// node restart: finished pods stay as they ended; a `Never` pod that had started ends
    /// Failed (its containers were lost); every other pod runs again, its containers' restart
    /// counts going on (the lost instances count as exited, `ContainerStatusUnknown`); a pod
    /// that was being deleted starts its termination again with its full grace period.
    pub(crate) fn restore(self: &Arc<Self>) {
        let (_, pods) = self.store.list("pods", None);
        for pod in pods {
            let (ns, name, uid) = (
                pod.namespace().to_owned(),
                pod.name().to_owned(),
                pod.uid().to_owned(),
            );
            let Pod { spec, status, .. } = pod.pod();
            let status = status.unwrap_or_default();
            if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
                continue;
            }
            let started = status
                .init_container_statuses
                .iter()
                .chain(&status.container_statuses)
                .flatten()
                .any(|c| {
                    c.state
                        .as_ref()
                        .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
                        || c.last_state
                            .as_ref()
                            .is_some_and(|s| s.terminated.is_some())
                });
            let deleting = pod.metadata.deletion_grace_period_seconds;
            let never = spec.and_then(|s| s.restart_policy).as_deref() == Some("Never");
            if never && started {
                if deleting.is_some() {
                    // Nothing is left to stop: the object goes.
                    let _ = self
                        .store
                        .delete_if("pods", &ns, &name, Durable::Now, |_| true);
                    self.forget(&ns, &name, &uid);
                } else {
                    self.set_status(&ns, &name, &uid, |s| {
                        end_lost(
                            s,
                            "NodeAgentRestarted",
                            "The node agent restarted while the pod ran; its containers were lost and restartPolicy is Never",
                        )
                    });
                }
                continue;
            }
            if let Some(grace) = deleting {
                // The termination starts again, with the whole grace period.
                let at = crate::clock::time()
                    .0
                    .checked_add(jiff::SignedDuration::from_secs(grace))
                    .unwrap_or(jiff::Timestamp::MAX);
                let _ = self.store.update("pods", &ns, &name, Durable::Now, |p| {
                    p.metadata.deletion_timestamp = Some(Time(at));
                    Ok(())
                });
            }
            let pod = self.store.get("pods", &ns, &name).unwrap_or(pod);
            self.restoring.send_modify(|n| *n += 1);
            self.resume(pod, status);
        }
    }
}

/// A pod's status when it ended without its containers' ends being seen (lost with the agent's
/// process, or the pod could not be made again): Failed, with `reason` and `message`, and every
/// container that ran terminated as `ContainerStatusUnknown`.
fn end_lost(status: &mut Value, reason: &str, message: &str) {
    status["phase"] = json!("Failed");
    status["reason"] = json!(reason);
    status["message"] = json!(message);
    for list in ["initContainerStatuses", "containerStatuses"] {
        for c in status
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let running = c.pointer("/state/running").cloned();
            if let Some(running) = running {
                c["state"] = json!({"terminated": {
                    "exitCode": 137,
                    "reason": "ContainerStatusUnknown",
                    "message": "The container could not be located when the node agent restarted",
                    "startedAt": running.get("startedAt"),
                    "finishedAt": crate::clock::now(),
                }});
                c["ready"] = json!(false);
            }
        }
    }
    if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in conditions {
            if matches!(c["type"].as_str(), Some("Ready" | "ContainersReady")) {
                c["status"] = json!("False");
                c["reason"] = json!("PodFailed");
            }
        }
    }
}

/// A digest of a pod's status (of its JSON, which is what is written).
fn digest(status: &PodStatus) -> [u8; 32] {
    use sha2::Digest as _;
    let json = serde_json::to_vec(status).unwrap_or_default();
    sha2::Sha256::digest(json).into()
}

/// The name of a pod's event number `n`.
fn event_name(pod: &str, n: u64) -> String {
    format!("{pod}.{n:x}")
}

/// The events of one pod the agent stored: their numbers, oldest to next.
struct Recorded {
    numbers: std::ops::Range<u64>,
    /// The pod ran before the agent's restart: it may have stored events of another range.
    resumed: bool,
}

/// The service account a pod of this `spec` runs as.
pub(crate) fn account_of(spec: Option<&Value>) -> &str {
    ["serviceAccountName", "serviceAccount"]
        .iter()
        .find_map(|k| spec?.get(*k)?.as_str().filter(|a| !a.is_empty()))
        .unwrap_or("default")
}

/// A `serviceAccountToken` source of a projected volume.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Projection {
    volume: String,
    path: String,
    /// Empty: the API's.
    audience: String,
    expiration: i64,
}

/// The `expirationSeconds` of the token every pod of a cluster has (`kube-api-access-*`),
/// which the API server extends to a year.
const KUBE_API_ACCESS: i64 = 3607;
const YEAR: i64 = 365 * 24 * 3600;

impl Projection {
    /// The API's own token of `kube-api-access`, extended as the API server extends it.
    fn extended(&self) -> bool {
        (self.audience.is_empty() || self.audience == crate::tokens::API_AUDIENCE)
            && self.expiration == KUBE_API_ACCESS
    }

    /// How long its token is valid.
    fn lifetime(&self) -> i64 {
        if self.extended() {
            YEAR
        } else {
            self.expiration
        }
    }

    /// When to rewrite it: after 80 % of its lifetime, and at least daily.
    fn refresh_after(&self) -> Duration {
        let seconds = (self.expiration.max(600) as u64) * 4 / 5;
        Duration::from_secs(seconds.min(24 * 3600))
    }
}

/// The pod's `serviceAccountToken` projections.
fn token_projections(pod: &Value) -> Vec<Projection> {
    let mut out = Vec::new();
    for volume in pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = volume.get("name").and_then(Value::as_str).unwrap_or("");
        for token in volume
            .pointer("/projected/sources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|source| source.get("serviceAccountToken"))
        {
            out.push(Projection {
                volume: name.to_owned(),
                path: token
                    .get("path")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                audience: token
                    .get("audience")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                expiration: token
                    .get("expirationSeconds")
                    .and_then(Value::as_i64)
                    .unwrap_or(3600),
            });
        }
    }
    out
}
