//! Images from registries: a container's `image` that is not a `.wasm` path is pulled
//! ([`pull`]) into the node's content-addressed store ([`store`]) with the kubelet's pull
//! policies, shared by all pods: concurrent pulls of one image share one download, and unused
//! images are garbage-collected past a size threshold.

#[cfg(not(feature = "registry"))]
mod offline;
#[cfg(feature = "registry")]
mod pull;
#[cfg(feature = "registry")]
mod registry;
mod signature;
mod store;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oci_spec::distribution::Reference;
use serde_json::Value;
use tokio::sync::OnceCell;

pub(crate) use crate::spec::{PullPolicy, shown};
#[cfg(not(feature = "registry"))]
use offline::Puller;
#[cfg(feature = "registry")]
use pull::Puller;
pub use signature::{InvalidKey, VerifyKey};
use store::{Record, Store, now_secs};

/// The kubelet's image garbage collection, over the store's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageGc {
    /// The store's size budget in bytes.
    pub limit: u64,
    /// Past this percentage of `limit`, unused images are removed, least recently used first...
    pub high_percent: u8,
    /// ...until the store is at or below this percentage.
    pub low_percent: u8,
}

impl Default for ImageGc {
    /// 10 GiB, 85 % and 80 % (the kubelet's thresholds).
    fn default() -> ImageGc {
        ImageGc {
            limit: 10 << 30,
            high_percent: 85,
            low_percent: 80,
        }
    }
}

/// An image a container runs: its `.wasm` in the store, and what it is.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub wasm: PathBuf,
    pub image_id: String,
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    /// `None`: it was already present; else how long the pull took and the image's size.
    pub pulled: Option<(Duration, u64)>,
    /// Keeps the image from garbage collection while the container has it.
    pub _lease: Arc<Lease>,
    /// The blob is machine code, from a precompiled layer of a registry the node trusts.
    pub precompiled: bool,
}

/// What a pull found.
pub(crate) struct Fetched {
    pub manifest_digest: String,
    /// The `.wasm`, and the digest the manifest gave it (a wasm artifact's layer).
    pub wasm: Vec<u8>,
    pub wasm_digest: Option<String>,
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    /// The `.wasm` is machine code from a precompiled layer.
    pub precompiled: bool,
}

/// Why an image is not there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PullError {
    /// `imagePullPolicy: Never` and the image is not on the node.
    NeverPull,
    /// The pull failed.
    Failed(String),
    /// The node requires a signature of the image that it does not have (why not).
    #[cfg_attr(
        not(feature = "registry"),
        allow(dead_code, reason = "only a pull checks signatures")
    )]
    Unsigned(String),
    /// The registry answered with an artifact beyond what is taken (its size).
    #[cfg_attr(
        not(feature = "registry"),
        allow(dead_code, reason = "only a pull reads artifacts")
    )]
    Refused(String),
}

impl std::fmt::Display for PullError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PullError::NeverPull => f.write_str("not present, and the pull policy is Never"),
            PullError::Failed(why) => f.write_str(why),
            PullError::Unsigned(why) => write!(f, "signature: {why}"),
            PullError::Refused(why) => f.write_str(why),
        }
    }
}

/// An OCI artifact pulled whole ([`Node::pull_artifact`](crate::Node::pull_artifact)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Artifact {
    /// The digest of its manifest (`sha256:...`).
    pub digest: String,
    /// Its config's media type, which says what kind of artifact it is.
    pub config_media_type: String,
    /// Its manifest's annotations (`org.opencontainers.image.revision`, ...).
    pub annotations: std::collections::BTreeMap<String, String>,
    /// Its layers, in the manifest's order, each checked against its digest.
    pub layers: Vec<ArtifactLayer>,
}

/// One layer of an [`Artifact`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ArtifactLayer {
    /// Its media type.
    pub media_type: String,
    /// Its digest.
    pub digest: String,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// Which images must be signed, and with which key: the longest prefix of the image's
/// `registry/repository` decides.
#[derive(Debug, Clone, Default)]
pub(crate) struct SignaturePolicy(Vec<(String, VerifyKey)>);

impl SignaturePolicy {
    pub(crate) fn new(entries: &[(String, VerifyKey)]) -> SignaturePolicy {
        SignaturePolicy(entries.to_vec())
    }

    /// The key `reference` must be signed with, if any.
    pub(crate) fn key_for(&self, reference: &Reference) -> Option<&VerifyKey> {
        let name = format!(
            "{}/{}",
            reference.resolve_registry(),
            reference.repository()
        );
        self.0
            .iter()
            .filter(|(prefix, _)| covers(prefix, &name))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, key)| key)
    }
}

