//! What comes back from a pod's instances: exits, hook and probe results, `exec` requests.

use std::sync::Arc;

use tokio::time::Instant;

use jiff::Timestamp;
use tokio::sync::oneshot;

use super::ContainerError;
use super::PodTask;
use super::container::{HookState, State, Terminated};
use super::probe::{HookKind, ProbeKind};
use crate::container::Exit;
use crate::events::{EventType, Reason};
use crate::spec::Role;

impl PodTask {
    /// Container `index`'s instance `id` ended `at`.
    pub(super) fn exited(&mut self, index: usize, id: u64, exit: Exit, at: Timestamp) {
        if self.instance(index, id).is_none() {
            return;
        }
        self.meters.ended(index);
        let c = &mut self.containers[index];
        c.instance = None;
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
            .filter(|_| exit.start_failed)
            .map(|detail| format!("Error: {detail}"));
        let mut exit = exit;
        if let Some(t) = c.spec.termination.clone() {
            let (name, instance) = (c.name.clone(), c.restart_count);
            let limit = crate::spec::TERMINATION_MESSAGE_MAX;
            match crate::volumes::termination_message(
                self.paths.pod_dir_path(),
                &name,
                &t.file,
                limit,
            ) {
                Some(text) => exit.message = Some(text),
                None if t.fallback_to_logs && code != 0 => self.fallback_to_logs(index, instance),
                None => {}
            }
        }
        let c = &mut self.containers[index];
        c.terminate(Terminated {
            exit,
            started_at,
            finished_at: at,
            finished: Instant::now(),
        });
        if let Some(message) = start_error {
            self.container_event(index, EventType::Warning, Reason::Failed, message, None);
        }
        let kind = if code == 0 {
            EventType::Normal
        } else {
            EventType::Warning
        };
        self.container_event_at(index, kind, Reason::Exited, message, Some(code), at);
    }

    /// `FallbackToLogsOnError` with an empty termination-message file: the last 80 lines (at
    /// most 2 KiB) of the instance's log become its message, read off the supervisor's task once
    /// the log is complete.
    fn fallback_to_logs(&self, index: usize, instance: i32) {
        let book = self.output.book();
        let name = self.containers[index].name.clone();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let mut logs = crate::Logs::open(book, &name, instance, true);
            let mut tail: std::collections::VecDeque<String> = std::collections::VecDeque::new();
            while let Some(line) = logs.next().await {
                tail.push_back(line.line);
                if tail.len() > 80 {
                    tail.pop_front();
                }
            }
            let mut text = tail.into_iter().collect::<Vec<_>>().join("\n");
            if text.len() > 2048 {
                let mut cut = text.len() - 2048;
                while !text.is_char_boundary(cut) {
                    cut += 1;
                }
                text = text[cut..].to_owned();
            }
            if !text.is_empty() {
                tx.send(super::Msg::TerminationMessage {
                    index,
                    instance,
                    text,
                });
            }
        });
    }

    /// The log's tail for an instance that ended with an empty termination message.
    pub(super) fn termination_message(&mut self, index: usize, instance: i32, text: String) {
        // The instance is the last to have ended: the current state, or the last state once
        // the container waits or runs again.
        let c = &mut self.containers[index];
        let t = match &mut c.state {
            State::Terminated(t) if c.restart_count == instance => Some(t),
            State::Waiting { .. } if c.restart_count == instance => c.last_state.as_mut(),
            _ if c.restart_count == instance + 1 => c.last_state.as_mut(),
            _ => None,
        };
        let Some(t) = t else { return };
        Arc::make_mut(t).exit.message = Some(text);
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
                        "postStart hook succeeded",
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
                    "Startup probe succeeded",
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
        pull: Option<Box<crate::spec::ImagePull>>,
        argv: Option<Vec<String>>,
    ) -> Result<(), ContainerError> {
        let index = self
            .containers
            .iter()
            .position(|c| &*c.name == container)
            .ok_or_else(|| ContainerError::NoSuchContainer(container.to_owned()))?;
        let c = &mut self.containers[index];
        let shown = |p: &Option<Box<crate::spec::ImagePull>>| p.as_ref().map(|p| p.shown.clone());
        if c.spec.image == image && shown(&c.spec.pull) == shown(&pull) {
            return Ok(());
        }
        let spec = Arc::make_mut(&mut c.spec);
        spec.image = image;
        spec.pull = pull;
        if let Some(argv) = argv {
            spec.argv = argv;
        }
        c.preloaded = None;
        c.pulled = None;
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
        reply: oneshot::Sender<Result<std::sync::Arc<crate::container::Sandbox>, ContainerError>>,
    ) {
        let sandbox = match self.containers.iter().find(|c| &*c.name == container) {
            None => Err(ContainerError::NoSuchContainer(container.to_owned())),
            Some(c) => match &c.instance {
                Some(i) if c.is_running() => Ok(i.sandbox.clone()),
                _ => Err(ContainerError::NotRunning(container.to_owned())),
            },
        };
        let _ = reply.send(sandbox);
    }
}
