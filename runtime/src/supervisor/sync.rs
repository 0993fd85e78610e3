//! The sync step, the analogue of the kubelet's `computePodActions`: after every message or
//! timer, decide what should run, start it, begin the shutdown when the pod is done, and
//! recompute the phase and conditions.

use std::time::{Duration, Instant};

use super::container::HookState;
use super::{PodTask, ShutdownCause, Stage, VOLUME_CHECK, after};
use crate::container::EXIT_KILLED;
use crate::events::{EventType, Reason};
use crate::spec::{RestartPolicy, Role};

impl PodTask {
    /// Decides and applies what should happen now, like the kubelet's `computePodActions`.
    pub(super) async fn sync(&mut self) {
        let now = Instant::now();
        let mut killed = false;
        for index in 0..self.containers.len() {
            let Some(i) = &mut self.containers[index].instance else {
                continue;
            };
            if i.stop.kill_at().is_some_and(|t| t <= now) {
                i.kill(EXIT_KILLED);
                killed = true;
            } else if i.stop.term_due().is_some_and(|d| d <= now) {
                // a preStop hook that outlived the grace period: TERM now, KILL 2 s later
                self.send_term(index);
            }
        }
        if killed {
            // The instance killed at its deadline was woken by its kill: let it stop (drop its
            // store, report its exit) before this pod's status is worked out. Deadlines of pods
            // deleted together come together, and then the guests stop first and the
            // bookkeeping follows, instead of each kill waiting behind every other pod's status.
            tokio::task::yield_now().await;
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
        let admitted = self.stage.admitted();
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
            if self.init_failed() || (self.stage.initialized() && self.regulars_done()) {
                self.begin_shutdown(ShutdownCause::Completed, self.spec.grace_period);
            }
        }
        if self.shutdown.is_some() {
            self.stop_containers();
        }
        self.update_phase();
        self.update_conditions();
    }

    pub(super) async fn start_containers(&mut self) {
        let policy = self.spec.restart_policy;
        if !self.stage.initialized() {
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
            self.stage = Stage::Initialized;
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
                (Role::Regular, Some(t)) => c.changed || restarts(policy, t.exit.code),
            };
            if start {
                // As the kubelet's `startContainer` runs the postStart hook inside the start,
                // a regular container starts only once the one before it is through its hook.
                if c.role() == Role::Regular && self.post_start_running() {
                    return;
                }
                self.start(i).await;
            }
        }
    }

    /// Some regular container's postStart hook has not returned yet.
    fn post_start_running(&self) -> bool {
        self.containers.iter().any(|c| {
            c.role() == Role::Regular
                && c.instance
                    .as_ref()
                    .is_some_and(|i| i.post_start == HookState::Running)
        })
    }

    /// A regular init container failed and the pod's policy forbids restarting it.
    pub(super) fn init_failed(&self) -> bool {
        self.spec.restart_policy == RestartPolicy::Never
            && self
                .containers
                .iter()
                .any(|c| c.role() == Role::Init && c.last_exit().is_some_and(|t| t.exit.code != 0))
    }

    /// Every regular container has run and will not run again.
    pub(super) fn regulars_done(&self) -> bool {
        let policy = self.spec.restart_policy;
        self.containers
            .iter()
            .filter(|c| c.role() == Role::Regular)
            .all(|c| {
                !c.alive()
                    && !c.changed
                    && c.last_exit()
                        .is_some_and(|t| !restarts(policy, t.exit.code))
            })
    }

    pub(super) fn finished(&self) -> bool {
        self.shutdown.is_some() && self.containers.iter().all(|c| !c.alive())
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        for c in &self.containers {
            consider(c.retry_at);
            if let Some(i) = &c.instance {
                consider(i.stop.kill_at());
                consider(i.stop.term_due());
            }
        }
        match self.shutdown {
            Some(s) => consider(Some(s.deadline)),
            None => {
                if self.stage.admitted() {
                    consider(self.spec.active_deadline.map(|d| after(self.started, d)));
                }
                consider(self.volume_check);
            }
        }
        next
    }
}

/// Whether a regular container that exited with `code` is restarted under `policy`.
pub(super) fn restarts(policy: RestartPolicy, code: i32) -> bool {
    match policy {
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => code != 0,
        RestartPolicy::Never => false,
    }
}
