//! The supervisor: one task per pod that gives its containers the kubelet's lifecycle.
//!
//! The pod's state is data (a [`Container`] record per container, the phase, the conditions and
//! an optional [`Shutdown`]); every change goes through [`PodTask::sync`], the analogue of the
//! kubelet's `computePodActions`, which is run after each message or timer. The task sleeps until
//! the next message (a container exited, a deletion) or the next deadline (a backoff ends, a grace
//! period runs out): an idle pod costs nothing.

mod backoff;
mod container;
mod probe;
mod status;

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::{mpsc, oneshot, watch};

pub use backoff::BackoffOptions;
use container::{Container, HookState, Instance, State, Terminated};
use probe::{HookKind, ProbeKind};
use status::Phase;

use crate::container::{
    EXIT_KILLED, EXIT_START_ERROR, EXIT_TERMINATED, Exit, Preopen, Sandbox, TermSignal,
};
use crate::engine::{Engine, Image, LoadError, Pull};
use crate::events::{Event, EventType, Journal, Reason, now_micros};
use crate::memory::{Budget, PodMemory};
use crate::network::publish::Published;
use crate::network::{NodeNetwork, PodNetwork};
use crate::node::Seat;
use crate::output::{LogBook, PodOutput, Stream};
use crate::paths::PodPaths;
use crate::spec::{PodInfo, PodSpec, RestartPolicy, Role, VolumeSource, resolve_env};
use crate::volumes::PodVolumes;

/// The kubelet's floor for the time between TERM and KILL (`minimumGracePeriodInSeconds`).
const MIN_GRACE: Duration = Duration::from_secs(2);

/// What a pod's supervisor needs from its node.
pub(crate) struct NodeContext {
    pub engine: Engine,
    /// `spec.nodeName` as the downward API shows it.
    pub node_name: String,
    pub network: NodeNetwork,
    pub backoff: BackoffOptions,
    pub memory_limit: usize,
    pub log_limits: crate::output::LogLimits,
}

/// What the supervisor publishes about its pod.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    pub status: k8s::PodStatus,
    /// Every container has stopped for good and the phase is terminal.
    pub finished: bool,
    /// The pod is gone (its last event, `Deleted`, was recorded).
    pub deleted: bool,
}

pub(crate) enum Msg {
    Exited {
        index: usize,
        id: u64,
        exit: Exit,
    },
    Delete {
        grace: Option<Duration>,
    },
    Hook {
        index: usize,
        id: u64,
        hook: HookKind,
        result: Result<(), String>,
    },
    Probe {
        index: usize,
        id: u64,
        kind: ProbeKind,
        failure: Option<String>,
        verdict: Option<bool>,
    },
    /// The node admitted the pod: its containers may start.
    Admit,
    /// The pod does not fit on the node (yet); `nominated` names the node when pods are being
    /// preempted for it.
    Unschedulable {
        message: String,
        nominated: Option<String>,
    },
    /// The pod is a preemption victim (its deletion follows).
    Preempted {
        message: String,
    },
    /// The node evicts the pod (memory pressure).
    Evict {
        message: String,
    },
    /// Run `command` in a fresh instance of the named container (`kubectl exec`).
    Exec {
        container: String,
        command: Vec<String>,
        reply: oneshot::Sender<Result<(), String>>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ShutdownCause {
    /// No regular container will run again.
    Completed,
    Deleted,
    DeadlineExceeded,
    Evicted,
}

/// How often `emptyDir` volumes with a `sizeLimit` are measured.
const VOLUME_CHECK: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, Copy)]
struct Shutdown {
    cause: ShutdownCause,
    deadline: Instant,
    /// Asked with a zero grace period: kill without TERM or hooks.
    force: bool,
}

#[derive(Debug, Clone, PartialEq)]
struct Condition {
    status: bool,
    reason: Option<&'static str>,
    message: Option<String>,
    since: Timestamp,
}

