//! The fleet source (`wasmpod serve --source oci://REGISTRY/REPO:TAG`): the agent polls a
//! registry for an OCI artifact of manifests in Flux's format, checks each new revision whole
//! (and its cosign signature, when given a key), keeps it in the state dir, and brings the
//! node's objects to it, pruning only what the source made. The node shows the revision it
//! runs, and why the last one was refused, as its `SourceApplied` condition and as events; a
//! registry it cannot reach changes nothing, and a node that starts offline runs the revision it
//! kept.

mod apply;
mod revision;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use wasmpod::VerifyKey;

use crate::api::Api;
use crate::kubelet::Condition;
use revision::{Revision, short};

/// How often the registry is asked while nothing fails (Flux's default interval too).
const INTERVAL: Duration = Duration::from_secs(60);
/// How often a revision not yet reached is worked on (pods terminating, a failed step).
const CONVERGE_EVERY: Duration = Duration::from_millis(500);
/// The longest wait after failures: this many intervals.
const MAX_BACKOFF_INTERVALS: u32 = 8;

/// Where the desired state comes from.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SourceOptions {
    /// The artifact (`registry/repository:tag`, without `oci://`).
    pub reference: String,
    /// How often the registry is asked (default a minute; each wait varies by a tenth either
    /// way, and doubles after each failure up to eight intervals).
    pub interval: Duration,
    /// The key the artifact must be signed with (cosign), if any.
    pub verify_key: Option<VerifyKey>,
}

impl SourceOptions {
    /// The source `reference`: `oci://registry/repository:tag` (or without `oci://`).
    pub fn new(reference: &str) -> Result<SourceOptions, String> {
        let bare = reference.strip_prefix("oci://").unwrap_or(reference);
        if bare.contains("://") {
            return Err(format!(
                "{reference:?}: a source is oci://REGISTRY/REPOSITORY:TAG"
            ));
        }
        bare.parse::<oci_spec::distribution::Reference>()
            .map_err(|e| {
                format!(
                    "{reference:?} is not an image reference ({e}): a source is \
                     oci://REGISTRY/REPOSITORY:TAG"
                )
            })?;
        Ok(SourceOptions {
            reference: bare.to_owned(),
            interval: INTERVAL,
            verify_key: None,
        })
    }

    /// Sets [`SourceOptions::interval`] (at least 100 ms).
    pub fn interval(mut self, every: Duration) -> Self {
        self.interval = every.max(Duration::from_millis(100));
        self
    }

    /// Sets [`SourceOptions::verify_key`].
    pub fn verify_key(mut self, key: VerifyKey) -> Self {
        self.verify_key = Some(key);
        self
    }
}

/// What the source is doing, for a person (`systemctl status`, the Node's condition).
#[derive(Debug, Default, Clone)]
pub(crate) struct SourceStatus {
    /// The revision the node runs, as shown.
    pub(crate) running: Option<String>,
    /// Why the last poll or revision failed, if it did.
    pub(crate) trouble: Option<String>,
}

/// The source's file in the agent's dir.
fn kept_file(dir: &std::path::Path) -> PathBuf {
    dir.join("source-revision.json")
}

/// Polls the source and keeps the node at its revision until `stop`.
pub(crate) async fn run(
    api: Arc<Api>,
    options: SourceOptions,
    dir: PathBuf,
    status: Arc<Mutex<SourceStatus>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut source = Source {
        api,
        file: kept_file(&dir),
        status,
        current: None,
        refused: None,
        failures: 0,
        key_id: options.verify_key.as_ref().map(|k| k.id().to_owned()),
        options,
    };
    source.load();
    let mut poll_at = Instant::now();
    let mut converged = false;
    loop {
        if Instant::now() >= poll_at {
            let failed = source.poll().await;
            source.failures = if failed {
                source.failures.saturating_add(1)
            } else {
                0
            };
            poll_at = Instant::now() + source.next_wait();
            converged = false;
        }
        if !converged {
            converged = source.converge().await;
        }
        let wake = if converged {
            poll_at
        } else {
            poll_at.min(Instant::now() + CONVERGE_EVERY)
        };
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            _ = stop.changed() => return,
        }
    }
}

