//! The sync step, the acting half of the kubelet's `computePodActions` → `SyncPod`: after every
//! message or timer, the pod's state is read as data, [`plan`] decides, and each [`Action`] is
//! applied here; then the phase and conditions are recomputed.

use std::time::Duration;

use tokio::time::Instant;

use super::container::{Container, HookState};
use super::plan::{self, Action, ContainerState, Due, Grace, Life, Phase, PodState};
use super::{PodTask, ShutdownCause, Stage, VOLUME_CHECK, after};
use crate::container::EXIT_KILLED;
use crate::events::{EventType, Message, Reason};

impl PodTask {
    /// Decides and applies what should happen now. A start can open the way for the next
    /// decision (a sidecar that started lets the next init container start; an eviction found
    /// by a volume measurement stops everything), so the plan is made again after a pass that
    /// created an instance or began a shutdown — at most once per container, and twice more.
    pub(super) async fn sync(&mut self) {
        for _ in 0..self.containers.len() + 2 {
            let now = Instant::now();
            let actions = plan::plan(&self.state(), now);
            let (instances, shutdown) = (self.instances, self.shutdown.is_some());
            self.apply(&actions, now).await;
            if self.instances == instances && self.shutdown.is_some() == shutdown {
                break;
            }
        }
        self.update_phase();
        self.update_conditions();
    }

    /// When the pod next needs a decision that no message will bring.
    pub(super) fn next_wake(&self) -> Option<Instant> {
        plan::next_wake(&self.state())
    }

    /// The pod's state as the plan reads it.
    fn state(&self) -> PodState {
        PodState {
            containers: self.containers.iter().map(Container::plan_state).collect(),
            policy: self.spec.restart_policy,
            admitted: self.stage.admitted(),
            initialized: self.stage.initialized(),
            shutdown: self.shutdown.map(|s| Grace {
                deadline: s.deadline,
                force: s.force,
            }),
            active_deadline: self.spec.active_deadline.map(|d| after(self.started, d)),
            volume_check: self.volume_check,
            grace_period: self.spec.grace_period,
            backoff: self.node.backoff,
        }
    }

    async fn apply(&mut self, actions: &[Action], now: Instant) {
        let mut killed = false;
        for &action in actions {
            if killed && !matches!(action, Action::Kill(_)) {
                // The instances killed at their deadline were woken by their kill: let them
                // stop (drop their stores, report their exits) before this pod's status is
                // worked out. Deadlines of pods deleted together come together, and then the
                // guests stop first and the bookkeeping follows, instead of each kill waiting
                // behind every other pod's status.
                tokio::task::yield_now().await;
                killed = false;
            }
            match action {
                Action::Kill(index) => {
                    if let Some(i) = &mut self.containers[index].instance {
                        i.kill(EXIT_KILLED);
                        killed = true;
                    }
                }
                // A preStop hook that outlived the grace period: TERM now, KILL 2 s later.
                Action::Term(index) => self.send_term(index),
                Action::CheckVolumes => self.check_volumes(now),
                Action::DeadlineExceeded => self.deadline_exceeded(),
                Action::BackOff { index, until } => self.back_off(index, until, now),
                Action::ImageBackOff(index) => self.image_backoff(index),
                // Boxed: a start's future (a module's load, a pull's wait) is the largest of
                // the supervisor's, and a sleeping pod's task would keep room for it.
                Action::Start(index) => Box::pin(self.start(index, now)).await,
                Action::Initialized => {
                    self.stage = Stage::Initialized;
                    let message = Message::Initialized;
                    self.pod_event(EventType::Normal, Reason::Initialized, message, None);
                }
                Action::Complete => {
                    self.begin_shutdown(ShutdownCause::Completed, self.spec.grace_period);
                }
                Action::EarlyPreStop(index) => self.early_pre_stop(index),
                Action::Stop(index) => {
                    let Some(s) = self.shutdown else { continue };
                    let remaining = s.deadline.saturating_duration_since(now);
                    self.stop(index, remaining, s.force, None);
                }
            }
            if action == Action::CheckVolumes && self.shutdown.is_some() {
                // An eviction the plan could not foresee: decide again before starting more.
                break;
            }
        }
        if killed {
            tokio::task::yield_now().await;
        }
    }

    /// Measures the size-limited `emptyDir` volumes; one over its limit evicts the pod at once
    /// (grace 0), as the kubelet does for local storage.
    fn check_volumes(&mut self, now: Instant) {
        self.volume_check = Some(now + VOLUME_CHECK);
        if let Some((name, used, limit)) = self.volumes.over_limit(&self.spec) {
            let message = format!(
                "Usage of EmptyDir volume {name:?} exceeds the limit {limit} bytes ({used} bytes used)."
            );
            self.evict(message, Duration::ZERO);
        }
    }

    /// `activeDeadlineSeconds` passed: the pod fails with `DeadlineExceeded` and shuts down.
    fn deadline_exceeded(&mut self) {
        let Some(deadline) = self.spec.active_deadline else {
            return;
        };
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
        self.failure = Some(std::sync::Arc::new(("DeadlineExceeded", message)));
        self.begin_shutdown(ShutdownCause::DeadlineExceeded, self.spec.grace_period);
    }

    pub(super) fn finished(&self) -> bool {
        self.shutdown.is_some() && self.containers.iter().all(|c| !c.alive())
    }
}

impl Container {
    /// What the plan reads of this container.
    fn plan_state(&self) -> ContainerState {
        let instance = self.instance.as_ref();
        let life = match instance {
            None => Life::Down {
                retry_at: self.retry_at,
                pull_failed: self.pull_failed(),
            },
            Some(i) => Life::Up {
                phase: if i.post_start == HookState::Running {
                    Phase::PostStart
                } else if self.is_running() {
                    Phase::Running {
                        started: self.started,
                    }
                } else {
                    Phase::Starting
                },
                stop: (i.stop != super::stopping::Stopping::No).then(|| Due {
                    kill_at: i.kill.as_ref().and(i.stop.kill_at()),
                    term_due: i.stop.term_due(),
                }),
            },
        };
        ContainerState {
            role: self.role(),
            life,
            has_post_start: self.spec.post_start.is_some(),
            has_pre_stop: self.spec.pre_stop.is_some(),
            last_exit: self.last_exit().map(|t| (t.exit.code, t.finished)),
            succeeded: self.succeeded(),
            changed: self.changed,
            backoff: self.backoff,
        }
    }
}
