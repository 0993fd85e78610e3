//! What comes back from a pod's instances: exits, hook and probe results, `exec` requests.

use std::time::Instant;

use jiff::Timestamp;
use tokio::sync::oneshot;

use super::PodTask;
use super::container::{HookState, State, Terminated};
use super::probe::{HookKind, ProbeKind};
use crate::container::{EXIT_START_ERROR, Exit};
use crate::events::{EventType, Reason};
use crate::spec::Role;

impl PodTask {
    pub(super) fn exited(&mut self, index: usize, id: u64, exit: Exit) {
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

    pub(super) fn hook_done(
        &mut self,
        index: usize,
        id: u64,
        hook: HookKind,
        result: Result<(), String>,
    ) {
        let Some(instance) = self.instance(index, id) else {
            return;
        };
        if hook == HookKind::PostStart {
            instance.post_start = HookState::Done;
        }
        match hook {
            HookKind::PreStop => {
                let term_due = instance.stop.pre_stop_done();
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
                if term_due {
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

    pub(super) fn probed(
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

    /// Changes a container's module, as the kubelet acts on a changed container spec: a running
    /// regular container or sidecar is stopped (TERM, its grace period) and started again with
    /// the new module whatever the restart policy; an init container's change is kept for the
    /// pod's next start.
    pub(super) fn set_image(
        &mut self,
        container: &str,
        image: std::path::PathBuf,
    ) -> Result<(), String> {
        let index = self
            .containers
            .iter()
            .position(|c| &*c.name == container)
            .ok_or_else(|| format!("no container named {container:?}"))?;
        let c = &mut self.containers[index];
        if c.spec.image == image {
            return Ok(());
        }
        c.spec.image = image;
        c.preloaded = None;
        if c.role() == Role::Init || self.shutdown.is_some() {
            return Ok(());
        }
        c.changed = true;
        let why = format!("Container {container} definition changed, will be restarted");
        self.stop(index, self.spec.grace_period, false, Some(why));
        Ok(())
    }

    /// Runs `command` like an exec probe, in a fresh instance of a running container, off the
    /// supervisor's task; the answer goes to `reply`.
    pub(super) fn exec(
        &mut self,
        container: &str,
        reply: oneshot::Sender<Result<std::sync::Arc<crate::container::Sandbox>, String>>,
    ) {
        let sandbox = match self.containers.iter().find(|c| &*c.name == container) {
            None => Err(format!("no container named {container:?}")),
            Some(c) => match &c.instance {
                Some(i) if c.is_running() => Ok(i.sandbox.clone()),
                _ => Err(format!("container {container:?} is not running")),
            },
        };
        let _ = reply.send(sandbox);
    }
}
