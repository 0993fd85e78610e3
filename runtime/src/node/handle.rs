//! A pod on a node, as its caller holds it: status, events, logs, exec, deletion.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::PodStatus;
use tokio::sync::oneshot;

use super::{ContainerError, Error, ExecError};
use crate::container::{ContainerStdin, ContainerUsage, ExecOutput, PodMeters};
use crate::events::{EventStream, Journal};
use crate::output::{LogBook, LogOptions, Logs};
use crate::supervisor::{Board, Mailbox, Msg, Snapshot};

pub(super) struct PodShared {
    /// `delete` was called.
    pub(super) deleting: std::sync::atomic::AtomicBool,
    /// Its place in the order the node's pods were created (0 until it is recorded).
    pub(super) seq: std::sync::atomic::AtomicU64,
    pub(super) name: String,
    pub(super) uid: Arc<str>,
    pub(super) pod_dir: Arc<Path>,
    pub(super) tx: Mailbox,
    pub(super) journal: Arc<Journal>,
    pub(super) board: Arc<Board>,
    pub(super) logs: Arc<LogBook>,
    pub(super) meters: Arc<PodMeters>,
    pub(super) net: Arc<crate::network::PodNetwork>,
}

/// A pod running on a [`Node`](crate::Node). Cheap to clone.
#[derive(Clone)]
pub struct PodHandle {
    pub(super) inner: Arc<PodShared>,
}

impl std::fmt::Debug for PodHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodHandle")
            .field("name", &self.inner.name)
            .field("uid", &self.inner.uid)
            .finish_non_exhaustive()
    }
}

impl PodHandle {
    /// The pod's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The pod's UID.
    pub fn uid(&self) -> &str {
        &self.inner.uid
    }

    /// The pod's events from the first, followed live until the pod is deleted.
    pub fn events(&self) -> EventStream {
        self.inner.journal.stream()
    }

    /// What each of the pod's running containers uses now: CPU time since it started, memory
    /// held. A container that is not running (waiting, ended) is not listed.
    pub fn usage(&self) -> Vec<ContainerUsage> {
        self.inner.meters.usage()
    }

    /// Connects to `port` on the pod's IP, from the node, as `kubectl port-forward` does: the
    /// connection reaches whatever listens there (a component's `wasi:sockets` listener, an HTTP
    /// handler container). `ConnectionRefused` when nothing does.
    pub async fn connect(&self, port: u16) -> std::io::Result<crate::PodConnection> {
        self.inner
            .net
            .connect_from_host(port)
            .await
            .map(crate::PodConnection)
    }

    /// The pod's current status.
    pub fn status(&self) -> PodStatus {
        self.inner.board.borrow().status()
    }

    /// Waits until the pod has reached a terminal phase with every container stopped, and
    /// returns its status then.
    pub async fn wait(&self) -> PodStatus {
        self.inner
            .board
            .wait_end(|s| s.finished, Snapshot::status)
            .await
    }

    /// Waits until `check` holds for the pod's status, and returns that status. Returns the last
    /// status if the pod is deleted first.
    pub async fn wait_until(&self, mut check: impl FnMut(&PodStatus) -> bool) -> PodStatus {
        self.inner
            .board
            .wait_for(|s| s.deleted || check(&s.status()), Snapshot::status)
            .await
    }

    /// Runs `command` in a fresh instance of the running `container`, as an exec probe or hook
    /// does (`kubectl exec`): the export `command[0]` names when the module has it (`liveness`,
    /// `readiness`, `startup`, `post-start`, `pre-stop` name the `wasmpod:pod` exports), else
    /// the entry point with argv = `command`. The instance shares the container's volumes and
    /// environment, not its memory. `Err` says why it could not run, or why it failed with
    /// what it printed.
    pub async fn exec(&self, container: &str, command: &[&str]) -> Result<(), ExecError> {
        let command: Vec<String> = command.iter().map(|s| s.to_string()).collect();
        let sandbox = self.sandbox(container).await?;
        sandbox.exec(&command).await.map_err(ExecError::Failed)
    }

    /// Runs `command` in the running `container` as [`PodHandle::exec`] does, and returns what
    /// it wrote (up to `limit` bytes of stdout and of stderr; more is dropped) and its exit code,
    /// as `kubectl exec` shows them. `Err` only when it cannot run: no such container, or not
    /// running.
    pub async fn exec_output(
        &self,
        container: &str,
        command: &[String],
        limit: usize,
    ) -> Result<ExecOutput, ContainerError> {
        Ok(self
            .sandbox(container)
            .await?
            .exec_output(command, None, limit)
            .await)
    }

