//! The decision half of the sync step, as data: [`plan`] reads a [`PodState`] (plain facts about
//! the pod and its containers, no handles) and the time, and returns the [`Action`]s the kubelet
//! would take now, in order (its `computePodActions` returning `podActions`); the supervisor's
//! `sync` applies them. [`next_wake`] says when the state next needs a decision with no message
//! coming in. Being pure, both are table-tested below without a guest, on tokio's paused clock.

use std::time::Duration;

use tokio::time::Instant;

use super::after;
use super::backoff::{Backoff, BackoffOptions};
use crate::spec::{RestartPolicy, Role};

/// What the plan reads of one container.
#[derive(Debug, Clone, Copy)]
pub(super) struct ContainerState {
    pub role: Role,
    /// Whether it has an instance, and where that instance is.
    pub life: Life,
    /// It has a postStart hook (which holds the next regular container once it starts).
    pub has_post_start: bool,
    pub has_pre_stop: bool,
    /// The newest exit's code and when the supervisor saw it: its state, or its last state
    /// while it waits.
    pub last_exit: Option<(i32, Instant)>,
    /// Its current state is a success (`Terminated` with code 0).
    pub succeeded: bool,
    /// Its image changed: it starts again whatever the policy, without backoff.
    pub changed: bool,
    pub backoff: Backoff,
}

/// Whether a container has an instance, and where that instance is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Life {
    /// No instance: it never ran, or it exited.
    Down {
        /// It may not start before this (crash-loop or image backoff).
        retry_at: Option<Instant>,
        /// It waits with `ErrImagePull`, which turns `ImagePullBackOff` while it waits.
        pull_failed: bool,
    },
    /// An instance: where it is in starting, and in stopping if it is being stopped.
    Up { phase: Phase, stop: Option<Due> },
}

/// Where a live instance is in starting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Made, not Running yet.
    Starting,
    /// Its postStart hook runs (not Running until it returns).
    PostStart,
    /// It counts as Running; `started` once its startup probe passed (or it has none).
    Running { started: bool },
}

/// When TERM and KILL are due to a live instance being stopped (a grace period runs, or its
/// preStop hook started early).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Due {
    /// TERM was sent and KILL is due then (and not sent yet).
    pub kill_at: Option<Instant>,
    /// Its preStop hook outlived the grace period: TERM is due then.
    pub term_due: Option<Instant>,
}

impl ContainerState {
    /// An instance exists: starting, running, or stopping.
    fn alive(&self) -> bool {
        matches!(self.life, Life::Up { .. })
    }

    /// Its instance counts as Running and its startup probe passed.
    fn started(&self) -> bool {
        matches!(
            self.life,
            Life::Up {
                phase: Phase::Running { started: true },
                ..
            }
        )
    }

    fn in_post_start(&self) -> bool {
        matches!(
            self.life,
            Life::Up {
                phase: Phase::PostStart,
                ..
            }
        )
    }

    fn stop(&self) -> Option<Due> {
        match self.life {
            Life::Up { stop, .. } => stop,
            Life::Down { .. } => None,
        }
    }

    fn retry_at(&self) -> Option<Instant> {
        match self.life {
            Life::Down { retry_at, .. } => retry_at,
            Life::Up { .. } => None,
        }
    }
}

/// The pod's shutdown as the plan sees it: its grace period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Grace {
    /// Every container stops by then.
    pub deadline: Instant,
    /// A zero grace period: kill without TERM or hooks.
    pub force: bool,
}

/// What the plan reads of a pod.
#[derive(Debug, Clone)]
pub(super) struct PodState {
    pub containers: Vec<ContainerState>,
    pub policy: RestartPolicy,
    pub admitted: bool,
    pub initialized: bool,
    pub shutdown: Option<Grace>,
    /// `activeDeadlineSeconds` ends then (counted from admission).
    pub active_deadline: Option<Instant>,
    /// `emptyDir` size limits are measured next then.
    pub volume_check: Option<Instant>,
    /// `terminationGracePeriodSeconds`.
    pub grace_period: Duration,
    pub backoff: BackoffOptions,
}

