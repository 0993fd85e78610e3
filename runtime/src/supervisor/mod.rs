//! The supervisor: one task per pod that gives its containers the kubelet's lifecycle.
//!
//! The pod's state is data (a [`Container`] record per container, the phase, the conditions and
//! an optional [`Shutdown`]); every change goes through [`PodTask::sync`], the analogue of the
//! kubelet's `computePodActions`, which is run after each message or timer. The task sleeps until
//! the next message (a container exited, a deletion) or the next deadline (a backoff ends, a grace
//! period runs out): an idle pod costs nothing.

mod backoff;
mod board;
mod container;
mod error;
mod messages;
mod plan;
mod probe;
mod pull;
mod report;
mod results;
mod start;
mod status;
mod stop;
mod stopping;
mod sync;
mod view;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::mpsc;
use tokio::time::Instant;

pub(crate) use crate::events::Phase;
pub use backoff::BackoffOptions;
pub(crate) use board::{Board, Snapshot};
use container::{Container, Instance, Waiting};
pub use error::ContainerError;
pub(crate) use messages::{Mailbox, Msg};
use probe::HookKind;

use crate::container::{CpuLimit, PodMeters};
use crate::engine::{Engine, Image, Pull};
use crate::events::{EventType, Journal, Message, Reason};
use crate::memory::{Budget, PodMemory};
use crate::network::publish::Published;
use crate::network::{NodeNetwork, PodNetwork};
use crate::output::{LogBook, PodOutput};
use crate::paths::PodPaths;
use crate::spec::{Handler, PodSpec, VolumeSource};
use crate::volumes::PodVolumes;

/// The kubelet's floor for the time between TERM and KILL (`minimumGracePeriodInSeconds`).
const MIN_GRACE: Duration = Duration::from_secs(2);

/// The pod's place in its node's admission, as its supervisor holds it: the node's admission
/// implements it, and the supervisor says through it when the pod leaves.
pub(crate) trait AdmissionSeat: Send + Sync {
    /// The pod is stopping for good: its room will be free soon (preemption waits for it).
    fn leaving(&self);
    /// The pod has stopped for good (or is deleted): its room is free.
    fn release(&self);
}

/// What a pod's supervisor needs from its node.
pub(crate) struct NodeContext {
    pub engine: Engine,
    /// The engine of host-network pods (their components' sockets are the host's), on a node
    /// that allows them.
    pub host_engine: Option<Engine>,
    /// Registry images.
    pub images: Arc<crate::images::Images>,
    /// `spec.nodeName` as the downward API shows it.
    pub node_name: String,
    /// The node's address: pods' `status.hostIP`, a host-network pod's IP.
    pub host_ip: std::net::IpAddr,
    pub network: NodeNetwork,
    pub backoff: BackoffOptions,
    pub memory_limit: usize,
    pub log_limits: crate::output::LogLimits,
}

impl NodeContext {
    /// The engine a pod's containers run on: the host-network one for a host-network pod (the
    /// node admitted it only if it has one).
    pub(crate) fn engine_for(&self, host_network: bool) -> &Engine {
        match (host_network, &self.host_engine) {
            (true, Some(host)) => host,
            _ => &self.engine,
        }
    }
}