    /// [`PodHandle::exec_output`] with the command reading `stdin` (`kubectl exec -i`): its
    /// stdin ends when `stdin` does.
    pub async fn exec_with_stdin(
        &self,
        container: &str,
        command: &[String],
        stdin: impl tokio::io::AsyncRead + Send + Sync + 'static,
        limit: usize,
    ) -> Result<ExecOutput, ContainerError> {
        let stdin = wasmtime_wasi::cli::AsyncStdinStream::new(stdin);
        Ok(self
            .sandbox(container)
            .await?
            .exec_output(command, Some(stdin), limit)
            .await)
    }

    /// A writer to the running `container`'s stdin (`stdin: true`), as `kubectl attach -i`
    /// writes to it. Each instance has its own stdin: a writer of one that ended fails. `Err`
    /// when there is no such container, it does not run, or it has no stdin.
    pub async fn attach_stdin(&self, container: &str) -> Result<ContainerStdin, ContainerError> {
        let sandbox = self.sandbox(container).await?;
        match &sandbox.stdin {
            Some(pipe) => Ok(ContainerStdin::new(pipe.clone())),
            None => Err(ContainerError::NoStdin(container.to_owned())),
        }
    }

    /// Changes the module `container` runs, as a pod update of its `image` does in Kubernetes:
    /// a running regular container or sidecar is stopped (TERM, the pod's grace period) and
    /// started again with `image` whatever the restart policy, its restart count going up; an
    /// init container's new image is used when the pod starts again. Load the module first
    /// ([`crate::Node::load_images`] of the updated spec) so that a bad one is refused before.
    pub async fn set_image(&self, container: &str, image: &Path) -> Result<(), ContainerError> {
        self.send_image(container, image.to_owned(), None, None)
            .await
    }

    /// Changes `container`'s image to the one `spec` (the pod's updated spec) gives it, a
    /// `.wasm` file or a registry image (pulled when the container starts again with it,
    /// under its pull policy), as [`PodHandle::set_image`] does. Load the spec's files first
    /// ([`crate::Node::load_images`]).
    pub async fn update_image(
        &self,
        spec: &crate::PodSpec,
        container: &str,
    ) -> Result<(), ContainerError> {
        let c = spec
            .containers
            .iter()
            .find(|c| c.name == container)
            .ok_or_else(|| ContainerError::NoSuchContainer(container.to_owned()))?;
        let pull = c.pull.clone();
        self.send_image(container, c.image.clone(), pull, Some(c.argv.clone()))
            .await
    }

    async fn send_image(
        &self,
        container: &str,
        image: std::path::PathBuf,
        pull: Option<Box<crate::spec::ImagePull>>,
        argv: Option<Vec<String>>,
    ) -> Result<(), ContainerError> {
        let (reply, answer) = oneshot::channel();
        let msg = Msg::SetImage {
            container: container.to_owned(),
            image,
            pull,
            argv,
            reply,
        };
        let gone = || ContainerError::PodGone(self.name().to_owned());
        if !self.inner.tx.send(msg) {
            return Err(gone());
        }
        answer.await.map_err(|_| gone())?
    }

    async fn sandbox(
        &self,
        container: &str,
    ) -> Result<Arc<crate::container::Sandbox>, ContainerError> {
        let (reply, answer) = oneshot::channel();
        let msg = Msg::Exec {
            container: container.to_owned(),
            reply,
        };
        let gone = || ContainerError::PodGone(self.name().to_owned());
        if !self.inner.tx.send(msg) {
            return Err(gone());
        }
        answer.await.map_err(|_| gone())?
    }

    /// Deletes the pod: its containers are stopped gracefully within `grace` (the pod's
    /// `terminationGracePeriodSeconds` when `None`; zero forces an immediate kill), then its
    /// volumes are removed. Asking again can only shorten the grace period.
    ///
    /// A zero grace period is a forced deletion: containers are killed without TERM or preStop.
    pub fn delete(&self, grace: Option<Duration>) {
        self.inner
            .deleting
            .store(true, std::sync::atomic::Ordering::Release);
        self.inner.tx.send(Msg::Delete { grace });
    }

    /// Sends the pod's supervisor a message (from the node's admission).
    pub(super) fn send(&self, msg: Msg) {
        self.inner.tx.send(msg);
    }

    // What the node's admission tells the pod.

    /// The node admitted the pod: its containers may start.
    pub(super) fn admitted(&self) {
        self.send(Msg::Admit);
    }

    /// The pod does not fit (yet); `nominated` names the node when pods are preempted for it.
    pub(super) fn unschedulable(&self, message: String, nominated: Option<String>) {
        self.send(Msg::Unschedulable { message, nominated });
    }

    /// The pod is a preemption victim (its deletion follows).
    pub(super) fn preempted(&self, message: String) {
        self.send(Msg::Preempted { message });
    }

    /// The pod's toleration of a `NoExecute` taint ran out: it is deleted, as the taint
    /// eviction controller deletes it, with its own grace period.
    pub(super) fn taint_evicted(&self) {
        self.send(Msg::TaintEviction);
        self.delete(None);
    }

