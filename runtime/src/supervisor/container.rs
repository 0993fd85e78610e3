//! One container's record in the supervisor: its state as Kubernetes reports it, its restart
//! bookkeeping, and the handle of its running instance.

use std::sync::Arc;
use tokio::time::Instant;

use jiff::Timestamp;
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

use super::backoff::{Backoff, BackoffOptions};
use super::stopping::Stopping;
use crate::container::{Exit, Sandbox};
use crate::engine::{Image, Pull};
use crate::spec::{ContainerSpec, Role};

#[derive(Debug, Clone)]
pub(crate) struct Terminated {
    pub(crate) exit: Exit,
    pub(crate) started_at: Timestamp,
    pub(crate) finished_at: Timestamp,
    pub(crate) finished: Instant,
}

/// Why a container waits: the kubelet's `state.waiting.reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// Its instance is being made (its image pulled, its module loaded).
    ContainerCreating,
    /// A regular container while the pod's init containers run.
    PodInitializing,
    /// Its crash-loop backoff runs.
    CrashLoopBackOff,
    /// Its registry image was not pulled.
    PullFailed(PullFailure),
    /// Its image backoff runs, after a failed pull or a module that did not load.
    ImagePullBackOff,
}

/// Why a registry image was not pulled, as the kubelet tells them apart. (The kubelet's
/// `InvalidImageName` does not arise: a reference that does not parse is refused with the pod.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PullFailure {
    /// `ErrImagePull`: the registry failed or refused the pull.
    ErrImagePull,
    /// `ErrImageNeverPull`: not on the node, and the pull policy is `Never`.
    ErrImageNeverPull,
    /// `SignatureValidationFailed`: no signature the node's key accepts (CRI's
    /// `ErrSignatureValidationFailed`).
    SignatureValidationFailed,
}

impl Waiting {
    /// The reason's word in the container's status.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Waiting::ContainerCreating => "ContainerCreating",
            Waiting::PodInitializing => "PodInitializing",
            Waiting::CrashLoopBackOff => "CrashLoopBackOff",
            Waiting::PullFailed(PullFailure::ErrImagePull) => "ErrImagePull",
            Waiting::PullFailed(PullFailure::ErrImageNeverPull) => "ErrImageNeverPull",
            Waiting::PullFailed(PullFailure::SignatureValidationFailed) => {
                "SignatureValidationFailed"
            }
            Waiting::ImagePullBackOff => "ImagePullBackOff",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) enum State {
    Waiting {
        reason: Waiting,
        message: Option<String>,
    },
    Running {
        started_at: Timestamp,
    },
    Terminated(Arc<Terminated>),
}

/// Where an instance's postStart hook is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HookState {
    NotRun,
    Running,
    Done,
}

/// The handle of a running instance.
pub(crate) struct Instance {
    pub(crate) id: u64,
    pub(crate) sandbox: Arc<Sandbox>,
    pub(crate) started: Instant,
    pub(crate) kill: Option<oneshot::Sender<i32>>,
    /// Where it is in being stopped.
    pub(crate) stop: Stopping,
    /// Where its postStart hook is: the next regular container starts once it is done.
    pub(crate) post_start: HookState,
    /// Probe workers and hook runs of this instance, stopped with it.
    pub(crate) tasks: Vec<AbortHandle>,
}

impl Instance {
    /// Arms the guest's own kill clock (its epoch callback stops it then, beside the
    /// supervisor's timer for [`Stopping::kill_at`], whichever comes first).
    pub(crate) fn arm_kill(&self, at: Instant) {
        self.sandbox.kill.set(at.into_std());
    }

    /// Stops the instance at once with `code` (KILL, or TERM's default action).
    pub(crate) fn kill(&mut self, code: i32) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(code);
        }
    }

    /// Stops the probe workers (the pod is terminating, or the instance is gone).
    pub(crate) fn stop_tasks(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.stop_tasks();
    }
}

