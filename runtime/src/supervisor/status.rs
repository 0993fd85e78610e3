//! The pod's phase and conditions, computed from its containers the way the kubelet does
//! (`getPhase` and `pkg/kubelet/status/generate.go`).

use super::container::{Container, State};
use crate::spec::{RestartPolicy, Role};

/// A pod's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl Phase {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }
}

/// kubelet `getPhase`. `terminal` is true once the pod is being shut down for good.
pub(crate) fn phase(policy: RestartPolicy, containers: &[Container], terminal: bool) -> Phase {
    let (mut pending_inits, mut pending_sidecars, mut failed_inits) = (0, 0, 0);
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in containers {
        match (c.role(), &c.state) {
            (Role::Sidecar, _) => pending_sidecars += usize::from(!c.started),
            (Role::Init, State::Running { .. }) => pending_inits += 1,
            (Role::Init, State::Terminated(t)) => failed_inits += usize::from(t.exit.code != 0),
            (Role::Init, State::Waiting { .. }) => match &c.last_state {
                Some(t) => failed_inits += usize::from(t.exit.code != 0),
                None => pending_inits += 1,
            },
            (Role::Regular, State::Running { .. }) => running += 1,
            (Role::Regular, State::Terminated(t)) => {
                stopped += 1;
                succeeded += usize::from(t.exit.code == 0);
            }
            (Role::Regular, State::Waiting { .. }) => match c.last_state {
                Some(_) => stopped += 1,
                None => waiting += 1,
            },
        }
    }
    let regular_started = running + stopped > 0;
    if failed_inits > 0 && policy == RestartPolicy::Never {
        return Phase::Failed;
    }
    if (pending_inits > 0 || pending_sidecars > 0) && !regular_started {
        return Phase::Pending;
    }
    if waiting > 0 {
        return Phase::Pending;
    }
    if running > 0 {
        return Phase::Running;
    }
    if stopped > 0 {
        if terminal {
            return if stopped == succeeded {
                Phase::Succeeded
            } else {
                Phase::Failed
            };
        }
        return match policy {
            RestartPolicy::Always => Phase::Running,
            _ if stopped == succeeded => Phase::Succeeded,
            RestartPolicy::Never => Phase::Failed,
            RestartPolicy::OnFailure => Phase::Running,
        };
    }
    Phase::Pending
}

/// Names of the init containers that keep the pod from being initialized (empty: initialized).
pub(crate) fn uninitialized(containers: &[Container]) -> Vec<&str> {
    if containers
        .iter()
        .any(|c| c.role() == Role::Regular && (c.runs > 0))
    {
        return Vec::new();
    }
    containers
        .iter()
        .filter(|c| match c.role() {
            Role::Init => !c.succeeded(),
            Role::Sidecar => !c.started,
            Role::Regular => false,
        })
        .map(|c| &*c.name)
        .collect()
}

/// Names of the sidecars and regular containers that are not ready.
pub(crate) fn unready(containers: &[Container]) -> Vec<&str> {
    containers
        .iter()
        .filter(|c| c.role() != Role::Init && !c.ready)
        .map(|c| &*c.name)
        .collect()
}
