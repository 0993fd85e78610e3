//! Stopping: deletion and eviction start the pod's shutdown; each container gets its preStop
//! hook, then TERM, then KILL when its grace period ends; sidecars stop last, in reverse order.

use std::time::Duration;

use tokio::time::Instant;

use super::probe::HookKind;
use super::stopping::Step;
use super::{PodTask, Shutdown, ShutdownCause, after};
use crate::container::{EXIT_KILLED, EXIT_TERMINATED};
use crate::events::{EventType, Reason};

impl PodTask {
    pub(super) fn delete(&mut self, grace: Option<Duration>) {
        let grace = grace.unwrap_or(self.spec.grace_period);
        let now = Instant::now();
        match &mut self.shutdown {
            // The grace period can be shortened while terminating, never lengthened.
            Some(s) => {
                s.deleted = true;
                if after(now, grace) < s.deadline {
                    s.deadline = after(now, grace);
                    s.force |= grace.is_zero();
                    let force = s.force;
                    for i in 0..self.containers.len() {
                        if self.containers[i]
                            .instance
                            .as_ref()
                            .is_some_and(|inst| inst.stop.deadline().is_some())
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
                if let Some(s) = &mut self.shutdown {
                    s.deleted = true;
                }
            }
        }
    }

    /// Fails the pod with reason `Evicted` and stops it within `grace`.
    pub(super) fn evict(&mut self, message: String, grace: Duration) {
        if self.shutdown.is_some() {
            return;
        }
        self.pod_event(EventType::Warning, Reason::Evicted, message.clone(), None);
        self.disruption = Some(Box::new(("TerminationByKubelet", message.clone())));
        self.failure = Some(std::sync::Arc::new(("Evicted", message)));
        self.begin_shutdown(ShutdownCause::Evicted, grace);
    }

    pub(super) fn begin_shutdown(&mut self, cause: ShutdownCause, grace: Duration) {
        if self.shutdown.is_some() {
            return;
        }
        self.seat.leaving();
        self.shutdown = Some(Shutdown {
            cause,
            deadline: after(Instant::now(), grace),
            force: grace.is_zero(),
            deleted: false,
            released: false,
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
                    "Pod is terminating",
                    None,
                );
            }
        }
    }

    /// A sidecar's preStop hook starts with the pod's shutdown, before its turn to stop.
    pub(super) fn early_pre_stop(&mut self, index: usize) {
        let Some(shutdown) = self.shutdown else {
            return;
        };
        if let Some(instance) = &mut self.containers[index].instance
            && instance.stop.start_early_pre_stop(shutdown.deadline)
        {
            self.start_pre_stop(index);
        }
    }

    /// Stops a container within `grace`: its preStop hook first (bounded by the grace period),
    /// then TERM, then KILL when the grace period is over, never sooner than 2 s after TERM.
    /// `force` kills at once. Called again, it can only shorten the grace period.
    pub(super) fn stop(
        &mut self,
        index: usize,
        grace: Duration,
        force: bool,
        reason: Option<String>,
    ) {
        let now = Instant::now();
        let has_pre_stop = self.containers[index].spec.pre_stop.is_some();
        let Some(instance) = &mut self.containers[index].instance else {
            return;
        };
        match instance
            .stop
            .request(after(now, grace), reason, has_pre_stop, force)
        {
            Step::Kill => {
                instance.kill(EXIT_KILLED);
                // As the kubelet does for a zero grace period: the container is stopped at
                // once, and the event still says so.
                self.killing(index, Duration::ZERO);
            }
            Step::KillAt(at) => instance.arm_kill(at),
            Step::StartPreStop => self.start_pre_stop(index),
            Step::SendTerm => self.send_term(index),
            Step::WaitForHook | Step::Nothing => {}
        }
    }

    /// Runs the container's preStop hook, bounded by its grace period.
    pub(super) fn start_pre_stop(&mut self, index: usize) {
        let Some(handler) = self.containers[index].spec.pre_stop.as_deref().cloned() else {
            return;
        };
        let Some(instance) = &self.containers[index].instance else {
            return;
        };
        let deadline = instance
            .stop
            .deadline()
            .unwrap_or_else(|| after(Instant::now(), self.spec.grace_period));
        let timeout = deadline.saturating_duration_since(Instant::now());
        self.run_hook(index, HookKind::PreStop, handler, timeout);
        self.container_event(
            index,
            EventType::Normal,
            Reason::PreStopHook,
            "Running preStop hook",
            None,
        );
    }

    /// Records `Killing` for container `index`, with the stop reason and the grace left.
    pub(super) fn killing(&mut self, index: usize, grace: Duration) {
        let c = &self.containers[index];
        let why = c
            .instance
            .as_ref()
            .and_then(|i| i.stop.reason())
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
    pub(super) fn send_term(&mut self, index: usize) {
        let now = Instant::now();
        let Some(instance) = &mut self.containers[index].instance else {
            return;
        };
        let handles_term = instance.sandbox.image.handles_term();
        let Some(remaining) = instance.stop.term(now, handles_term) else {
            return;
        };
        match instance.stop.kill_at() {
            Some(at) => {
                instance.sandbox.term.deliver();
                instance.arm_kill(at);
            }
            None => instance.kill(EXIT_TERMINATED),
        }
        self.killing(index, remaining);
    }

    pub(super) fn cleanup(&mut self) {
        for (index, c) in self.containers.iter_mut().enumerate() {
            if let Some(i) = &mut c.instance {
                i.kill(EXIT_KILLED);
            }
            self.meters.ended(index);
        }
        self.seat.release();
        self.volumes
            .remove(self.paths.made().then(|| &**self.paths.pod_dir_path()));
        self.pod_event(
            EventType::Normal,
            Reason::Deleted,
            format!("Pod {} (uid {}) deleted", self.spec.name, self.uid),
            None,
        );
        self.publish(true, true);
        self.journal.close();
    }
}

/// A remaining grace period in whole seconds, rounded to the nearest.
pub(super) fn whole_seconds(d: Duration) -> u64 {
    d.saturating_add(Duration::from_millis(500)).as_secs()
}
