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
    /// An instance exists: running, in its postStart hook, or stopping.
    pub alive: bool,
    /// The instance counts as Running (its postStart hook returned).
    pub running: bool,
    /// Its startup probe passed (or it has none) and it runs.
    pub started: bool,
    /// Its instance's postStart hook has not returned yet.
    pub in_post_start: bool,
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
    /// It may not start before this (crash-loop or image backoff).
    pub retry_at: Option<Instant>,
    /// It waits with `ErrImagePull`, which turns into `ImagePullBackOff` while it waits.
    pub pull_failed: bool,
    pub backoff: Backoff,
    /// Its instance is being stopped (a grace period runs, or its hook started early).
    pub stopping: bool,
    /// TERM was sent and KILL is due then (and not sent yet).
    pub kill_at: Option<Instant>,
    /// Its preStop hook outlived the grace period: TERM is due then.
    pub term_due: Option<Instant>,
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
        if c.kill_at.is_some_and(|t| t <= now) {
            actions.push(Action::Kill(i));
        } else if c.term_due.is_some_and(|t| t <= now) {
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
            Role::Init if c.alive => return false,
            Role::Init => {
                let failed = c.last_exit.is_some();
                if !(failed && pod.policy == RestartPolicy::Never) {
                    actions.extend(start_or_wait(pod, i, now));
                }
                return false;
            }
            Role::Sidecar => {
                if !c.alive {
                    actions.extend(start_or_wait(pod, i, now));
                }
                if !(c.running && c.started) {
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
        .any(|c| c.role == Role::Regular && c.in_post_start);
    for (i, c) in pod.containers.iter().enumerate() {
        if c.alive {
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
    if c.retry_at.is_some_and(|t| t > now) {
        return c.pull_failed.then_some(Action::ImageBackOff(index));
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
        if c.role == Role::Sidecar && c.has_pre_stop && !s.force && c.alive && !c.stopping {
            actions.push(Action::EarlyPreStop(i));
        }
    }
    let mut others_alive = false;
    for (i, c) in cs.iter().enumerate() {
        if c.role != Role::Sidecar && c.alive {
            others_alive = true;
            actions.push(Action::Stop(i));
        }
    }
    let deadline_passed = now >= s.deadline;
    if others_alive && !deadline_passed {
        return;
    }
    for (i, c) in cs.iter().enumerate().rev() {
        if c.role == Role::Sidecar && c.alive {
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
    let containers = pod
        .containers
        .iter()
        .flat_map(|c| [c.retry_at, c.kill_at, c.term_due]);
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
            !c.alive
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
mod tests {
    use super::*;
    use Action::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// A container that never ran.
    fn new(role: Role) -> ContainerState {
        ContainerState {
            role,
            alive: false,
            running: false,
            started: false,
            in_post_start: false,
            has_post_start: false,
            has_pre_stop: false,
            last_exit: None,
            succeeded: false,
            changed: false,
            retry_at: None,
            pull_failed: false,
            backoff: Backoff::default(),
            stopping: false,
            kill_at: None,
            term_due: None,
        }
    }

    fn running(role: Role) -> ContainerState {
        ContainerState {
            alive: true,
            running: true,
            started: true,
            ..new(role)
        }
    }

    fn exited(role: Role, code: i32, at: Instant) -> ContainerState {
        ContainerState {
            last_exit: Some((code, at)),
            succeeded: code == 0,
            ..new(role)
        }
    }

    fn pod(policy: RestartPolicy, containers: Vec<ContainerState>) -> PodState {
        PodState {
            containers,
            policy,
            admitted: true,
            initialized: false,
            shutdown: None,
            active_deadline: None,
            volume_check: None,
            grace_period: secs(30),
            backoff: BackoffOptions::default(),
        }
    }

    fn initialized(policy: RestartPolicy, containers: Vec<ContainerState>) -> PodState {
        PodState {
            initialized: true,
            ..pod(policy, containers)
        }
    }

    /// Init containers run one at a time, in order, each after the one before succeeded;
    /// the regular containers start once all have (and the pod is then Initialized).
    #[tokio::test(start_paused = true)]
    async fn init_containers_run_in_order() {
        use RestartPolicy::Always;
        use Role::{Init, Regular};
        let t = Instant::now();
        let rows: &[(&str, Vec<ContainerState>, &[Action])] = &[
            (
                "none ran",
                vec![new(Init), new(Init), new(Regular)],
                &[Start(0)],
            ),
            (
                "first runs",
                vec![running(Init), new(Init), new(Regular)],
                &[],
            ),
            (
                "first succeeded",
                vec![exited(Init, 0, t), new(Init), new(Regular)],
                &[Start(1)],
            ),
            (
                "both succeeded",
                vec![exited(Init, 0, t), exited(Init, 0, t), new(Regular)],
                &[Initialized, Start(2)],
            ),
            (
                "a failed init container restarts (first restart at once)",
                vec![exited(Init, 1, t), new(Init), new(Regular)],
                &[Start(0)],
            ),
        ];
        for (what, containers, expected) in rows {
            let state = pod(Always, containers.clone());
            assert_eq!(plan(&state, t), *expected, "{what}");
        }
        let mut state = pod(Always, vec![new(Init), new(Regular)]);
        state.admitted = false;
        assert_eq!(
            plan(&state, t),
            [],
            "nothing starts before the node admits the pod"
        );
    }

    /// With `restartPolicy: Never` a failed init container fails the pod: nothing else starts
    /// and the pod shuts down; under `OnFailure` it runs again.
    #[tokio::test(start_paused = true)]
    async fn a_failed_init_container_fails_the_pod_under_never() {
        use Role::{Init, Regular, Sidecar};
        let t = Instant::now();
        let containers = vec![running(Sidecar), exited(Init, 1, t), new(Regular)];
        let never = pod(RestartPolicy::Never, containers.clone());
        assert_eq!(plan(&never, t), [Complete, Stop(0)]);
        let on_failure = pod(RestartPolicy::OnFailure, containers);
        assert_eq!(plan(&on_failure, t), [Start(1)]);
        assert!(init_failed(&never) && !init_failed(&on_failure));
    }

    /// A sidecar (an init container with `restartPolicy: Always`) starts in its place among
    /// the init containers, and the next one waits until it has started (its startup probe
    /// passed); it restarts whatever the pod's policy, and does not hold the pod's completion.
    #[tokio::test(start_paused = true)]
    async fn sidecars_start_in_order_and_always_restart() {
        use RestartPolicy::Never;
        use Role::{Init, Regular, Sidecar};
        let t = Instant::now();
        let unstarted = ContainerState {
            started: false,
            ..running(Sidecar)
        };
        let rows: &[(&str, PodState, &[Action])] = &[
            (
                "the sidecar first",
                pod(Never, vec![new(Sidecar), new(Init), new(Regular)]),
                &[Start(0)],
            ),
            (
                "its startup probe has not passed",
                pod(Never, vec![unstarted, new(Init), new(Regular)]),
                &[],
            ),
            (
                "started: the init container next",
                pod(Never, vec![running(Sidecar), new(Init), new(Regular)]),
                &[Start(1)],
            ),
            (
                "a sidecar that exited restarts under Never",
                initialized(
                    Never,
                    vec![exited(Sidecar, 0, t), exited(Init, 0, t), running(Regular)],
                ),
                &[Start(0)],
            ),
            (
                "the regular container is done: the sidecar does not keep the pod",
                initialized(
                    Never,
                    vec![running(Sidecar), exited(Init, 0, t), exited(Regular, 0, t)],
                ),
                &[Complete, Stop(0)],
            ),
        ];
        for (what, state, expected) in rows {
            assert_eq!(plan(state, t), *expected, "{what}");
        }
    }

    /// The restart policy decides whether a regular container that exited runs again; a
    /// container whose image changed runs again whatever the policy, without backoff.
    #[tokio::test(start_paused = true)]
    async fn the_restart_policy_decides_and_a_changed_image_restarts() {
        use RestartPolicy::{Always, Never, OnFailure};
        use Role::Regular;
        let t = Instant::now();
        let mut crashing = exited(Regular, 1, t);
        crashing.backoff.restarted(t, t, &BackoffOptions::default());
        let changed = ContainerState {
            changed: true,
            ..crashing
        };
        let rows: &[(RestartPolicy, ContainerState, &[Action])] = &[
            (Always, exited(Regular, 0, t), &[Start(0)]),
            (OnFailure, exited(Regular, 0, t), &[Complete]),
            (OnFailure, exited(Regular, 1, t), &[Start(0)]),
            (Never, exited(Regular, 1, t), &[Complete]),
            (
                Always,
                crashing,
                &[BackOff {
                    index: 0,
                    until: t + secs(10),
                }],
            ),
            (Never, changed, &[Start(0)]),
        ];
        for (policy, c, expected) in rows {
            let state = initialized(*policy, vec![*c]);
            assert_eq!(plan(&state, t), *expected, "{policy:?} {c:?}");
        }
    }

    /// A container that exits at once, under `restartPolicy: Always`, driven through the plan:
    /// its starts come 0, 10, 20, 40, 80, 160, 300, 300 s apart (the first restart at once, then
    /// doubling to the cap); after a run longer than the reset time (601 s) it starts again at
    /// once, and the next delay is the first one again.
    #[tokio::test(start_paused = true)]
    async fn crash_loop_backoff_doubles_to_the_cap_and_resets() {
        let options = BackoffOptions::default();
        let mut state = initialized(RestartPolicy::Always, vec![new(Role::Regular)]);
        let t0 = Instant::now();
        let mut starts = Vec::new();
        while starts.len() < 11 {
            let now = Instant::now();
            let actions = plan(&state, now);
            let c = &mut state.containers[0];
            match actions.as_slice() {
                [Start(0)] => {
                    if let Some((_, finished)) = c.last_exit {
                        c.backoff.restarted(finished, now, &options);
                    }
                    c.retry_at = None;
                    starts.push((now - t0).as_secs());
                    // It runs 0 s, except the last run, which lasts past the reset time.
                    let ran = if starts.len() == 9 {
                        secs(601)
                    } else {
                        secs(0)
                    };
                    tokio::time::advance(ran).await;
                    c.last_exit = Some((1, Instant::now()));
                }
                &[BackOff { index: 0, until }] => {
                    c.retry_at = Some(until);
                    assert_eq!(plan(&state, now), [], "nothing to do while it waits");
                    assert_eq!(next_wake(&state), Some(until));
                    tokio::time::advance(until - now).await;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        let gaps: Vec<u64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps, [0, 10, 20, 40, 80, 160, 300, 300, 601, 10]);
    }

    /// A regular container's postStart hook holds the next regular container until it returns.
    #[tokio::test(start_paused = true)]
    async fn post_start_holds_the_next_container() {
        use Role::Regular;
        let t = Instant::now();
        let hooked = ContainerState {
            has_post_start: true,
            ..new(Regular)
        };
        let in_hook = ContainerState {
            alive: true,
            in_post_start: true,
            ..hooked
        };
        let after_hook = ContainerState {
            in_post_start: false,
            ..running(Regular)
        };
        let rows: &[(&str, ContainerState, &[Action])] = &[
            ("the hooked one starts alone", hooked, &[Start(0)]),
            ("its hook runs", in_hook, &[]),
            ("its hook returned", after_hook, &[Start(1)]),
            (
                "no hook: both together",
                new(Regular),
                &[Start(0), Start(1)],
            ),
        ];
        for (what, first, expected) in rows {
            let state = initialized(RestartPolicy::Always, vec![*first, new(Regular)]);
            assert_eq!(plan(&state, t), *expected, "{what}");
        }
    }

    /// `activeDeadlineSeconds`, counted from admission: at the deadline the pod fails and
    /// stops; nothing starts any more.
    #[tokio::test(start_paused = true)]
    async fn the_active_deadline_stops_the_pod() {
        use Role::Regular;
        let t = Instant::now();
        let mut state = initialized(
            RestartPolicy::Always,
            vec![running(Regular), exited(Regular, 1, t)],
        );
        state.active_deadline = Some(t + secs(5));
        assert_eq!(plan(&state, t + secs(4)), [Start(1)]);
        assert_eq!(next_wake(&state), Some(t + secs(5)));
        assert_eq!(plan(&state, t + secs(5)), [DeadlineExceeded, Stop(0)]);
        state.admitted = false;
        assert_eq!(
            plan(&state, t + secs(5)),
            [],
            "not admitted: no deadline yet"
        );
        assert_eq!(next_wake(&state), None);
    }

    /// The shutdown's order: the sidecars' preStop hooks start at once; regular containers
    /// stop together; the sidecars then stop one by one, last first; at the pod's deadline
    /// everything left stops. A zero grace period runs no hooks.
    #[tokio::test(start_paused = true)]
    async fn shutdown_stops_regulars_then_sidecars_in_reverse() {
        use Role::{Regular, Sidecar};
        let t = Instant::now();
        let hooked = ContainerState {
            has_pre_stop: true,
            ..running(Sidecar)
        };
        let hook_started = ContainerState {
            stopping: true,
            ..hooked
        };
        let gone = |role| ContainerState {
            alive: false,
            running: false,
            ..running(role)
        };
        let grace = Grace {
            deadline: t + secs(30),
            force: false,
        };
        let rows: &[(&str, Vec<ContainerState>, Grace, &[Action])] = &[
            (
                "first: hooks early, regulars",
                vec![hooked, running(Sidecar), running(Regular), running(Regular)],
                grace,
                &[EarlyPreStop(0), Stop(2), Stop(3)],
            ),
            (
                "regulars gone: the last sidecar",
                vec![hook_started, running(Sidecar), gone(Regular), gone(Regular)],
                grace,
                &[Stop(1)],
            ),
            (
                "then the one before",
                vec![hook_started, gone(Sidecar), gone(Regular), gone(Regular)],
                grace,
                &[Stop(0)],
            ),
            (
                "forced: no hooks",
                vec![hooked, running(Regular)],
                Grace {
                    deadline: t,
                    force: true,
                },
                &[Stop(1), Stop(0)],
            ),
        ];
        for (what, containers, grace, expected) in rows {
            let mut state = initialized(RestartPolicy::Always, containers.clone());
            state.shutdown = Some(*grace);
            assert_eq!(plan(&state, t), *expected, "{what}");
        }
        let mut state = initialized(
            RestartPolicy::Always,
            vec![hook_started, running(Sidecar), running(Regular)],
        );
        state.shutdown = Some(grace);
        assert_eq!(
            plan(&state, t + secs(30)),
            [Stop(2), Stop(1), Stop(0)],
            "at the deadline, all at once"
        );
        assert_eq!(next_wake(&state), Some(t + secs(30)));
    }

    /// A stopping instance gets TERM when its preStop hook outlives the grace period, and KILL
    /// when TERM's grace is over; the plan wakes for the earliest.
    #[tokio::test(start_paused = true)]
    async fn term_and_kill_come_at_their_times() {
        use Role::Regular;
        let t = Instant::now();
        let hook = ContainerState {
            stopping: true,
            term_due: Some(t + secs(3)),
            ..running(Regular)
        };
        let termed = ContainerState {
            stopping: true,
            kill_at: Some(t + secs(2)),
            ..running(Regular)
        };
        let mut state = initialized(RestartPolicy::Always, vec![hook, termed]);
        state.shutdown = Some(Grace {
            deadline: t + secs(30),
            force: false,
        });
        assert_eq!(next_wake(&state), Some(t + secs(2)));
        assert_eq!(plan(&state, t + secs(1)), [Stop(0), Stop(1)]);
        assert_eq!(plan(&state, t + secs(2)), [Kill(1), Stop(0), Stop(1)]);
        assert_eq!(
            plan(&state, t + secs(3)),
            [Term(0), Kill(1), Stop(0), Stop(1)]
        );
    }

    /// Image backoff: `ErrImagePull` turns `ImagePullBackOff` while the container waits; the
    /// pull is tried again when the backoff ends. Size-limited volumes are measured when due.
    #[tokio::test(start_paused = true)]
    async fn image_backoff_and_volume_checks() {
        use Role::Regular;
        let t = Instant::now();
        let waiting = ContainerState {
            retry_at: Some(t + secs(10)),
            pull_failed: true,
            ..new(Regular)
        };
        let mut state = initialized(RestartPolicy::Always, vec![waiting]);
        assert_eq!(plan(&state, t), [ImageBackOff(0)]);
        state.containers[0].pull_failed = false;
        assert_eq!(plan(&state, t), []);
        assert_eq!(plan(&state, t + secs(10)), [Start(0)]);
        state.volume_check = Some(t + secs(1));
        assert_eq!(next_wake(&state), Some(t + secs(1)));
        assert_eq!(plan(&state, t + secs(1)), [CheckVolumes]);
    }
}