/// One thing the supervisor does, decided by [`plan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    /// KILL the container's instance: its grace period is over.
    Kill(usize),
    /// Send TERM: its preStop hook outlived the grace period.
    Term(usize),
    /// Measure the size-limited `emptyDir` volumes (an eviction may follow).
    CheckVolumes,
    /// `activeDeadlineSeconds` passed: the pod fails and shuts down.
    DeadlineExceeded,
    /// The container waits for its crash-loop backoff to end, at `until`.
    BackOff { index: usize, until: Instant },
    /// The container waits out its image backoff: `ErrImagePull` turns `ImagePullBackOff`.
    ImageBackOff(usize),
    /// Start the container (pull its image if it needs one, load, launch).
    Start(usize),
    /// Every init container completed and every sidecar started.
    Initialized,
    /// No regular container will run again (or an init container failed for good): the pod
    /// shuts down.
    Complete,
    /// A sidecar's preStop hook starts with the pod's shutdown, before its turn to stop.
    EarlyPreStop(usize),
    /// Stop the container within what is left of the pod's grace period.
    Stop(usize),
}

/// What should happen now, in order.
pub(super) fn plan(pod: &PodState, now: Instant) -> Vec<Action> {
    let mut actions = Vec::new();
    for (i, c) in pod.containers.iter().enumerate() {
        let stop = c.stop().unwrap_or_default();
        if stop.kill_at.is_some_and(|t| t <= now) {
            actions.push(Action::Kill(i));
        } else if stop.term_due.is_some_and(|t| t <= now) {
            actions.push(Action::Term(i));
        }
    }
    let mut shutdown = pod.shutdown;
    let begin = |actions: &mut Vec<Action>, action| {
        actions.push(action);
        Some(Grace {
            deadline: after(now, pod.grace_period),
            force: pod.grace_period.is_zero(),
        })
    };
    if shutdown.is_none() && pod.volume_check.is_some_and(|t| now >= t) {
        actions.push(Action::CheckVolumes);
    }
    if shutdown.is_none() && pod.admitted && pod.active_deadline.is_some_and(|t| now >= t) {
        shutdown = begin(&mut actions, Action::DeadlineExceeded);
    }
    if shutdown.is_none() && pod.admitted {
        let initialized = pod.initialized || plan_init(pod, now, &mut actions);
        if initialized {
            if !pod.initialized {
                actions.push(Action::Initialized);
            }
            plan_restarts(pod, now, &mut actions);
        }
        if init_failed(pod) || (initialized && regulars_done(pod)) {
            shutdown = begin(&mut actions, Action::Complete);
        }
    }
    if let Some(s) = shutdown {
        plan_shutdown(pod, s, now, &mut actions);
    }
    actions
}

/// Init containers one at a time in order, sidecars started on the way (the next one waits
/// until the sidecar has started); true when every init container has completed.
fn plan_init(pod: &PodState, now: Instant, actions: &mut Vec<Action>) -> bool {
    for (i, c) in pod.containers.iter().enumerate() {
        match c.role {
            Role::Regular => break,
            Role::Init if c.succeeded => {}
            Role::Init if c.alive() => return false,
            Role::Init => {
                let failed = c.last_exit.is_some();
                if !(failed && pod.policy == RestartPolicy::Never) {
                    actions.extend(start_or_wait(pod, i, now));
                }
                return false;
            }
            Role::Sidecar => {
                if !c.alive() {
                    actions.extend(start_or_wait(pod, i, now));
                }
                if !c.started() {
                    return false;
                }
            }
        }
    }
    true
}

/// Once initialized: sidecars and regular containers that are not running start (again, as
/// the restart policy says); a regular container with a postStart hook holds the next until
/// the hook returns, as the kubelet's `startContainer` runs the hook inside the start.
fn plan_restarts(pod: &PodState, now: Instant, actions: &mut Vec<Action>) {
    let mut held = pod
        .containers
        .iter()
        .any(|c| c.role == Role::Regular && c.in_post_start());
    for (i, c) in pod.containers.iter().enumerate() {
        if c.alive() {
            continue;
        }
        let wanted = match (c.role, c.last_exit) {
            (Role::Init, _) => false,
            (Role::Sidecar, _) | (Role::Regular, None) => true,
            (Role::Regular, Some((code, _))) => c.changed || restarts(pod.policy, code),
        };
        if !wanted {
            continue;
        }
        if c.role == Role::Regular && held {
            return;
        }
        let action = start_or_wait(pod, i, now);
        held |= c.role == Role::Regular && c.has_post_start && action == Some(Action::Start(i));
        actions.extend(action);
    }
}

