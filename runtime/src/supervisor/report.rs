//! What the supervisor tells the world: the phase and conditions it derives, the `PodStatus` it
//! publishes, and the events it records.

use jiff::Timestamp;

use std::sync::Arc;

use super::status;
use super::view::{ContainerView, StatusView};
use super::{Condition, PodTask, ShutdownCause, Snapshot, Stage};
use crate::events::Phase;
use crate::events::{EventType, Message, Reason, Record};

impl PodTask {
    pub(super) fn update_phase(&mut self) {
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
                Message::Phase,
                Some(phase),
            );
        }
    }

    pub(super) fn update_conditions(&mut self) {
        if let Stage::Pending { message, .. } = &self.stage {
            // Only the scheduler's verdict, as for a pod not bound to a node.
            let scheduled = message
                .clone()
                .map(|m| ("PodScheduled", cond(false, Some("Unschedulable"), Some(m))));
            self.set_conditions(scheduled.into_iter());
            return;
        }
        let phase = self.phase;
        let uninit = status::uninitialized(&self.containers);
        let initialized = self.stage.initialized() || uninit.is_empty();
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
        let disruption = self.disruption.as_deref().map(|(reason, message)| {
            (
                "DisruptionTarget",
                cond(true, Some(reason), Some(message.clone())),
            )
        });
        self.set_conditions(next.into_iter().chain(disruption));
    }

    /// Records the conditions, keeping the transition time of those whose status is unchanged.
    /// The list is shared with the published status: it is copied only when one changes.
    pub(super) fn set_conditions(&mut self, next: impl Iterator<Item = (&'static str, Condition)>) {
        let kinds = self.conditions.len();
        for (kind, mut c) in next {
            let old = self.conditions.iter().position(|(k, _)| *k == kind);
            if let Some(old) = old.map(|i| &self.conditions[i].1) {
                if old.status == c.status {
                    c.since = old.since;
                }
                if *old == c {
                    continue;
                }
            }
            let conditions = Arc::make_mut(&mut self.conditions);
            match old {
                Some(i) => conditions[i].1 = c,
                None => conditions.push((kind, c)),
            }
        }
        // A pod keeps its conditions for good, and gains new kinds only a few times in its
        // life: the list is kept to its size (five conditions would keep room for eight).
        if self.conditions.len() != kinds {
            Arc::make_mut(&mut self.conditions).shrink_to_fit();
        }
    }

    pub(super) fn publish(&self, finished: bool, deleted: bool) {
        let view = StatusView {
            phase: self.phase,
            conditions: self.conditions.clone(),
            containers: self.containers.iter().map(ContainerView::of).collect(),
            start_time: self.stage.admitted().then_some(self.start_time),
            nominated: match &self.stage {
                Stage::Pending { nominated, .. } => nominated.clone(),
                Stage::Initializing | Stage::Initialized => None,
            },
            qos: self.spec.qos_class(),
            pod_ip: self.pod_ip(),
            host_ip: self.node.host_ip,
            failure: self.failure.clone(),
        };
        self.board.publish(Snapshot {
            published: Some(view),
            finished,
            deleted,
        });
    }

    pub(super) fn pod_event(
        &self,
        kind: EventType,
        reason: Reason,
        message: impl Into<Message>,
        phase: Option<Phase>,
    ) {
        self.journal.push(Record {
            at: jiff::Timestamp::now(),
            container: None,
            kind,
            reason,
            message: message.into(),
            exit_code: None,
            restart_count: None,
            phase,
        });
    }

    pub(super) fn container_event(
        &self,
        index: usize,
        kind: EventType,
        reason: Reason,
        message: impl Into<Message>,
        exit_code: Option<i32>,
    ) {
        let now = jiff::Timestamp::now();
        self.container_event_at(index, kind, reason, message, exit_code, now);
    }

    /// A container's event of what happened `at` (an exit, stamped when the instance stopped).
    pub(super) fn container_event_at(
        &self,
        index: usize,
        kind: EventType,
        reason: Reason,
        message: impl Into<Message>,
        exit_code: Option<i32>,
        at: jiff::Timestamp,
    ) {
        let c = &self.containers[index];
        self.journal.push(Record {
            at,
            container: Some((c.name.clone(), c.role())),
            kind,
            reason,
            message: message.into(),
            exit_code,
            restart_count: Some(c.restart_count),
            phase: None,
        });
    }
}

pub(super) fn cond(
    status: bool,
    reason: Option<&'static str>,
    message: Option<String>,
) -> Condition {
    Condition {
        status,
        reason,
        message: message.map(String::into_boxed_str),
        since: Timestamp::now(),
    }
}