pub(crate) struct PodTask {
    spec: Arc<PodSpec>,
    node: Arc<NodeContext>,
    uid: String,
    containers: Vec<Container>,
    phase: Phase,
    initialized: bool,
    conditions: Vec<(&'static str, Condition)>,
    start_time: Timestamp,
    started: Instant,
    shutdown: Option<Shutdown>,
    delete_requested: bool,
    failure: Option<(&'static str, String)>,
    /// Why the pod is being disrupted (the `DisruptionTarget` condition): reason, message.
    disruption: Option<(&'static str, String)>,
    rx: mpsc::UnboundedReceiver<Msg>,
    tx: mpsc::UnboundedSender<Msg>,
    journal: Arc<Journal>,
    snapshot: watch::Sender<Snapshot>,
    output: PodOutput,
    volumes: PodVolumes,
    /// When size-limited volumes are measured next (none without a `sizeLimit`).
    volume_check: Option<Instant>,
    paths: PodPaths,
    instances: u64,
    net: Arc<PodNetwork>,
    memory: Arc<PodMemory>,
    /// The pod's place in the node's admission.
    seat: Seat,
    admission: Admission,
    /// The node's admission knows the pod has stopped for good.
    released: bool,
    /// The pod's host listeners, closed when the supervisor ends.
    _published: Published,
}

/// What a pod is made of besides its spec, prepared by the node.
pub(crate) struct PodSetup {
    pub uid: String,
    /// The pod's directories, its own while the supervisor lives.
    pub paths: PodPaths,
    pub images: Vec<(Arc<Image>, Pull)>,
    pub tap: Option<mpsc::Sender<crate::OutputLine>>,
    pub net: Arc<PodNetwork>,
    pub published: Published,
    pub memory: Arc<PodMemory>,
}

/// Where the pod stands with the node's admission.
#[derive(Debug, Clone, PartialEq)]
enum Admission {
    /// Not decided yet, or does not fit: `message` says why, `nominated` names the node when
    /// lower-priority pods are being preempted for it.
    Waiting {
        message: Option<String>,
        nominated: Option<String>,
    },
    Admitted,
}

/// The pieces a caller keeps to talk to a started pod.
pub(crate) struct PodChannels {
    pub tx: mpsc::UnboundedSender<Msg>,
    pub journal: Arc<Journal>,
    pub snapshot: watch::Receiver<Snapshot>,
    pub logs: Arc<LogBook>,
}

/// Should the supervisor ever end without cleaning up (a panic), its watchers are not left
/// waiting: the event stream ends and the pod counts as finished and deleted.
impl Drop for PodTask {
    fn drop(&mut self) {
        self.journal.close();
        self.snapshot.send_if_modified(|s| {
            let changed = !(s.finished && s.deleted);
            s.finished = true;
            s.deleted = true;
            changed
        });
    }
}

impl PodTask {
    /// Prepares the pod's sandbox (directories, volumes, log writer) and its supervisor, which
    /// [`PodTask::spawn`] starts.
    pub(crate) fn prepare(
        spec: Arc<PodSpec>,
        node: Arc<NodeContext>,
        setup: PodSetup,
        seat: Seat,
    ) -> std::io::Result<(PodTask, PodChannels)> {
        let PodSetup {
            uid,
            paths,
            images,
            tap,
            net,
            published,
            memory,
        } = setup;
        let volumes = PodVolumes::prepare(&spec, &paths.pod_dir, &uid)?;
        let limited = spec.volumes.iter().any(|v| {
            matches!(
                v.source,
                VolumeSource::EmptyDir {
                    size_limit: Some(_),
                    ..
                }
            )
        });
        let waiting = if spec.has_init() {
            "PodInitializing"
        } else {
            "ContainerCreating"
        };
        let containers = spec
            .containers
            .iter()
            .zip(images.into_iter().map(Some).chain(std::iter::repeat(None)))
            .map(|(c, image)| Container::new(c.clone(), waiting, image))
            .collect();
        let (tx, rx) = mpsc::unbounded_channel();
        let journal = Arc::new(Journal::default());
        let (snapshot, snapshot_rx) = watch::channel(Snapshot::default());
        let output = PodOutput::start(paths.log_dir.clone(), tap, node.log_limits);
        let mut task = PodTask {
            spec,
            node,
            uid,
            containers,
            phase: Phase::Pending,
            initialized: false,
            conditions: Vec::new(),
            start_time: Timestamp::now(),
            started: Instant::now(),
            shutdown: None,
            delete_requested: false,
            failure: None,
            disruption: None,
            rx,
            tx: tx.clone(),
            journal: journal.clone(),
            snapshot,
            output,
            volume_check: limited.then(Instant::now),
            volumes,
            paths,
            instances: 0,
            net,
            memory,
            seat,
            admission: Admission::Waiting {
                message: None,
                nominated: None,
            },
            released: false,
            _published: published,
        };
        task.update_conditions();
        task.publish(false, false);
        let channels = PodChannels {
            tx,
            journal,
            snapshot: snapshot_rx,
            logs: task.output.book(),
        };
        Ok((task, channels))
    }

    pub(crate) fn seat(&self) -> &Seat {
        &self.seat
    }

    /// The node admitted the pod: its containers may start.
    pub(crate) fn admit(&mut self) {
        self.admission = Admission::Admitted;
        self.start_time = Timestamp::now();
        self.started = Instant::now();
        self.update_conditions();
        self.publish(false, false);
    }

    /// Starts the supervisor.
    pub(crate) fn spawn(self) {
        tokio::spawn(self.run());
    }

    async fn run(mut self) {
        self.pod_event(
            EventType::Normal,
            Reason::PhaseChanged,
            "Pod is Pending".into(),
            Some(Phase::Pending),
        );
        loop {
            self.sync().await;
            let finished = self.finished();
            self.publish(finished, false);
            if finished && !self.released {
                self.released = true;
                self.seat.release();
            }
            if finished && self.delete_requested {
                break;
            }
            let deadline = self.next_deadline();
            let msg = tokio::select! {
                msg = self.rx.recv() => msg,
                () = sleep_until(deadline) => continue,
            };
            let Some(msg) = msg else { break };
            self.handle(msg);
            while let Ok(msg) = self.rx.try_recv() {
                self.handle(msg);
            }
        }
        self.cleanup();
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Exited { index, id, exit } => self.exited(index, id, exit),
            Msg::Delete { grace } => self.delete(grace),
            Msg::Hook {
                index,
                id,
                hook,
                result,
            } => self.hook_done(index, id, hook, result),
            Msg::Probe {
                index,
                id,
                kind,
                failure,
                verdict,
            } => self.probed(index, id, kind, failure, verdict),
            Msg::Exec {
                container,
                command,
                reply,
            } => self.exec(&container, command, reply),
            Msg::Admit => self.admit(),
            Msg::Unschedulable { message, nominated } => {
                if self.admission != Admission::Admitted {
                    self.pod_event(
                        EventType::Warning,
                        Reason::FailedScheduling,
                        message.clone(),
                        None,
                    );
                    self.admission = Admission::Waiting {
                        message: Some(message),
                        nominated,
                    };
                }
            }
            Msg::Preempted { message } => {
                self.pod_event(EventType::Normal, Reason::Preempted, message, None);
                let why = "wasmpod: preempting to accommodate a higher priority pod";
                self.disruption = Some(("PreemptionByScheduler", why.into()));
            }
            // The kubelet's hard eviction: a grace period of one second.
            Msg::Evict { message } => self.evict(message, Duration::from_secs(1)),
        }
    }

    /// The instance `id` of container `index`, if it is still the live one.
    fn instance(&mut self, index: usize, id: u64) -> Option<&mut Instance> {
        self.containers[index]
            .instance
            .as_mut()
            .filter(|i| i.id == id)
    }

    // ---- transitions -------------------------------------------------------------------------

    fn exited(&mut self, index: usize, id: u64, exit: Exit) {
        if self.instance(index, id).is_none() {
            return;
        }
        let c = &mut self.containers[index];
        c.instance = None;
        self.output.ended(&c.name, c.restart_count);
        let started_at = match c.state {
            State::Running { started_at } => started_at,
            _ => Timestamp::now(),
        };
        let message = exit.reason().to_owned();
        let code = exit.code;
        if let Some(detail) = &exit.message {
            tracing::info!(pod = %self.spec.name, container = %c.name, code, "container exited: {detail}");
        }
        // A container that could not start (a mount refused, ...) says why, as the kubelet's
        // `Failed` event does.
        let start_error = exit
            .message
            .as_ref()
            .filter(|_| code == EXIT_START_ERROR)
            .map(|detail| format!("Error: {detail}"));
        c.state = State::Terminated(Terminated {
            exit,
            started_at,
            finished_at: Timestamp::now(),
            finished: Instant::now(),
        });
        c.ready = false;
        c.started = false;
        if let Some(message) = start_error {
            self.container_event(index, EventType::Warning, Reason::Failed, message, None);
        }
        let kind = if code == 0 {
            EventType::Normal
        } else {
            EventType::Warning
        };
        self.container_event(index, kind, Reason::Exited, message, Some(code));
    }

    fn delete(&mut self, grace: Option<Duration>) {
        self.delete_requested = true;
        let grace = grace.unwrap_or(self.spec.grace_period);
        let now = Instant::now();
        match &mut self.shutdown {
            // The grace period can be shortened while terminating, never lengthened.
            Some(s) => {
                if after(now, grace) < s.deadline {
                    s.deadline = after(now, grace);
                    s.force |= grace.is_zero();
                    let force = s.force;
                    for i in 0..self.containers.len() {
                        if self.containers[i]
                            .instance
                            .as_ref()
                            .is_some_and(|inst| inst.deadline.is_some())
                        {
                            self.stop(i, grace, force, None);
                        }
                    }
                }
            }
            None => {
                let message = format!("Deleting pod with grace period {}s", grace.as_secs());
                self.pod_event(EventType::Normal, Reason::Terminating, message, None);
                self.begin_shutdown(ShutdownCause::Deleted, grace);
            }
        }
    }

    /// Fails the pod with reason `Evicted` and stops it within `grace`.
    fn evict(&mut self, message: String, grace: Duration) {
        if self.shutdown.is_some() {
            return;
        }
        self.pod_event(EventType::Warning, Reason::Evicted, message.clone(), None);
        self.disruption = Some(("TerminationByKubelet", message.clone()));
        self.failure = Some(("Evicted", message));
        self.begin_shutdown(ShutdownCause::Evicted, grace);
    }

    fn begin_shutdown(&mut self, cause: ShutdownCause, grace: Duration) {
        if self.shutdown.is_some() {
            return;
        }
        self.seat.leaving();
        self.shutdown = Some(Shutdown {
            cause,
            deadline: after(Instant::now(), grace),
            force: grace.is_zero(),
        });
        for i in 0..self.containers.len() {
            let c = &mut self.containers[i];
            c.retry_at = None;
            // While the pod terminates, liveness and startup stop and readiness turns false.
            if let Some(instance) = &mut c.instance {
                instance.stop_tasks();
            }
            if c.ready {
                c.ready = false;
                self.container_event(
                    i,
                    EventType::Normal,
                    Reason::NotReady,
                    "Pod is terminating".into(),
                    None,
                );
            }
        }
    }

    /// Stops a container within `grace`: its preStop hook first (bounded by the grace period),
    /// then TERM, then KILL when the grace period is over, never sooner than 2 s after TERM.
    /// `force` kills at once. Called again, it can only shorten the grace period.
    fn stop(&mut self, index: usize, grace: Duration, force: bool, reason: Option<String>) {
        let now = Instant::now();
        let has_pre_stop = self.containers[index].spec.pre_stop.is_some();
        let Some(instance) = &mut self.containers[index].instance else {
            return;
        };
        let deadline = instance
            .deadline
            .map_or(after(now, grace), |d| d.min(after(now, grace)));
        instance.deadline = Some(deadline);
        instance.stopping = true;
        if reason.is_some() {
            instance.stop_reason = reason;
        }
        if force {
            instance.kill(EXIT_KILLED);
            // As the kubelet does for a zero grace period: the container is stopped at once,
            // and the event still says so.
            self.killing(index, Duration::ZERO);
            return;
        }
        if let Some(sent) = instance.term_sent {
            if let Some(kill_at) = instance.kill_at {
                instance.kill_at(kill_at.min(deadline.max(after(sent, MIN_GRACE))));
            }
            return;
        }
        match instance.pre_stop {
            HookState::NotRun if has_pre_stop => self.start_pre_stop(index),
            HookState::Running => {} // TERM follows when it returns, or at the deadline
            _ => self.send_term(index),
        }
    }

    fn start_pre_stop(&mut self, index: usize) {
        let Some(handler) = self.containers[index].spec.pre_stop.clone() else {
            return;
        };
        let Some(instance) = &mut self.containers[index].instance else {
            return;
        };
        if instance.pre_stop != HookState::NotRun {
            return;
        }
        instance.pre_stop = HookState::Running;
        let deadline = instance
            .deadline
            .unwrap_or_else(|| after(Instant::now(), self.spec.grace_period));
        let timeout = deadline.saturating_duration_since(Instant::now());
        let (sandbox, id, tx) = (instance.sandbox.clone(), instance.id, self.tx.clone());
        let task = tokio::spawn(async move {
            let result = probe::run_handler(&handler, &sandbox, timeout).await;
            let _ = tx.send(Msg::Hook {
                index,
                id,
                hook: HookKind::PreStop,
                result,
            });
        });
        instance.tasks.push(task.abort_handle());
        self.container_event(
            index,
            EventType::Normal,
            Reason::PreStopHook,
            "Running preStop hook".into(),
            None,
        );
    }

    /// Records `Killing` for container `index`, with the stop reason and the grace left.
    fn killing(&mut self, index: usize, grace: Duration) {
        let c = &self.containers[index];
        let why = c
            .instance
            .as_ref()
            .and_then(|i| i.stop_reason.as_deref())
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        let message = format!(
            "Stopping container {}{why} with grace period {}s",
            c.name,
            whole_seconds(grace)
        );
        self.container_event(index, EventType::Normal, Reason::Killing, message, None);
    }

    /// Sends TERM (or stops the container at once when it does not handle TERM).
    fn send_term(&mut self, index: usize) {
        let now = Instant::now();
        let handles_term = self.containers[index]
            .instance
            .as_ref()
            .is_some_and(|i| i.sandbox.image.handles_term());
        let Some(instance) = &mut self.containers[index].instance else {
            return;
        };
        if instance.term_sent.is_some() {
            return;
        }
        instance.term_sent = Some(now);
        let remaining = instance
            .deadline
            .map_or(Duration::ZERO, |d| d.saturating_duration_since(now));
        if handles_term {
            let _ = instance.term.send(true);
            instance.kill_at(after(now, remaining.max(MIN_GRACE)));
        } else {
            instance.kill(EXIT_TERMINATED);
        }
        self.killing(index, remaining);
    }

    fn hook_done(&mut self, index: usize, id: u64, hook: HookKind, result: Result<(), String>) {
        let Some(instance) = self.instance(index, id) else {
            return;
        };
        match hook {
            HookKind::PreStop => {
                instance.pre_stop = HookState::Done;
                let stopping = instance.stopping;
                if let Err(e) = result {
                    self.container_event(
                        index,
                        EventType::Warning,
                        Reason::FailedPreStopHook,
                        format!("PreStopHook failed: {e}"),
                        None,
                    );
                }
                // A sidecar whose hook started with the shutdown still waits for its turn.
                if stopping {
                    self.send_term(index);
                }
            }
            HookKind::PostStart => match result {
                Ok(()) => {
                    self.container_event(
                        index,
                        EventType::Normal,
                        Reason::PostStartHook,
                        "postStart hook succeeded".into(),
                        None,
                    );
                    self.running(index);
                }
                Err(e) => {
                    let message = format!("PostStartHook failed: {e}");
                    self.container_event(
                        index,
                        EventType::Warning,
                        Reason::FailedPostStartHook,
                        message,
                        None,
                    );
                    let grace = self.spec.grace_period;
                    self.stop(
                        index,
                        grace,
                        grace.is_zero(),
                        Some("FailedPostStartHook".into()),
                    );
                }
            },
        }
    }

    fn probed(
        &mut self,
        index: usize,
        id: u64,
        kind: ProbeKind,
        failure: Option<String>,
        verdict: Option<bool>,
    ) {
        if self.shutdown.is_some() || self.instance(index, id).is_none() {
            return;
        }
        if let Some(why) = failure {
            self.container_event(
                index,
                EventType::Warning,
                Reason::Unhealthy,
                format!("{} probe failed: {why}", kind.name()),
                None,
            );
        }
        let Some(ok) = verdict else { return };
        let c = &mut self.containers[index];
        match (kind, ok) {
            (ProbeKind::Startup, true) => {
                c.started = true;
                self.container_event(
                    index,
                    EventType::Normal,
                    Reason::StartupSucceeded,
                    "Startup probe succeeded".into(),
                    None,
                );
                self.spawn_probes(index, &[ProbeKind::Liveness, ProbeKind::Readiness]);
            }
            (ProbeKind::Readiness, ready) => {
                c.ready = ready;
                let reason = if ready {
                    Reason::Ready
                } else {
                    Reason::NotReady
                };
                self.container_event(
                    index,
                    EventType::Normal,
                    reason,
                    format!(
                        "Readiness probe {}",
                        if ready { "succeeded" } else { "failed" }
                    ),
                    None,
                );
            }
            (_, false) => {
                let probe = if kind == ProbeKind::Startup {
                    &c.spec.startup
                } else {
                    &c.spec.liveness
                };
                let grace = probe
                    .as_ref()
                    .and_then(|p| p.grace)
                    .unwrap_or(self.spec.grace_period);
                let why = format!(
                    "failed {} probe, will be restarted",
                    kind.name().to_lowercase()
                );
                self.stop(index, grace, grace.is_zero(), Some(why));
            }
            (ProbeKind::Liveness, true) => {}
        }
    }

    /// Runs `command` like an exec probe, in a fresh instance of a running container, off the
    /// supervisor's task; the answer goes to `reply`.
    fn exec(
        &mut self,
        container: &str,
        command: Vec<String>,
        reply: oneshot::Sender<Result<(), String>>,
    ) {
        let sandbox = match self.containers.iter().find(|c| &*c.name == container) {
            None => Err(format!("no container named {container:?}")),
            Some(c) => match &c.instance {
                Some(i) if c.is_running() => Ok(i.sandbox.clone()),
                _ => Err(format!("container {container:?} is not running")),
            },
        };
        match sandbox {
            Ok(sandbox) => {
                tokio::spawn(async move {
                    let _ = reply.send(sandbox.exec(&command).await);
                });
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// The container counts as Running (its postStart hook, if any, returned): it is started
    /// and ready unless probes say otherwise, and its probes begin.
    fn running(&mut self, index: usize) {
        let c = &mut self.containers[index];
        if c.instance.is_none() {
            return;
        }
        c.state = State::Running {
            started_at: Timestamp::now(),
        };
        c.started = c.spec.startup.is_none();
        c.ready = c.started && c.spec.readiness.is_none();
        let name = c.name.clone();
        self.container_event(
            index,
            EventType::Normal,
            Reason::Started,
            format!("Started container {name}"),
            None,
        );
        if self.containers[index].spec.startup.is_some() {
            self.spawn_probes(index, &[ProbeKind::Startup]);
        } else {
            self.spawn_probes(index, &[ProbeKind::Liveness, ProbeKind::Readiness]);
        }
    }

    fn spawn_probes(&mut self, index: usize, kinds: &[ProbeKind]) {
        let c = &mut self.containers[index];
        let Some(instance) = &mut c.instance else {
            return;
        };
        for &kind in kinds {
            let probe = match kind {
                ProbeKind::Startup => &c.spec.startup,
                ProbeKind::Liveness => &c.spec.liveness,
                ProbeKind::Readiness => &c.spec.readiness,
            };
            let Some(probe) = probe.clone() else { continue };
            let target = probe::Target {
                index,
                id: instance.id,
                tx: self.tx.clone(),
            };
            let task = tokio::spawn(probe::worker(
                kind,
                probe,
                instance.sandbox.clone(),
                instance.started,
                target,
            ));
            instance.tasks.push(task.abort_handle());
        }
    }

    async fn start(&mut self, index: usize) {
        let now = Instant::now();
        let options = self.node.backoff;
        let pod = self.spec.name.clone();
        let c = &mut self.containers[index];
        if c.instance.is_some() || c.retry_at.is_some_and(|t| t > now) {
            return;
        }
        if let Some(finished) = c.last_exit().map(|t| t.finished) {
            if let Some(until) = c.backoff.wait_until(finished, now, &options) {
                let waiting = State::Waiting {
                    reason: "CrashLoopBackOff",
                    message: None,
                };
                if let State::Terminated(t) = std::mem::replace(&mut c.state, waiting) {
                    c.last_state = Some(t);
                }
                let delay = fmt_duration(until - finished);
                c.state = State::Waiting {
                    reason: "CrashLoopBackOff",
                    message: Some(format!(
                        "back-off {delay} restarting failed container={} pod={pod}",
                        c.name
                    )),
                };
                c.retry_at = Some(until);
                let message = format!(
                    "Back-off restarting failed container {} in pod {pod} (delay {delay})",
                    c.name
                );
                self.container_event(index, EventType::Warning, Reason::BackOff, message, None);
                return;
            }
            c.backoff.restarted(finished, now, &options);
        }
        c.retry_at = None;

        let image = match self.containers[index].preloaded.take() {
            Some(preloaded) => Ok(preloaded),
            None => self.load(index).await,
        };
        let c = &mut self.containers[index];
        let (image, pull) = match image {
            Ok(loaded) => loaded,
            Err(e) => {
                let finished = c.load_failed_at.unwrap_or(now);
                let until = c.load_backoff.wait_until(finished, now, &options);
                c.load_backoff.restarted(finished, now, &options);
                c.load_failed_at = Some(now);
                let until = until.unwrap_or(after(now, options.initial));
                c.retry_at = Some(until);
                let waiting = State::Waiting {
                    reason: "ImagePullBackOff",
                    message: Some(e.to_string()),
                };
                if let State::Terminated(t) = std::mem::replace(&mut c.state, waiting) {
                    c.last_state = Some(t);
                }
                let message = format!(
                    "Failed to load module: {e}; back-off {}",
                    fmt_duration(until - now)
                );
                self.container_event(index, EventType::Warning, Reason::Failed, message, None);
                return;
            }
        };
        c.load_failed_at = None;
        let path = c.spec.image.display().to_string();
        let message = match pull {
            Pull::Present => format!("Module {path:?} already loaded"),
            Pull::Cached => format!("Loaded module {path:?} from the compile cache"),
            Pull::Compiled(t) => format!(
                "Successfully compiled module {path:?} in {}",
                fmt_duration(t)
            ),
        };
        self.container_event(index, EventType::Normal, Reason::Pulled, message, None);

        let c = &mut self.containers[index];
        if c.runs > 0 {
            c.restart_count += 1;
        }
        let creating = State::Waiting {
            reason: "ContainerCreating",
            message: None,
        };
        if let State::Terminated(t) = std::mem::replace(&mut c.state, creating) {
            c.last_state = Some(t);
        }
        let (term_tx, term_rx) = watch::channel(false);
        let (kill_tx, kill_rx) = oneshot::channel();
        let labels_and_more = PodInfo {
            name: &self.spec.name,
            namespace: &self.spec.namespace,
            uid: &self.uid,
            labels: &self.spec.labels,
            annotations: &self.spec.annotations,
            node_name: &self.node.node_name,
            pod_ip: self.net.ip().to_string(),
        };
        let (env, argv) = resolve_env(&c.spec.env, &c.spec.argv, &labels_and_more);
        let sandbox = Arc::new(Sandbox {
            image,
            argv,
            env,
            preopens: c
                .spec
                .mounts
                .iter()
                .map(|m| Preopen {
                    host: self.volumes.mount_dir(m.volume, m.sub_path.as_deref()),
                    guest: m.path.clone(),
                    read_only: m.read_only
                        || matches!(self.spec.volumes[m.volume].source, VolumeSource::Files(_)),
                })
                .collect(),
            working_dir: c.spec.working_dir.clone(),
            budget: Budget::new(
                c.spec
                    .resources
                    .memory_limit
                    .unwrap_or(self.node.memory_limit as u64),
            ),
            cpu_share: c.spec.resources.cpu_share(),
            term: TermSignal(term_rx),
            kill: Default::default(),
            net: self.net.clone(),
            memory: self.memory.clone(),
        });
        let stdout = self.output.sink(&c.name, c.restart_count, Stream::Stdout);
        let stderr = self.output.sink(&c.name, c.restart_count, Stream::Stderr);
        self.instances += 1;
        let id = self.instances;
        c.instance = Some(Instance {
            id,
            sandbox: sandbox.clone(),
            started: Instant::now(),
            term: term_tx,
            kill: Some(kill_tx),
            deadline: None,
            stopping: false,
            stop_reason: None,
            pre_stop: HookState::NotRun,
            term_sent: None,
            kill_at: None,
            tasks: Vec::new(),
        });
        c.runs += 1;
        let name = c.name.clone();
        let post_start = c.spec.post_start.clone();
        self.container_event(
            index,
            EventType::Normal,
            Reason::Created,
            format!("Created container {name}"),
            None,
        );
        let tx = self.tx.clone();
        let main = sandbox.clone();
        tokio::spawn(async move {
            let exit = tokio::select! {
                exit = main.run(stdout, stderr) => exit,
                code = kill_rx => Exit::code(code.unwrap_or(EXIT_KILLED)),
            };
            let _ = tx.send(Msg::Exited { index, id, exit });
        });
        match post_start {
            // The container is not Running until its postStart hook returns.
            Some(handler) => {
                let (tx, timeout) = (self.tx.clone(), self.spec.grace_period.max(MIN_GRACE));
                let task = tokio::spawn(async move {
                    let result = probe::run_handler(&handler, &sandbox, timeout).await;
                    let _ = tx.send(Msg::Hook {
                        index,
                        id,
                        hook: HookKind::PostStart,
                        result,
                    });
                });
                if let Some(instance) = &mut self.containers[index].instance {
                    instance.tasks.push(task.abort_handle());
                }
            }
            None => self.running(index),
        }
    }

    async fn load(&self, index: usize) -> Result<(Arc<Image>, Pull), LoadError> {
        let path = self.containers[index].spec.image.clone();
        if let Some(image) = self.node.engine.loaded(&path) {
            return Ok((image, Pull::Present));
        }
        let node = self.node.clone();
        match tokio::task::spawn_blocking(move || node.engine.load(&path)).await {
            Ok(result) => result,
            Err(e) => Err(LoadError::Compile {
                path: self.containers[index].spec.image.clone(),
                message: e.to_string(),
            }),
        }
    }

    // ---- the sync loop -----------------------------------------------------------------------

    /// Decides and applies what should happen now, like the kubelet's `computePodActions`.
    async fn sync(&mut self) {
        let now = Instant::now();
        for index in 0..self.containers.len() {
            let Some(i) = &mut self.containers[index].instance else {
                continue;
            };
            if i.kill_at.is_some_and(|t| t <= now) {
                i.kill(EXIT_KILLED);
            } else if i.stopping && i.term_sent.is_none() && i.deadline.is_some_and(|d| d <= now) {
                // a preStop hook that outlived the grace period: TERM now, KILL 2 s later
                self.send_term(index);
            }
        }
        if self.shutdown.is_none() && self.volume_check.is_some_and(|t| now >= t) {
            self.volume_check = Some(now + VOLUME_CHECK);
            if let Some((name, used, limit)) = self.volumes.over_limit(&self.spec) {
                // The kubelet evicts at once (grace 0) for local storage.
                let message = format!(
                    "Usage of EmptyDir volume {name:?} exceeds the limit {limit} bytes ({used} bytes used)."
                );
                self.evict(message, Duration::ZERO);
            }
        }
        let admitted = self.admission == Admission::Admitted;
        if self.shutdown.is_none()
            && admitted
            && let Some(deadline) = self.spec.active_deadline
            && now >= after(self.started, deadline)
        {
            let message = format!(
                "Pod was active on the node longer than the specified deadline ({}s)",
                deadline.as_secs()
            );
            self.pod_event(
                EventType::Warning,
                Reason::DeadlineExceeded,
                message.clone(),
                None,
            );
            self.failure = Some(("DeadlineExceeded", message));
            self.begin_shutdown(ShutdownCause::DeadlineExceeded, self.spec.grace_period);
        }
        if self.shutdown.is_none() && admitted {
            self.start_containers().await;
            if self.init_failed() || (self.initialized && self.regulars_done()) {
                self.begin_shutdown(ShutdownCause::Completed, self.spec.grace_period);
            }
        }
        if self.shutdown.is_some() {
            self.stop_containers();
        }
        self.update_phase();
        self.update_conditions();
    }

    async fn start_containers(&mut self) {
        let policy = self.spec.restart_policy;
        if !self.initialized {
            for i in 0..self.containers.len() {
                let c = &self.containers[i];
                match c.role() {
                    Role::Regular => break,
                    Role::Init if c.succeeded() => continue,
                    Role::Init if c.is_running() => return,
                    Role::Init => {
                        let failed = c.last_exit().is_some();
                        if !(failed && policy == RestartPolicy::Never) {
                            self.start(i).await;
                        }
                        return;
                    }
                    Role::Sidecar => {
                        if !c.is_running() {
                            self.start(i).await;
                        }
                        // The next init container waits until the sidecar has started.
                        let c = &self.containers[i];
                        if !(c.is_running() && c.started) {
                            return;
                        }
                    }
                }
            }
            self.initialized = true;
            self.pod_event(
                EventType::Normal,
                Reason::Initialized,
                "All init containers have completed".into(),
                None,
            );
        }
        for i in 0..self.containers.len() {
            let c = &self.containers[i];
            if c.is_running() {
                continue;
            }
            let start = match (c.role(), c.last_exit()) {
                (Role::Init, _) => false,
                (Role::Sidecar, _) | (Role::Regular, None) => true,
                (Role::Regular, Some(t)) => restarts(policy, t.exit.code),
            };
            if start {
                self.start(i).await;
            }
        }
    }

    /// A regular init container failed and the pod's policy forbids restarting it.
    fn init_failed(&self) -> bool {
        self.spec.restart_policy == RestartPolicy::Never
            && self
                .containers
                .iter()
                .any(|c| c.role() == Role::Init && c.last_exit().is_some_and(|t| t.exit.code != 0))
    }

    /// Every regular container has run and will not run again.
    fn regulars_done(&self) -> bool {
        let policy = self.spec.restart_policy;
        self.containers
            .iter()
            .filter(|c| c.role() == Role::Regular)
            .all(|c| {
                !c.alive()
                    && c.last_exit()
                        .is_some_and(|t| !restarts(policy, t.exit.code))
            })
    }

    /// Stops containers during shutdown: the sidecars' preStop hooks all start at once; regular
    /// (and init) containers are stopped together; then the sidecars one by one in reverse
    /// order, each once every later one has exited, all within the pod's grace period.
    fn stop_containers(&mut self) {
        let Some(shutdown) = self.shutdown else {
            return;
        };
        let now = Instant::now();
        let remaining = shutdown.deadline.saturating_duration_since(now);
        for i in 0..self.containers.len() {
            let c = &mut self.containers[i];
            if c.role() == Role::Sidecar && c.spec.pre_stop.is_some() && !shutdown.force {
                if let Some(instance) = &mut c.instance
                    && instance.deadline.is_none()
                {
                    instance.deadline = Some(shutdown.deadline);
                }
                self.start_pre_stop(i);
            }
        }
        let mut others_alive = false;
        for i in 0..self.containers.len() {
            if self.containers[i].role() != Role::Sidecar && self.containers[i].alive() {
                others_alive = true;
                self.stop(i, remaining, shutdown.force, None);
            }
        }
        let deadline_passed = now >= shutdown.deadline;
        if others_alive && !deadline_passed {
            return;
        }
        for i in (0..self.containers.len()).rev() {
            if self.containers[i].role() == Role::Sidecar && self.containers[i].alive() {
                self.stop(i, remaining, shutdown.force, None);
                if !deadline_passed {
                    break;
                }
            }
        }
    }

    fn finished(&self) -> bool {
        self.shutdown.is_some() && self.containers.iter().all(|c| !c.alive())
    }

    fn next_deadline(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        for c in &self.containers {
            consider(c.retry_at);
            if let Some(i) = &c.instance {
                consider(i.kill_at);
                consider(i.deadline.filter(|_| i.stopping && i.term_sent.is_none()));
            }
        }
        match self.shutdown {
            Some(s) => consider(Some(s.deadline)),
            None => {
                if self.admission == Admission::Admitted {
                    consider(self.spec.active_deadline.map(|d| after(self.started, d)));
                }
                consider(self.volume_check);
            }
        }
        next
    }

    fn update_phase(&mut self) {
        let terminal = self.finished();
        let phase = match (&self.failure, self.shutdown) {
            (Some(_), _) => Phase::Failed,
            (None, Some(s)) if s.cause == ShutdownCause::Deleted && !terminal => self.phase,
            _ => status::phase(self.spec.restart_policy, &self.containers, terminal),
        };
        if phase != self.phase {
            self.phase = phase;
            self.pod_event(
                EventType::Normal,
                Reason::PhaseChanged,
                format!("Pod is {}", phase.as_str()),
                Some(phase),
            );
        }
    }

    fn update_conditions(&mut self) {
        if let Admission::Waiting { message, .. } = &self.admission {
            // Only the scheduler's verdict, as for a pod not bound to a node.
            let scheduled = message
                .clone()
                .map(|m| ("PodScheduled", cond(false, Some("Unschedulable"), Some(m))));
            self.set_conditions(scheduled.into_iter());
            return;
        }
        let phase = self.phase;
        let uninit = status::uninitialized(&self.containers);
        let initialized = self.initialized || uninit.is_empty();
        let initialized = if initialized {
            cond(
                true,
                (phase == Phase::Succeeded).then_some("PodCompleted"),
                None,
            )
        } else {
            cond(
                false,
                Some("ContainersNotInitialized"),
                Some(format!(
                    "containers with incomplete status: [{}]",
                    uninit.join(" ")
                )),
            )
        };
        let unready = status::unready(&self.containers);
        let containers_ready = match phase {
            Phase::Succeeded => cond(false, Some("PodCompleted"), None),
            Phase::Failed => cond(false, Some("PodFailed"), None),
            _ if unready.is_empty() => cond(true, None, None),
            _ => cond(
                false,
                Some("ContainersNotReady"),
                Some(format!(
                    "containers with unready status: [{}]",
                    unready.join(" ")
                )),
            ),
        };
        let gates_missing: Vec<&str> = self
            .spec
            .readiness_gates
            .iter()
            .map(String::as_str)
            .collect();
        let ready = if !containers_ready.status {
            containers_ready.clone()
        } else if !gates_missing.is_empty() {
            cond(
                false,
                Some("ReadinessGatesNotReady"),
                Some(format!(
                    "corresponding condition of pod readiness gate \"{}\" does not exist.",
                    gates_missing[0]
                )),
            )
        } else {
            cond(true, None, None)
        };
        let next = [
            ("PodReadyToStartContainers", cond(true, None, None)),
            ("Initialized", initialized),
            ("Ready", ready),
            ("ContainersReady", containers_ready),
            ("PodScheduled", cond(true, None, None)),
        ];
        let disruption = self.disruption.as_ref().map(|(reason, message)| {
            (
                "DisruptionTarget",
                cond(true, Some(reason), Some(message.clone())),
            )
        });
        self.set_conditions(next.into_iter().chain(disruption));
    }

    /// Records the conditions, keeping the transition time of those whose status is unchanged.
    fn set_conditions(&mut self, next: impl Iterator<Item = (&'static str, Condition)>) {
        for (kind, mut c) in next {
            match self.conditions.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, old)) => {
                    if old.status == c.status {
                        c.since = old.since;
                    }
                    *old = c;
                }
                None => self.conditions.push((kind, c)),
            }
        }
    }

    fn publish(&self, finished: bool, deleted: bool) {
        let time = |t: Timestamp| Some(Time(t));
        let conditions: Vec<k8s::PodCondition> = self
            .conditions
            .iter()
            .map(|(kind, c)| k8s::PodCondition {
                type_: (*kind).into(),
                status: if c.status { "True" } else { "False" }.into(),
                reason: c.reason.map(Into::into),
                message: c.message.clone(),
                last_transition_time: time(c.since),
                ..Default::default()
            })
            .collect();
        let statuses = |init: bool| {
            Some(
                self.containers
                    .iter()
                    .filter(|c| (c.role() != Role::Regular) == init)
                    .map(Container::status)
                    .collect(),
            )
        };
        let status = k8s::PodStatus {
            phase: Some(self.phase.as_str().into()),
            conditions: (!conditions.is_empty()).then_some(conditions),
            init_container_statuses: statuses(true),
            container_statuses: statuses(false),
            start_time: (self.admission == Admission::Admitted).then_some(Time(self.start_time)),
            nominated_node_name: match &self.admission {
                Admission::Waiting { nominated, .. } => nominated.clone(),
                Admission::Admitted => None,
            },
            qos_class: Some(self.spec.qos_class().into()),
            pod_ip: Some(self.net.ip().to_string()),
            pod_ips: Some(vec![k8s::PodIP {
                ip: self.net.ip().to_string(),
            }]),
            reason: self.failure.as_ref().map(|f| f.0.into()),
            message: self.failure.as_ref().map(|f| f.1.clone()),
            ..Default::default()
        };
        self.snapshot.send_replace(Snapshot {
            status,
            finished,
            deleted,
        });
    }

    fn cleanup(&mut self) {
        for c in &mut self.containers {
            if let Some(i) = &mut c.instance {
                i.kill(EXIT_KILLED);
            }
        }
        self.seat.release();
        self.volumes.remove(&self.paths.pod_dir, &self.uid);
        self.pod_event(
            EventType::Normal,
            Reason::Deleted,
            format!("Pod {} (uid {}) deleted", self.spec.name, self.uid),
            None,
        );
        self.publish(true, true);
        self.journal.close();
    }

    // ---- events ------------------------------------------------------------------------------

    fn pod_event(&self, kind: EventType, reason: Reason, message: String, phase: Option<Phase>) {
        self.journal.push(Event {
            time: now_micros(),
            pod: self.spec.name.clone(),
            container: None,
            role: None,
            kind,
            reason,
            message,
            exit_code: None,
            restart_count: None,
            phase: phase.map(Phase::as_str),
        });
    }

    fn container_event(
        &self,
        index: usize,
        kind: EventType,
        reason: Reason,
        message: String,
        exit_code: Option<i32>,
    ) {
        let c = &self.containers[index];
        self.journal.push(Event {
            time: now_micros(),
            pod: self.spec.name.clone(),
            container: Some(c.name.to_string()),
            role: Some(c.role().as_str()),
            kind,
            reason,
            message,
            exit_code,
            restart_count: Some(c.restart_count),
            phase: None,
        });
    }
}

/// Whether a regular container that exited with `code` is restarted under `policy`.
fn restarts(policy: RestartPolicy, code: i32) -> bool {
    match policy {
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => code != 0,
        RestartPolicy::Never => false,
    }
}

fn cond(status: bool, reason: Option<&'static str>, message: Option<String>) -> Condition {
    Condition {
        status,
        reason,
        message,
        since: Timestamp::now(),
    }
}

/// `t + d`, or a time about a century later when that cannot be represented: every deadline a
/// pod's numbers make is computed through this, so none can overflow.
pub(crate) fn after(t: Instant, d: Duration) -> Instant {
    t.checked_add(d.min(crate::spec::MAX_DURATION))
        .or_else(|| t.checked_add(Duration::from_secs(3600 * 24 * 365)))
        .unwrap_or(t)
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

/// A remaining grace period in whole seconds, rounded to the nearest.
fn whole_seconds(d: Duration) -> u64 {
    d.saturating_add(Duration::from_millis(500)).as_secs()
}

fn fmt_duration(d: Duration) -> String {
    if d.as_secs() >= 1 && d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else if d.as_millis() >= 1 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}µs", d.as_micros())
    }
}
