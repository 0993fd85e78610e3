//! The pod's status as its supervisor publishes it: a copy of the supervisor's own compact
//! state, made into the Kubernetes `PodStatus` when a reader asks for it.
//!
//! A sleeping pod keeps its published status for as long as it lives. Kept as a `PodStatus` (its
//! conditions and its containers' statuses as structs of optional strings, each string its own
//! allocation) it would hold about 2.6 KiB; kept as the supervisor's state it holds under 1 KiB,
//! the conditions being the supervisor's own list, shared. A read builds the `PodStatus`, which
//! costs what cloning a kept one would.

use std::net::IpAddr;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::Condition;
use super::container::{Container, State, Terminated};
use crate::events::Phase;
use crate::spec::{ContainerSpec, Role};

/// A pod's status, published.
#[derive(Debug, Clone)]
pub(crate) struct StatusView {
    pub(super) phase: Phase,
    pub(super) conditions: Arc<Vec<(&'static str, Condition)>>,
    pub(super) containers: Box<[ContainerView]>,
    /// Set once the node admitted the pod.
    pub(super) start_time: Option<Timestamp>,
    pub(super) nominated: Option<String>,
    pub(super) qos: &'static str,
    pub(super) pod_ip: IpAddr,
    pub(super) host_ip: IpAddr,
    /// Why the pod failed as a whole (a deadline, an eviction): reason and message.
    pub(super) failure: Option<Arc<(&'static str, String)>>,
}

/// One container's status, published.
#[derive(Debug, Clone)]
pub(crate) struct ContainerView {
    spec: Arc<ContainerSpec>,
    /// The digest reference of the registry image it runs, once pulled.
    image_id: Option<Box<str>>,
    state: State,
    last_state: Option<Arc<Terminated>>,
    restart_count: i32,
    started: bool,
    ready: bool,
}

impl ContainerView {
    pub(super) fn of(c: &Container) -> ContainerView {
        ContainerView {
            spec: c.spec.clone(),
            image_id: c.pulled.as_deref().map(|(r, _)| r.image_id.as_str().into()),
            state: c.state.clone(),
            last_state: c.last_state.clone(),
            restart_count: c.restart_count,
            started: c.started,
            ready: c.ready,
        }
    }

    fn status(&self) -> k8s::ContainerStatus {
        let spec = &self.spec;
        k8s::ContainerStatus {
            name: spec.name.clone(),
            image: match &spec.pull {
                Some(pull) => pull.shown.clone(),
                None => spec.image.display().to_string(),
            },
            image_id: match (&spec.pull, &self.image_id) {
                (Some(_), Some(id)) => id.to_string(),
                (Some(_), None) => String::new(),
                (None, _) => format!("file://{}", spec.image.display()),
            },
            state: Some(state(&self.state)),
            last_state: Some(
                self.last_state
                    .as_deref()
                    .map_or_else(Default::default, terminated),
            ),
            ready: self.ready,
            restart_count: self.restart_count,
            started: Some(self.started),
            ..Default::default()
        }
    }
}

impl StatusView {
    /// The Kubernetes `PodStatus` of this publication.
    pub(crate) fn status(&self) -> k8s::PodStatus {
        let time = |t: Timestamp| Some(Time(t));
        let conditions: Vec<k8s::PodCondition> = self
            .conditions
            .iter()
            .map(|(kind, c)| k8s::PodCondition {
                type_: (*kind).into(),
                status: if c.status { "True" } else { "False" }.into(),
                reason: c.reason.map(Into::into),
                message: c.message.as_deref().map(str::to_owned),
                last_transition_time: time(c.since),
                ..Default::default()
            })
            .collect();
        let statuses = |init: bool| {
            let listed = |c: &&ContainerView| (c.spec.role != Role::Regular) == init;
            Some(
                self.containers
                    .iter()
                    .filter(listed)
                    .map(ContainerView::status)
                    .collect(),
            )
        };
        k8s::PodStatus {
            phase: Some(self.phase.as_str().into()),
            conditions: (!conditions.is_empty()).then_some(conditions),
            init_container_statuses: statuses(true),
            container_statuses: statuses(false),
            start_time: self.start_time.map(Time),
            nominated_node_name: self.nominated.clone(),
            qos_class: Some(self.qos.into()),
            pod_ip: Some(self.pod_ip.to_string()),
            pod_ips: Some(vec![k8s::PodIP {
                ip: self.pod_ip.to_string(),
            }]),
            host_ip: Some(self.host_ip.to_string()),
            host_ips: Some(vec![k8s::HostIP {
                ip: self.host_ip.to_string(),
            }]),
            reason: self.failure.as_ref().map(|f| f.0.into()),
            message: self.failure.as_ref().map(|f| f.1.clone()),
            ..Default::default()
        }
    }
}

fn state(s: &State) -> k8s::ContainerState {
    match s {
        State::Waiting { reason, message } => k8s::ContainerState {
            waiting: Some(k8s::ContainerStateWaiting {
                reason: Some(reason.reason().into()),
                message: message.clone(),
            }),
            ..Default::default()
        },
        State::Running { started_at } => k8s::ContainerState {
            running: Some(k8s::ContainerStateRunning {
                started_at: Some(Time(*started_at)),
            }),
            ..Default::default()
        },
        State::Terminated(t) => terminated(t),
    }
}

fn terminated(t: &Terminated) -> k8s::ContainerState {
    k8s::ContainerState {
        terminated: Some(k8s::ContainerStateTerminated {
            exit_code: t.exit.code,
            reason: Some(t.exit.reason().into()),
            message: t.exit.message.clone(),
            started_at: Some(Time(t.started_at)),
            finished_at: Some(Time(t.finished_at)),
            ..Default::default()
        }),
        ..Default::default()
    }
}