struct Source {
    api: Arc<Api>,
    options: SourceOptions,
    file: PathBuf,
    status: Arc<Mutex<SourceStatus>>,
    /// The revision the node runs.
    current: Option<Revision>,
    /// The digest of the last revision refused (not tried again until the source changes).
    refused: Option<String>,
    failures: u32,
    key_id: Option<String>,
}

impl Source {
    /// Takes up the revision kept in the state dir, unless it was not checked with the key the
    /// source now requires.
    fn load(&mut self) {
        match Revision::load(&self.file) {
            Ok(Some(r)) if self.key_id.is_some() && r.verified_by != self.key_id => {
                tracing::warn!(
                    revision = %r.shown(),
                    "the kept revision was not checked with the source's key: it is not applied \
                     until the source sends one that is"
                );
            }
            Ok(Some(r)) => {
                tracing::info!(revision = %r.shown(), "source: running the kept revision");
                self.set_running(&r);
                self.condition(
                    "True",
                    "RevisionApplied",
                    format!("running {} kept from {}", r.shown(), self.options.reference),
                );
                self.current = Some(r);
            }
            Ok(None) => {}
            Err(why) => tracing::warn!("the kept revision cannot be read: {why}"),
        }
    }

    /// Asks the registry for a new revision and takes it if it is sound. Returns whether the
    /// registry could not be asked (a failure that backs off).
    async fn poll(&mut self) -> bool {
        let known = self.current.as_ref().map(|r| r.digest.as_str());
        let unless = self.refused.as_deref().or(known);
        let pulled = self
            .api
            .kubelet
            .node()
            .pull_artifact(
                &self.options.reference,
                self.options.verify_key.as_ref(),
                revision::MAX_ARTIFACT,
                unless,
            )
            .await;
        let artifact = match pulled {
            Ok(Some(artifact)) => artifact,
            Ok(None) => {
                self.recovered();
                return false;
            }
            Err(wasmpod::Error::Artifact {
                message,
                refused: true,
                ..
            }) => {
                self.refuse(None, message);
                return false;
            }
            Err(e) => {
                self.unreachable(e.to_string());
                return true;
            }
        };
        let digest = artifact.digest.clone();
        // Back to the revision the node runs (after a refused one): nothing to take.
        if known == Some(digest.as_str()) {
            self.refused = None;
            lock(&self.status).trouble = None;
            if let Some(r) = &self.current {
                let message = format!("running {} from {}", r.shown(), self.options.reference);
                self.condition("True", "RevisionApplied", message);
            }
            return false;
        }
        let revision = match Revision::read(&artifact, self.key_id.clone()) {
            Ok(r) => r,
            Err(why) => {
                self.refuse(Some(digest), why);
                return false;
            }
        };
        if let Err(why) = self.check(&revision).await {
            self.refuse(Some(digest), why);
            return false;
        }
        if let Err(e) = revision.save(&self.file) {
            self.refuse(
                None,
                format!("it cannot be kept in {}: {e}", self.file.display()),
            );
            return false;
        }
        let before = self.current.as_ref().map(Revision::shown);
        let message = match before {
            Some(b) => format!(
                "revision {} from {} replaces {b}",
                revision.shown(),
                self.options.reference
            ),
            None => format!(
                "revision {} from {}",
                revision.shown(),
                self.options.reference
            ),
        };
        tracing::info!("source: {message}");
        self.api
            .kubelet
            .node_event(false, "RevisionAccepted", &message);
        self.refused = None;
        self.set_running(&revision);
        self.current = Some(revision);
        false
    }

    /// Checks every object of `revision` as its create would, the others counting as present.
    async fn check(&self, revision: &Revision) -> Result<(), String> {
        let set: Vec<_> = revision.items.iter().map(|i| i.applied.clone()).collect();
        let (stored, _) = apply::observe(&self.api, revision);
        for (item, stored) in revision.items.iter().zip(&stored) {
            if *stored == apply::Stored::Theirs {
                return Err(format!(
                    "{}: {} {} exists and was not made by the source",
                    item.file,
                    item.applied.resource.kind,
                    item.shown()
                ));
            }
            self.api
                .check_applied(&item.applied, &set)
                .await
                .map_err(|e| format!("{}: {}", item.file, e.message))?;
        }
        Ok(())
    }