pub(crate) struct Container {
    /// The pod spec's, until an image change gives it one of its own.
    pub(crate) spec: Arc<ContainerSpec>,
    pub(crate) name: Arc<str>,
    pub(crate) state: State,
    pub(crate) last_state: Option<Arc<Terminated>>,
    pub(crate) restart_count: i32,
    pub(crate) started: bool,
    pub(crate) ready: bool,
    pub(crate) backoff: Backoff,
    /// Backoff for failures to load the module (the wasm `ImagePullBackOff`).
    pub(crate) load_backoff: Backoff,
    pub(crate) load_failed_at: Option<Instant>,
    /// When a waiting container may be started (backoff).
    pub(crate) retry_at: Option<Instant>,
    pub(crate) instance: Option<Instance>,
    pub(crate) runs: u64,
    /// The module as loaded when the pod was created, used by the first start.
    pub(crate) preloaded: Option<(Arc<Image>, Pull)>,
    /// A registry image's pull under way: it ends with the container (the pod gone, its
    /// pull is cancelled rather than left to outlive it).
    pub(crate) pulling: Option<PullTask>,
    /// The registry image it runs, and `runs` when it was pulled (boxed: most containers of a
    /// node run local modules).
    pub(crate) pulled: Option<Box<(crate::images::Resolved, u64)>>,
    /// Its image changed while the pod ran: it starts again with the new one, whatever the
    /// restart policy and without backoff (the kubelet's restart on a changed container spec).
    pub(crate) changed: bool,
}

impl Container {
    pub(crate) fn new(
        spec: Arc<ContainerSpec>,
        waiting_reason: Waiting,
        preloaded: Option<(Arc<Image>, Pull)>,
    ) -> Container {
        Container {
            name: spec.name.as_str().into(),
            spec,
            state: State::Waiting {
                reason: waiting_reason,
                message: None,
            },
            last_state: None,
            restart_count: 0,
            started: false,
            ready: false,
            backoff: Backoff::default(),
            load_backoff: Backoff::default(),
            load_failed_at: None,
            retry_at: None,
            instance: None,
            runs: 0,
            preloaded,
            pulling: None,
            pulled: None,
            changed: false,
        }
    }

    /// Continues from a lost instance numbered `restart_count` (the node's process ended while
    /// it ran): that instance counts as exited, and the next start is a restart.
    pub(crate) fn resume(&mut self, restart_count: i32) {
        let now = Timestamp::now();
        self.restart_count = restart_count;
        self.runs = 1;
        self.last_state = Some(Arc::new(Terminated {
            exit: Exit::lost(
                "The container could not be located when the node agent restarted".into(),
            ),
            started_at: now,
            finished_at: now,
            finished: Instant::now(),
        }));
    }

    /// The container waits to start (again) with `reason`: a terminated instance's end becomes
    /// its last state.
    pub(crate) fn wait(&mut self, reason: Waiting, message: Option<String>) {
        let waiting = State::Waiting { reason, message };
        if let State::Terminated(t) = std::mem::replace(&mut self.state, waiting) {
            self.last_state = Some(t);
        }
    }

    /// Its instance counts as Running (its postStart hook returned): started unless a startup
    /// probe is to say so, ready unless a readiness probe is.
    pub(crate) fn run(&mut self) {
        self.state = State::Running {
            started_at: Timestamp::now(),
        };
        self.started = self.spec.startup.is_none();
        self.ready = self.started && self.spec.readiness.is_none();
    }

    /// Its instance ended: neither started nor ready until the next one says so.
    pub(crate) fn terminate(&mut self, end: Terminated) {
        self.state = State::Terminated(Arc::new(end));
        self.ready = false;
        self.started = false;
    }

    /// Its image could not be pulled or loaded at `now`: the kubelet's image backoff (the delay
    /// doubling from one failure to the next); when it may be tried again.
    pub(crate) fn image_failed(&mut self, now: Instant, options: &BackoffOptions) -> Instant {
        let finished = self.load_failed_at.unwrap_or(now);
        let until = self.load_backoff.wait_until(finished, now, options);
        self.load_backoff.restarted(finished, now, options);
        self.load_failed_at = Some(now);
        let until = until.unwrap_or(super::after(now, options.initial));
        self.retry_at = Some(until);
        until
    }

    pub(crate) fn role(&self) -> Role {
        self.spec.role
    }

    pub(crate) fn is_running(&self) -> bool {
        matches!(self.state, State::Running { .. })
    }

    /// Whether an instance exists (running, or still in its postStart hook).
    pub(crate) fn alive(&self) -> bool {
        self.instance.is_some()
    }

    /// The newest terminated instance: the current state, or the last one while waiting.
    pub(crate) fn last_exit(&self) -> Option<&Terminated> {
        match &self.state {
            State::Terminated(t) => Some(t),
            State::Waiting { .. } => self.last_state.as_deref(),
            State::Running { .. } => None,
        }
    }

    pub(crate) fn succeeded(&self) -> bool {
        matches!(&self.state, State::Terminated(t) if t.exit.code == 0)
    }
}

/// A pull's task, aborted when dropped.
#[derive(Debug)]
pub(crate) struct PullTask(pub(crate) tokio::task::AbortHandle);

impl Drop for PullTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}
