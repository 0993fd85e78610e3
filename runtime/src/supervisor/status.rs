//! The pod's phase and conditions, computed from its containers the way the kubelet does
//! (`getPhase` and `pkg/kubelet/status/generate.go`).

use super::container::{Container, State};
use crate::events::Phase;
use crate::spec::{RestartPolicy, Role};

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

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use std::sync::Arc;

    use jiff::Timestamp;

    use super::*;
    use crate::container::Exit;
    use crate::spec::ContainerSpec;
    use crate::supervisor::container::{Terminated, Waiting};

    /// A container of `role` in a state written as: `w` waiting (never ran), `r` running, `0`/`1`
    /// terminated with that code, `w0`/`w1` waiting to restart after exiting with that code; a
    /// trailing `s` marks a sidecar or container as started.
    fn container(role: Role, state: &str) -> Container {
        let spec = ContainerSpec {
            name: "c".into(),
            field: "spec.containers[0]".into(),
            role,
            image: Default::default(),
            argv: Vec::new(),
            env: Vec::new(),
            mounts: Vec::new(),
            working_dir: None,
            ports: Vec::new(),
            startup: None,
            liveness: None,
            readiness: None,
            post_start: None,
            pre_stop: None,
            resources: Default::default(),
            termination: None,
            file_dirs: Vec::new(),
            pull: None,
            stdin: None,
        };
        let mut c = Container::new(Arc::new(spec), Waiting::ContainerCreating, None);
        let terminated = |code: i32| Terminated {
            exit: Exit::code(code),
            started_at: Timestamp::now(),
            finished_at: Timestamp::now(),
            finished: Instant::now(),
        };
        let started = state.ends_with('s');
        let state = state.trim_end_matches('s');
        match state {
            "w" => {}
            "r" => {
                c.state = State::Running {
                    started_at: Timestamp::now(),
                }
            }
            "0" | "1" => c.state = State::Terminated(Arc::new(terminated(state.parse().unwrap()))),
            "w0" | "w1" => c.last_state = Some(Arc::new(terminated(state[1..].parse().unwrap()))),
            other => panic!("state {other:?}"),
        }
        if c.last_state.is_some() || matches!(c.state, State::Terminated(_)) || state == "r" {
            c.runs = 1;
        }
        c.started = started;
        c
    }

    /// The kubelet's `getPhase`, row by row (sidecars included): init (`i`), sidecar (`s`) and
    /// regular (`c`) containers in their states, the restart policy, whether the pod is shutting
    /// down for good, and the phase.
    #[test]
    fn get_phase() {
        use Phase::*;
        use RestartPolicy::{Always, Never, OnFailure};
        /// (role, state) of each container, the policy, shutting down for good, the phase.
        type Row<'a> = (&'a [(&'a str, &'a str)], RestartPolicy, bool, Phase);
        let rows: &[Row] = &[
            (&[("c", "w")], Always, false, Pending),
            (&[("i", "r"), ("c", "w")], Always, false, Pending),
            (&[("i", "1"), ("c", "w")], Never, false, Failed),
            (&[("i", "w1"), ("c", "w")], OnFailure, false, Pending),
            (&[("i", "0"), ("c", "r")], Always, false, Running),
            (&[("s", "r"), ("c", "w")], Always, false, Pending),
            (&[("s", "rs"), ("c", "r")], Always, false, Running),
            (&[("s", "r"), ("c", "r")], Always, false, Running),
            (&[("s", "rs"), ("c", "0")], Never, false, Succeeded),
            (&[("c", "r"), ("c", "w")], Always, false, Pending),
            (&[("c", "0"), ("c", "0")], Never, false, Succeeded),
            (&[("c", "0"), ("c", "1")], Never, false, Failed),
            (&[("c", "r"), ("c", "1")], Never, false, Running),
            (&[("c", "1")], OnFailure, false, Running),
            (&[("c", "0")], OnFailure, false, Succeeded),
            (&[("c", "0")], Always, false, Running),
            (&[("c", "w1")], Always, false, Running),
            (&[("c", "0")], Always, true, Succeeded),
            (&[("c", "1")], Always, true, Failed),
            // A container waiting to restart counts as stopped but not as succeeded, whatever
            // its last exit (kubelet `getPhase`).
            (&[("c", "w0"), ("c", "0")], Always, true, Failed),
        ];
        for (i, (containers, policy, terminal, expected)) in rows.iter().enumerate() {
            let list: Vec<Container> = containers
                .iter()
                .map(|(role, state)| {
                    let role = match *role {
                        "i" => Role::Init,
                        "s" => Role::Sidecar,
                        _ => Role::Regular,
                    };
                    container(role, state)
                })
                .collect();
            assert_eq!(
                phase(*policy, &list, *terminal),
                *expected,
                "row {i}: {containers:?} {policy:?} terminal={terminal}"
            );
        }
    }

    #[test]
    fn initialized_and_ready_conditions_name_the_containers() {
        let mut init = container(Role::Init, "r");
        init.name = "setup".into();
        let mut side = container(Role::Sidecar, "r");
        side.name = "proxy".into();
        let regular = container(Role::Regular, "w");
        let list = [init, side, regular];
        assert_eq!(uninitialized(&list), ["setup", "proxy"]);
        assert_eq!(unready(&list), ["proxy", "c"]);
        let done = [container(Role::Init, "0"), container(Role::Regular, "r")];
        assert!(uninitialized(&done).is_empty());
    }
}