/// A pod's own limits (`spec.resources.limits`), shared by its containers' instances.
#[derive(Default)]
struct PodLimits {
    memory: Option<Arc<Budget>>,
    cpu: Option<Arc<CpuLimit>>,
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

/// A pod's shutdown, once begun: every container stops by `deadline`.
#[derive(Debug, Clone, Copy)]
struct Shutdown {
    cause: ShutdownCause,
    deadline: Instant,
    /// Asked with a zero grace period: kill without TERM or hooks.
    force: bool,
    /// The pod was deleted (it goes once every container has stopped).
    deleted: bool,
    /// The node's admission knows the pod has stopped for good.
    released: bool,
}

#[derive(Debug, Clone, PartialEq)]
struct Condition {
    status: bool,
    reason: Option<&'static str>,
    message: Option<Box<str>>,
    since: Timestamp,
}

pub(crate) struct PodTask {
    spec: Arc<PodSpec>,
    node: Arc<NodeContext>,
    uid: Arc<str>,
    containers: Vec<Container>,
    phase: Phase,
    conditions: Arc<Vec<(&'static str, Condition)>>,
    start_time: Timestamp,
    started: Instant,
    shutdown: Option<Shutdown>,
    failure: Option<Arc<(&'static str, String)>>,
    /// Why the pod is being disrupted (the `DisruptionTarget` condition): reason, message.
    disruption: Option<Box<(&'static str, String)>>,
    rx: futures_channel::mpsc::UnboundedReceiver<Box<Msg>>,
    tx: Mailbox,
    journal: Arc<Journal>,
    board: Arc<Board>,
    output: PodOutput,
    volumes: PodVolumes,
    /// When size-limited volumes are measured next (none without a `sizeLimit`).
    volume_check: Option<Instant>,
    paths: PodPaths,
    instances: u64,
    net: Arc<PodNetwork>,
    memory: Arc<PodMemory>,
    /// The running containers' usage, read by the pod's handle.
    meters: Arc<PodMeters>,
    /// The pod-level limits its containers' draw from too.
    pod_limits: PodLimits,
    /// The pod's place in the node's admission.
    seat: Box<dyn AdmissionSeat>,
    /// Admitted, initialized.
    stage: Stage,
    /// The pod's host listeners, closed when the supervisor ends.
    _published: Published,
}

/// What a pod is made of besides its spec, prepared by the node.
pub(crate) struct PodSetup {
    pub uid: Arc<str>,
    /// The pod's directories, its own while the supervisor lives.
    pub paths: PodPaths,
    /// The containers' preloaded modules, in spec order (`None`: a registry image).
    pub images: Vec<Option<(Arc<Image>, Pull)>>,
    pub tap: Option<mpsc::Sender<crate::OutputLine>>,
    /// Restart counts of a resumed pod's containers (`PodOptions::resume`).
    pub resume: std::collections::BTreeMap<String, i32>,
    pub net: Arc<PodNetwork>,
    pub published: Published,
    pub memory: Arc<PodMemory>,
}

/// How far the pod has come: admitted by the node, then initialized (both sticky; a shutdown
/// keeps the stage it began in, which the status still shows).
#[derive(Debug, Clone, PartialEq)]
enum Stage {
    /// Not admitted by the node yet, or does not fit: `message` says why, `nominated` names the
    /// node when lower-priority pods are being preempted for it.
    Pending {
        message: Option<String>,
        nominated: Option<String>,
    },
    /// Admitted: init containers run in order.
    Initializing,
    /// Every init container has completed (and every sidecar started): the regular containers
    /// run.
    Initialized,
}

impl Stage {
    fn admitted(&self) -> bool {
        !matches!(self, Stage::Pending { .. })
    }

    fn initialized(&self) -> bool {
        *self == Stage::Initialized
    }
}

/// The pieces a caller keeps to talk to a started pod.
pub(crate) struct PodChannels {
    pub tx: Mailbox,
    pub journal: Arc<Journal>,
    pub board: Arc<Board>,
    pub logs: Arc<LogBook>,
    pub meters: Arc<PodMeters>,
}

/// Should the supervisor ever end without cleaning up (a panic), its watchers are not left
/// waiting: the event stream ends and the pod counts as finished and deleted.
impl Drop for PodTask {
    fn drop(&mut self) {
        self.journal.close();
        self.board.close();
    }
}

impl PodTask {
    /// The pod's IP as its status and the downward API show it: the node's for a host-network
    /// pod (its sockets are the host's), else its address on the pod network.
    fn pod_ip(&self) -> std::net::IpAddr {
        if self.spec.host_network {
            self.node.host_ip
        } else {
            std::net::IpAddr::V4(self.net.ip())
        }
    }

    /// Prepares the pod's sandbox (directories, volumes, log writer) and its supervisor, which
    /// [`PodTask::spawn`] starts.
    pub(crate) fn prepare(
        spec: Arc<PodSpec>,
        node: Arc<NodeContext>,
        setup: PodSetup,
        seat: Box<dyn AdmissionSeat>,
    ) -> std::io::Result<(PodTask, PodChannels)> {
        let PodSetup {
            uid,
            paths,
            images,
            tap,
            resume,
            net,
            published,
            memory,
        } = setup;
        let volumes = PodVolumes::prepare(&spec, &paths, &uid)?;
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
            Waiting::PodInitializing
        } else {
            Waiting::ContainerCreating
        };
        let containers: Vec<Container> = spec
            .containers
            .iter()
            .zip(images.into_iter().chain(std::iter::repeat(None)))
            .map(|(c, image)| {
                let mut c = Container::new(c.clone(), waiting, image);
                if let Some(&count) = resume.get(&c.spec.name) {
                    c.resume(count);
                }
                c
            })
            .collect();
        let (tx, rx) = Mailbox::new();
        let journal = Arc::new(Journal::new(&spec.name));
        let board = Arc::new(Board::default());
        let names = containers.iter().map(|c| c.name.clone()).collect();
        let output = PodOutput::start(paths.log_dir.clone(), names, tap, node.log_limits);
        // A resumed container's lost instance wrote all it will: its log is complete.
        for c in containers.iter().filter(|c| c.runs > 0) {
            output.ended(&c.name, c.restart_count);
        }
        let pod_limits = PodLimits {
            memory: spec.pod_resources.memory_limit.map(Budget::new),
            cpu: spec.pod_resources.pod_cpu_share().map(CpuLimit::new),
        };
        let mut task = PodTask {
            spec,
            node,
            uid,
            containers,
            phase: Phase::Pending,
            conditions: Arc::default(),
            start_time: Timestamp::now(),
            started: Instant::now(),
            shutdown: None,
            failure: None,
            disruption: None,
            rx,
            tx: tx.clone(),
            journal: journal.clone(),
            board: board.clone(),
            output,
            volume_check: limited.then(Instant::now),
            volumes,
            paths,
            instances: 0,
            net,
            memory,
            meters: Arc::default(),
            pod_limits,
            seat,
            stage: Stage::Pending {
                message: None,
                nominated: None,
            },
            _published: published,
        };
        task.update_conditions();
        task.publish(false, false);
        let channels = PodChannels {
            tx,
            journal,
            board,
            logs: task.output.book(),
            meters: task.meters.clone(),
        };
        Ok((task, channels))
    }

    /// The node admitted the pod: its containers may start.
    pub(crate) fn admit(&mut self) {
        self.stage = Stage::Initializing;
        self.start_time = Timestamp::now();
        self.started = Instant::now();
        self.update_conditions();
        self.publish(false, false);
    }

    /// Starts the supervisor.
    pub(crate) fn spawn(mut self) {
        // The task owns the supervisor and `run` borrows it: an `async fn` taking `self` would
        // keep it twice in every sleeping pod's task (as passed, and as moved into its body).
        crate::eager::spawn(async move { self.run().await });
    }

    async fn run(&mut self) {
        self.pod_event(
            EventType::Normal,
            Reason::PhaseChanged,
            Message::Phase,
            Some(Phase::Pending),
        );
        for message in self.spec.incomplete_volumes.clone() {
            self.pod_event(EventType::Warning, Reason::FailedMount, message, None);
        }
        loop {
            self.sync().await;
            let finished = self.finished();
            self.publish(finished, false);
            if finished
                && let Some(shutdown) = &mut self.shutdown
                && !std::mem::replace(&mut shutdown.released, true)
            {
                self.seat.release();
            }
            if finished && self.shutdown.is_some_and(|s| s.deleted) {
                break;
            }
            let deadline = self.next_wake();
            let msg = tokio::select! {
                msg = self.rx.recv() => msg,
                () = sleep_until(deadline) => continue,
            };
            let Ok(msg) = msg else { break };
            self.handle(*msg);
            while let Ok(msg) = self.rx.try_recv() {
                self.handle(*msg);
            }
        }
        self.cleanup();
    }

    /// Runs a lifecycle hook of container `index`'s live instance in the background, bounded by
    /// `timeout`; its result comes back as [`Msg::Hook`].
    fn run_hook(&mut self, index: usize, hook: HookKind, handler: Handler, timeout: Duration) {
        let tx = self.tx.clone();
        let Some(instance) = &mut self.containers[index].instance else {
            return;
        };
        let (sandbox, id) = (instance.sandbox.clone(), instance.id);
        let task = tokio::spawn(async move {
            let result = probe::run_handler(&handler, &sandbox, timeout).await;
            tx.send(Msg::Hook {
                index,
                id,
                hook,
                result,
            });
        });
        instance.tasks.push(task.abort_handle());
    }

    /// The instance `id` of container `index`, if it is still the live one.
    fn instance(&mut self, index: usize, id: u64) -> Option<&mut Instance> {
        self.containers[index]
            .instance
            .as_mut()
            .filter(|i| i.id == id)
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
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