/// Whether the policy prefix `prefix` covers the image name `name` (`registry/repository`): the
/// name itself, or a path below it.
fn covers(prefix: &str, name: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    name == prefix
        || name
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// A pull under way, as [`Node::pulls`](crate::Node::pulls) shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PullProgress {
    /// The image (`registry/repo:tag`).
    pub image: String,
    /// Bytes downloaded so far.
    pub bytes: u64,
    /// Layers downloaded, of `layers`.
    pub layers_done: usize,
    /// Layers to download (0 until the manifest is read).
    pub layers: usize,
}

/// The counters of one pull, updated as its blobs arrive.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub bytes: std::sync::atomic::AtomicU64,
    pub layers_done: std::sync::atomic::AtomicUsize,
    pub layers: std::sync::atomic::AtomicUsize,
}

/// An image in use: while one exists, garbage collection keeps its blob.
#[derive(Debug)]
pub(crate) struct Lease {
    digest: String,
    in_use: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut in_use = self.in_use.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = in_use.get_mut(&self.digest) {
            *n -= 1;
            if *n == 0 {
                in_use.remove(&self.digest);
            }
        }
    }
}

type Flight = Arc<OnceCell<Result<Record, PullError>>>;

/// The node's images.
pub(crate) struct Images {
    root: PathBuf,
    /// Opened (made) when the first registry image is asked for: a node that runs only `.wasm`
    /// files has no image store.
    store: std::sync::OnceLock<Result<Store, String>>,
    puller: Puller,
    signatures: SignaturePolicy,
    gc: ImageGc,
    inflight: Mutex<HashMap<String, Flight>>,
    progress: Mutex<HashMap<String, Arc<Counters>>>,
    in_use: Arc<Mutex<HashMap<String, usize>>>,
    /// Blobs a pull wrote that no container has leased yet: the garbage collection of another
    /// pull keeps them.
    fresh: Mutex<std::collections::HashSet<String>>,
}

impl Images {
    pub(crate) fn new(
        root: &Path,
        insecure: &[String],
        precompiled: &[String],
        auth_file: Option<&Path>,
        gc: ImageGc,
        signatures: SignaturePolicy,
    ) -> Images {
        Images {
            root: root.to_owned(),
            store: std::sync::OnceLock::new(),
            puller: Puller::new(insecure, precompiled, auth_file),
            signatures,
            gc,
            inflight: Mutex::default(),
            progress: Mutex::default(),
            in_use: Arc::default(),
            fresh: Mutex::default(),
        }
    }