    /// Brings the node a step closer to the current revision; whether it is there.
    async fn converge(&mut self) -> bool {
        let Some(revision) = &self.current else {
            return true;
        };
        let (stored, made) = apply::observe(&self.api, revision);
        let actions = apply::plan(revision, &stored, &made);
        if actions.is_empty() {
            return true;
        }
        let done = apply::act(&self.api, revision, &actions).await;
        if !done.failed.is_empty() {
            let why = done.failed.join("; ");
            if self.status_trouble() != Some(why.clone()) {
                tracing::warn!("source: {why}");
                self.api
                    .kubelet
                    .node_event(true, "RevisionNotApplied", &why);
                self.condition(
                    "False",
                    "RevisionNotApplied",
                    format!("{}: {why}", revision.shown()),
                );
                lock(&self.status).trouble = Some(why);
            }
        } else if done.converged {
            let message = format!(
                "running {} from {}",
                revision.shown(),
                self.options.reference
            );
            self.api
                .kubelet
                .node_event(false, "RevisionApplied", &message);
            self.condition("True", "RevisionApplied", message);
            lock(&self.status).trouble = None;
        }
        done.converged && done.failed.is_empty()
    }

    fn refuse(&mut self, digest: Option<String>, why: String) {
        let running = self
            .current
            .as_ref()
            .map_or("nothing from the source".to_owned(), Revision::shown);
        let shown = digest
            .as_deref()
            .map_or("a revision".to_owned(), |d| short(d).to_owned());
        let message = format!(
            "{shown} from {} is refused: {why}; the node runs {running}",
            self.options.reference
        );
        if self.status_trouble() != Some(message.clone()) {
            tracing::warn!("source: {message}");
            self.api
                .kubelet
                .node_event(true, "RevisionRefused", &message);
        }
        self.condition("False", "RevisionRefused", message.clone());
        lock(&self.status).trouble = Some(message);
        self.refused = digest;
    }

    fn unreachable(&mut self, why: String) {
        let running = self
            .current
            .as_ref()
            .map_or("nothing from the source".to_owned(), Revision::shown);
        let message = format!("cannot reach the source: {why}; the node runs {running}");
        if self.failures == 0 {
            tracing::warn!("source: {message}");
            self.api
                .kubelet
                .node_event(true, "SourceUnreachable", &message);
        }
        self.condition("Unknown", "SourceUnreachable", message.clone());
        lock(&self.status).trouble = Some(message);
    }

    /// The registry answered and nothing changed: a trouble of reaching it is over.
    fn recovered(&mut self) {
        let unreachable = self
            .status_trouble()
            .is_some_and(|t| t.starts_with("cannot reach"));
        if unreachable {
            lock(&self.status).trouble = None;
            if let Some(r) = &self.current {
                let message = format!("running {} from {}", r.shown(), self.options.reference);
                self.condition("True", "RevisionApplied", message);
            }
        }
    }

    /// The wait before the next poll: the interval, doubled for each failure in a row up to
    /// [`MAX_BACKOFF_INTERVALS`], varied by up to a tenth either way so that a fleet's devices
    /// do not ask at once.
    fn next_wait(&self) -> Duration {
        let doublings = self.failures.min(MAX_BACKOFF_INTERVALS.ilog2());
        let base = self.options.interval.saturating_mul(1 << doublings);
        // A fresh `RandomState`'s keys are random: its empty hash is a random number.
        let jitter = {
            use std::hash::{BuildHasher, Hasher};
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
                % 2001
        };
        // base × (0.9 .. 1.1)
        base.mul_f64(0.9 + jitter as f64 / 10_000.0)
    }

    fn set_running(&self, revision: &Revision) {
        lock(&self.status).running = Some(revision.shown());
    }

    fn status_trouble(&self) -> Option<String> {
        lock(&self.status).trouble.clone()
    }

    fn condition(&self, status: &'static str, reason: &str, message: String) {
        self.api.kubelet.set_condition(Condition {
            kind: "SourceApplied",
            status,
            reason: reason.to_owned(),
            message,
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
