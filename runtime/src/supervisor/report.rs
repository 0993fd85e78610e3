//! What the supervisor tells the world: the phase and conditions it derives, the `PodStatus` it
//! publishes, and the events it records.

use jiff::Timestamp;

use super::container::Container;
use super::status;
use super::{Condition, PodTask, ShutdownCause, Snapshot, Stage};
use crate::events::Phase;
use crate::events::{EventType, Reason, Record};
use crate::spec::Role;
use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

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
                format!("Pod is {}", phase.as_str()),
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
        let disruption = self.disruption.as_ref().map(|(reason, message)| {
            (
                "DisruptionTarget",
                cond(true, Some(reason), Some(message.clone())),
            )
        });
        self.set_conditions(next.into_iter().chain(disruption));
    }

    /// Records the conditions, keeping the transition time of those whose status is unchanged.
    pub(super) fn set_conditions(&mut self, next: impl Iterator<Item = (&'static str, Condition)>) {
        let kinds = self.conditions.len();
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
        // A pod keeps its conditions for good, and gains new kinds only a few times in its
        // life: the list is kept to its size (five conditions would keep room for eight).
        if self.conditions.len() != kinds {
            self.conditions.shrink_to_fit();
        }
    }

    pub(super) fn publish(&self, finished: bool, deleted: bool) {
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
        // Sized exactly: collected through a filter, a list of one status (most pods) would
        // keep room for four, 2 KiB more for every pod the node holds.
        let statuses = |init: bool| {
            let listed = |c: &&Container| (c.role() != Role::Regular) == init;
            let mut list = Vec::with_capacity(self.containers.iter().filter(listed).count());
            list.extend(self.containers.iter().filter(listed).map(Container::status));
            Some(list)
        };
        let status = k8s::PodStatus {
            phase: Some(self.phase.as_str().into()),
            conditions: (!conditions.is_empty()).then_some(conditions),
            init_container_statuses: statuses(true),
            container_statuses: statuses(false),
            start_time: self.stage.admitted().then_some(Time(self.start_time)),
            nominated_node_name: match &self.stage {
                Stage::Pending { nominated, .. } => nominated.clone(),
                Stage::Initializing | Stage::Initialized => None,
            },
            qos_class: Some(self.spec.qos_class().into()),
            pod_ip: Some(self.pod_ip().to_string()),
            pod_ips: Some(vec![k8s::PodIP {
                ip: self.pod_ip().to_string(),
            }]),
            host_ip: Some(self.node.host_ip.to_string()),
            host_ips: Some(vec![k8s::HostIP {
                ip: self.node.host_ip.to_string(),
            }]),
            reason: self.failure.as_ref().map(|f| f.0.into()),
            message: self.failure.as_ref().map(|f| f.1.clone()),
            ..Default::default()
        };
        self.board.publish(Snapshot {
            status,
            finished,
            deleted,
        });
    }

    pub(super) fn pod_event(
        &self,
        kind: EventType,
        reason: Reason,
        message: String,
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
        message: String,
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
        message: String,
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
        message,
        since: Timestamp::now(),
    }
}