/// Start container `index` now, or say why it waits: a backoff (none for a changed image).
fn start_or_wait(pod: &PodState, index: usize, now: Instant) -> Option<Action> {
    let c = &pod.containers[index];
    if let Life::Down {
        retry_at: Some(at),
        pull_failed,
    } = c.life
        && at > now
    {
        return pull_failed.then_some(Action::ImageBackOff(index));
    }
    if !c.changed
        && let Some((_, finished)) = c.last_exit
        && let Some(until) = c.backoff.wait_until(finished, now, &pod.backoff)
    {
        return Some(Action::BackOff { index, until });
    }
    Some(Action::Start(index))
}

/// The shutdown's order: the sidecars' preStop hooks all start at once; regular (and init)
/// containers are stopped together; then the sidecars one by one in reverse order, each once
/// every later one has exited; at the deadline, everything left.
fn plan_shutdown(pod: &PodState, s: Grace, now: Instant, actions: &mut Vec<Action>) {
    let cs = &pod.containers;
    for (i, c) in cs.iter().enumerate() {
        if c.role == Role::Sidecar && c.has_pre_stop && !s.force && c.alive() && c.stop().is_none()
        {
            actions.push(Action::EarlyPreStop(i));
        }
    }
    let mut others_alive = false;
    for (i, c) in cs.iter().enumerate() {
        if c.role != Role::Sidecar && c.alive() {
            others_alive = true;
            actions.push(Action::Stop(i));
        }
    }
    let deadline_passed = now >= s.deadline;
    if others_alive && !deadline_passed {
        return;
    }
    for (i, c) in cs.iter().enumerate().rev() {
        if c.role == Role::Sidecar && c.alive() {
            actions.push(Action::Stop(i));
            if !deadline_passed {
                break;
            }
        }
    }
}

/// When the pod next needs a decision that no message will bring: a backoff ends, a kill or
/// TERM is due, the shutdown's deadline, the active deadline, the next volume measurement.
pub(super) fn next_wake(pod: &PodState) -> Option<Instant> {
    let containers = pod.containers.iter().flat_map(|c| {
        let stop = c.stop().unwrap_or_default();
        [c.retry_at(), stop.kill_at, stop.term_due]
    });
    let pod_wide = match pod.shutdown {
        Some(s) => [Some(s.deadline), None],
        None => [
            pod.active_deadline.filter(|_| pod.admitted),
            pod.volume_check,
        ],
    };
    containers.chain(pod_wide).flatten().min()
}

/// A regular init container failed and the pod's policy forbids restarting it.
fn init_failed(pod: &PodState) -> bool {
    pod.policy == RestartPolicy::Never
        && pod
            .containers
            .iter()
            .any(|c| c.role == Role::Init && c.last_exit.is_some_and(|(code, _)| code != 0))
}

/// Every regular container has run and will not run again.
fn regulars_done(pod: &PodState) -> bool {
    pod.containers
        .iter()
        .filter(|c| c.role == Role::Regular)
        .all(|c| {
            !c.alive()
                && !c.changed
                && c.last_exit
                    .is_some_and(|(code, _)| !restarts(pod.policy, code))
        })
}

/// Whether a regular container that exited with `code` is restarted under `policy`.
fn restarts(policy: RestartPolicy, code: i32) -> bool {
    match policy {
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => code != 0,
        RestartPolicy::Never => false,
    }
}

/// The kubelet's rules as tables: a pod's state in, the actions out. No guest runs; the clock
/// is tokio's, paused, so a test that waits out a backoff advances it instead of sleeping.
#[cfg(test)]
mod tests;