    fn store(&self) -> Result<&Store, String> {
        self.store
            .get_or_init(|| {
                Store::open(&self.root).map_err(|e| {
                    format!("cannot open the image store {}: {e}", self.root.display())
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Whether the store has an image for `reference` (its blob not checked yet).
    pub(crate) fn present(&self, reference: &str) -> bool {
        self.store().is_ok_and(|s| s.record(reference).is_some())
    }

    fn lease(&self, digest: &str) -> Arc<Lease> {
        *self
            .in_use
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(digest.to_owned())
            .or_default() += 1;
        Arc::new(Lease {
            digest: digest.to_owned(),
            in_use: self.in_use.clone(),
        })
    }

    /// The image `reference` under `policy`: the stored one when the policy allows and it is
    /// intact, else pulled (one download for every container asking at once). `secrets` are
    /// the pod's `.dockerconfigjson` documents; `command` the container's.
    pub(crate) async fn ensure(
        &self,
        reference: &Reference,
        policy: PullPolicy,
        secrets: &[Value],
        command: Option<&str>,
    ) -> Result<Resolved, PullError> {
        let name = shown(reference);
        let started = Instant::now();
        let store = self.store().map_err(PullError::Failed)?;
        let key = self.signatures.key_for(reference);
        // Machine code stays unused once the node no longer trusts its registry with it, and
        // an image once the node wants it signed with a key it was not checked against: the
        // image is pulled again (its portable layer; its signature checked).
        let stored = store
            .record(&name)
            .filter(|r| !r.precompiled || self.puller.trusts(reference))
            .filter(|r| key.is_none_or(|k| r.signed_by.as_deref() == Some(k.id())))
            .and_then(|r| Some((store.verified(&r.wasm)?, r)));
        let fresh_enough = match (&stored, policy) {
            (Some(_), PullPolicy::IfNotPresent | PullPolicy::Never) => true,
            (None, PullPolicy::Never) => return Err(PullError::NeverPull),
            (None, _) => false,
            // `Always` asks the registry what the reference is now; the same manifest is not
            // downloaded again.
            (Some((_, r)), PullPolicy::Always) => {
                let digest = self
                    .puller
                    .resolve(reference, secrets)
                    .await
                    .map_err(PullError::Failed)?;
                r.image_id.ends_with(&format!("@{digest}"))
            }
        };
        if fresh_enough && let Some((wasm, mut record)) = stored {
            record.last_used = now_secs();
            let _ = store.put_record(&record);
            // `Always` reports a pull, as the kubelet does, however little it fetched.
            let pulled = policy == PullPolicy::Always;
            return Ok(self.resolved(record, wasm, pulled.then(|| started.elapsed())));
        }
        let flight: Flight = self
            .inflight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.clone())
            .or_default()
            .clone();
        let record = flight
            .get_or_init(|| self.fetch(reference, &name, secrets, command, key))
            .await
            .clone();
        self.inflight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&name);
        let record = record?;
        // Its digest was checked when the pull wrote it, a moment ago.
        let wasm = store.existing(&record.wasm);
        let digest = record.wasm.clone();
        let resolved = wasm.map(|wasm| self.resolved(record, wasm, Some(started.elapsed())));
        // Leased (or gone): the collection no longer needs to be told to keep it.
        self.fresh
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&digest);
        resolved.ok_or_else(|| PullError::Failed("the pulled image is gone from the store".into()))
    }

    /// The image of `record`, held (leased) for a container; `pulled`: how long its pull took.
    fn resolved(&self, record: Record, wasm: PathBuf, pulled: Option<Duration>) -> Resolved {
        let size = std::fs::metadata(&wasm).map_or(0, |m| m.len());
        Resolved {
            _lease: self.lease(&record.wasm),
            wasm,
            image_id: record.image_id,
            entrypoint: record.entrypoint,
            cmd: record.cmd,
            pulled: pulled.map(|took| (took, size)),
            precompiled: record.precompiled,
        }
    }

    /// Pulls the artifact `reference` whole (at most `limit` bytes of layers), checking its
    /// signature when `key` is given; `None` when it is still the manifest `unless`. Artifacts
    /// are not kept in the image store.
    pub(crate) async fn artifact(
        &self,
        reference: &Reference,
        key: Option<&VerifyKey>,
        limit: u64,
        unless: Option<&str>,
    ) -> Result<Option<Artifact>, PullError> {
        self.puller.artifact(reference, key, limit, unless).await
    }

    /// The pulls under way.
    pub(crate) fn pulls(&self) -> Vec<PullProgress> {
        use std::sync::atomic::Ordering::Relaxed;
        let progress = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        let mut pulls: Vec<PullProgress> = progress
            .iter()
            .map(|(image, c)| PullProgress {
                image: image.clone(),
                bytes: c.bytes.load(Relaxed),
                layers_done: c.layers_done.load(Relaxed),
                layers: c.layers.load(Relaxed),
            })
            .collect();
        pulls.sort_by(|a, b| a.image.cmp(&b.image));
        pulls
    }

    async fn fetch(
        &self,
        reference: &Reference,
        name: &str,
        secrets: &[Value],
        command: Option<&str>,
        key: Option<&VerifyKey>,
    ) -> Result<Record, PullError> {
        let counters = Arc::new(Counters::default());
        self.progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_owned(), counters.clone());
        let fetched = self
            .puller
            .fetch(reference, secrets, command, &counters, key)
            .await;
        self.progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        let fetched = fetched?;
        let store = self.store().map_err(PullError::Failed)?;
        let wasm = store
            .put_blob(fetched.wasm_digest.as_deref(), &fetched.wasm)
            .map_err(PullError::Failed)?;
        self.fresh
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(wasm.clone());
        let record = Record {
            reference: name.to_owned(),
            image_id: format!(
                "{}/{}@{}",
                reference.registry(),
                reference.repository(),
                fetched.manifest_digest
            ),
            wasm,
            entrypoint: fetched.entrypoint,
            cmd: fetched.cmd,
            last_used: now_secs(),
            precompiled: fetched.precompiled,
            signed_by: key.map(|k| k.id().to_owned()),
        };
        store
            .put_record(&record)
            .map_err(|e| PullError::Failed(format!("cannot record the image: {e}")))?;
        self.collect(&record.wasm);
        Ok(record)
    }

    /// Runs the image garbage collection (once per download), keeping `pulled`, which no
    /// container holds yet.
    fn collect(&self, pulled: &str) -> Vec<String> {
        let in_use = self
            .in_use
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let fresh = self.fresh.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let gc = self.gc;
        let Ok(store) = self.store() else {
            return Vec::new();
        };
        let removed = store.collect(
            gc.limit,
            (u64::from(gc.high_percent), u64::from(gc.low_percent)),
            |digest| digest == pulled || in_use.contains_key(digest) || fresh.contains(digest),
        );
        for r in &removed {
            tracing::info!(image = %r, "image garbage-collected");
        }
        removed
    }
}