    /// The node evicts the pod (memory pressure).
    pub(super) fn evict(&self, message: String) {
        self.send(Msg::Evict { message });
    }

    /// Its place in the order the node's pods were created (0 until the node records it).
    pub(super) fn seq(&self) -> u64 {
        self.inner.seq.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(super) fn is_deleting(&self) -> bool {
        self.inner
            .deleting
            .load(std::sync::atomic::Ordering::Acquire)
    }

    pub(super) fn is_deleted(&self) -> bool {
        self.inner.board.borrow().deleted
    }

    pub(super) fn is_finished(&self) -> bool {
        self.inner.board.borrow().finished
    }

    /// Waits until the pod is deleted.
    pub async fn deleted(&self) {
        self.inner.board.wait_end(|s| s.deleted, |_| ()).await;
    }

    /// A container's log, as `kubectl logs` gives it: the lines of its current (or last)
    /// instance, or of the one before with [`LogOptions::previous`], read from the log file;
    /// with [`LogOptions::follow`], new lines as they are written, until the instance ends.
    ///
    /// ```no_run
    /// # async fn example(pod: wasmpod::PodHandle) -> Result<(), wasmpod::Error> {
    /// use wasmpod::LogOptions;
    ///
    /// let mut logs = pod.logs("app", LogOptions::default().follow())?;
    /// while let Some(line) = logs.next().await {
    ///     println!("{}", line.line);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn logs(&self, container: &str, options: LogOptions) -> Result<Logs, Error> {
        let status = self.status();
        let pod = self.name();
        let c = status
            .init_container_statuses
            .iter()
            .chain(&status.container_statuses)
            .flatten()
            .find(|c| c.name == container)
            .ok_or_else(|| {
                Error::NoLogs(format!("container {container} is not valid for pod {pod}"))
            })?;
        let ran = |s: &Option<k8s_openapi::api::core::v1::ContainerState>| {
            s.as_ref()
                .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
        };
        let has_run = ran(&c.state) || ran(&c.last_state);
        let instance = if options.previous {
            c.restart_count - 1
        } else {
            c.restart_count
        };
        if !has_run || instance < 0 {
            let message = if options.previous {
                format!("previous terminated container \"{container}\" in pod \"{pod}\" not found")
            } else {
                let why = c
                    .state
                    .as_ref()
                    .and_then(|s| s.waiting.as_ref())
                    .and_then(|w| w.reason.clone())
                    .unwrap_or_default();
                format!("container \"{container}\" in pod \"{pod}\" is waiting to start: {why}")
            };
            return Err(Error::NoLogs(message));
        }
        // An instance that has ended has a complete log to come (the writer may not have
        // flushed its last lines yet): read it to its end, as when following.
        let running = c.state.as_ref().is_some_and(|s| s.running.is_some());
        let to_end = options.follow || options.previous || !running;
        Ok(Logs::open(
            self.inner.logs.clone(),
            container,
            instance,
            to_end,
        ))
    }

    /// The CRI-format log file of a container's instance (`restart` = its restart count then).
    pub fn log_file(&self, container: &str, restart: i32) -> PathBuf {
        crate::output::log_file(self.inner.logs.dir(), container, restart)
    }

    /// Replaces the file at `path` in the pod's `volume` (a `projected`, `secret` or
    /// `configMap` volume the node wrote) with `contents`, as the kubelet rewrites a projected
    /// service-account token before it expires: written beside it, then renamed over it, so a
    /// guest opening it reads the old file or the new one whole. The volume's name and the path
    /// are checked (a DNS label; a relative path without `..`) and the file is written through
    /// the volume's directory handle, so nothing outside it is touched.
    pub fn rewrite_file(&self, volume: &str, path: &str, contents: &[u8]) -> Result<(), Error> {
        let dir = self.inner.pod_dir.join("volumes");
        let bad = |why: &str| Error::Io {
            path: dir.join(volume),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_owned()),
        };
        crate::spec::check_label(volume).map_err(bad)?;
        crate::spec::check_relative_path(path).map_err(bad)?;
        let io = |source| Error::Io {
            path: dir.join(volume).join(path),
            source,
        };
        let root =
            cap_std::fs::Dir::open_ambient_dir(dir.join(volume), cap_std::ambient_authority())
                .map_err(io)?;
        let fresh = format!("{path}.wasmpod-new");
        root.write(&fresh, contents).map_err(io)?;
        root.rename(&fresh, &root, path).map_err(io)
    }

    /// The pod's own directory under the node's state dir, where its volumes are (it exists
    /// only if the pod has volumes); its logs are under `logs/` beside it.
    pub fn dir(&self) -> &Path {
        &self.inner.pod_dir
    }
}
