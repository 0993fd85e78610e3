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
use crate::tokens::Tokens;

mod events;
mod meta;
mod node;
mod restore;
mod tokens;

pub(crate) use meta::NodeMeta;
pub(crate) use node::Condition;

use events::Recorded;
use restore::end_lost;
pub(crate) use tokens::account_of;
use tokens::token_projections;

/// How long a pod whose termination starts again after a restart may take to start its
/// containers before they are told to stop.
const STARTING: Duration = Duration::from_secs(30);

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
    /// The node's own conditions and events.
    report: Mutex<node::NodeReport>,
    /// The node's annotations of its users (its labels are the node's).
    node_meta: Mutex<NodeMeta>,
    node_meta_file: PathBuf,
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
            report: Mutex::default(),
            node_meta: Mutex::default(),
            node_meta_file: PathBuf::new(),
        }
    }

    /// Keeps the node's labels and annotations under `state`, and gives the node those kept
    /// there.
    pub(crate) fn keeping_node_meta_in(mut self, state: &std::path::Path) -> Kubelet {
        self.node_meta_file = meta::file(state);
        let mut meta = NodeMeta::load(state, &self.node.labels()).unwrap_or_default();
        if !meta.labels.is_empty() {
            self.node.set_labels(meta.labels.clone());
        }
        if meta.uid.is_empty() {
            // The first start: the Node is made now.
            meta.uid.clone_from(&self.node_uid);
            meta.created.clone_from(&self.started);
            meta.labels = (*self.node.labels()).clone();
            self.node_meta = Mutex::new(meta.clone());
            if let Err(e) = self.set_node_meta(meta) {
                tracing::warn!(error = %e.message, "cannot keep the node's identity");
            }
        } else {
            self.node_uid.clone_from(&meta.uid);
            self.node_meta = Mutex::new(meta);
        }
        self
    }

    /// When the Node was made (its first start on this state dir).
    pub(crate) fn node_created(&self) -> String {
        let created = lock(&self.node_meta).created.clone();
        if created.is_empty() {
            self.started.clone()
        } else {
            created
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

    /// The root CA publisher's: every namespace has the ConfigMap `kube-root-ca.crt` holding the
    /// agent's CA certificate (made again when deleted). Returns the first failure to store one.
    pub(crate) fn publish_root_ca(&self) -> Result<(), ApiError> {
        for ns in self.store.list("namespaces", None).1 {
            let ns = ns.name();
            if self.store.get("configmaps", ns, ROOT_CA).is_some() {
                continue;
            }
            let object = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": ROOT_CA, "namespace": ns,
                    "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": crate::clock::now(),
                    "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."},
                },
                "data": {"ca.crt": self.root_ca},
            });
            match self
                .store
                .create("configmaps", ns, ROOT_CA, Object::from_value(object)?)
            {
                Ok(_) => {}
                // Made meanwhile by another request.
                Err(e) if e.code == http::StatusCode::CONFLICT => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Validates a pod against wasmpod's rules, with the ConfigMaps and Secrets of its namespace
    /// (`config` first: those to be stored with it, taking the place of stored ones of their
    /// names; `kube-root-ca.crt` among the stored, [`Kubelet::publish_root_ca`]).
    pub(crate) fn validate(
        &self,
        pod: &Value,
        mut config: Vec<Value>,
    ) -> Result<PodSpec, wasmpod::InvalidPod> {
        let ns = str_at(pod, "/metadata/namespace");
        let given: Vec<(String, String)> = config
            .iter()
            .map(|c| {
                (
                    str_at(c, "/kind").to_owned(),
                    str_at(c, "/metadata/name").to_owned(),
                )
            })
            .collect();
        for resource in ["configmaps", "secrets"] {
            let stored = self.store.list(resource, Some(ns)).1;
            let taken = |o: &Object| {
                given
                    .iter()
                    .any(|(kind, name)| *kind == o.types.kind && name == o.name())
            };
            config.extend(stored.iter().filter(|o| !taken(o)).map(|o| o.to_value()));
        }
        config.extend(self.account_tokens(pod));
        PodSpec::from_value(pod, &self.images, &config)
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
                // Made before the store's lock is taken.
                let value = serde_json::to_value(&status).unwrap_or_default();
                self.write_status(&ns, &name, &uid, |_| value);
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
            let spec = self
                .validate(&pod.to_value(), Vec::new())
                .map_err(|e| e.to_string())?;
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

    /// Changes the status of pod `ns/name` if it is still the pod `uid`.
    fn set_status(&self, ns: &str, name: &str, uid: &str, change: impl FnOnce(&mut PodStatus)) {
        self.write_status(ns, name, uid, |old| {
            let mut status: PodStatus = old
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default();
            change(&mut status);
            serde_json::to_value(&status).unwrap_or_default()
        });
    }

    /// Writes the status (as JSON) `make` makes of the stored one, if the object is still the
    /// pod `uid`.
    fn write_status(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
        make: impl FnOnce(Option<Value>) -> Value,
    ) {
        let result = self.store.update("pods", ns, name, Durable::Later, |p| {
            if p.uid() == uid {
                // The object's fields read and written once.
                let mut fields = p.fields();
                let status = make(fields.remove("status"));
                fields.insert("status".into(), status);
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
}

/// A digest of a pod's status (of its JSON, which is what is written).
fn digest(status: &PodStatus) -> [u8; 32] {
    use sha2::Digest as _;
    let json = serde_json::to_vec(status).unwrap_or_default();
    sha2::Sha256::digest(json).into()
}
