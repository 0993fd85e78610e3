//! Tests of `plan`.

use super::*;
use Action::*;

/// No instance, waiting for nothing.
const DOWN: Life = Life::Down {
    retry_at: None,
    pull_failed: false,
};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A container that never ran.
fn new(role: Role) -> ContainerState {
    ContainerState {
        role,
        life: DOWN,
        has_post_start: false,
        has_pre_stop: false,
        last_exit: None,
        succeeded: false,
        changed: false,
        backoff: Backoff::default(),
    }
}

/// A live instance at `phase`, not being stopped.
fn up(phase: Phase) -> Life {
    Life::Up { phase, stop: None }
}

/// A running, started instance being stopped.
fn stopping(due: Due) -> Life {
    Life::Up {
        phase: Phase::Running { started: true },
        stop: Some(due),
    }
}

fn running(role: Role) -> ContainerState {
    ContainerState {
        life: up(Phase::Running { started: true }),
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
        life: up(Phase::Running { started: false }),
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
                c.life = DOWN;
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
                c.life = Life::Down {
                    retry_at: Some(until),
                    pull_failed: false,
                };
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
        life: up(Phase::PostStart),
        ..hooked
    };
    let after_hook = ContainerState { ..running(Regular) };
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
        life: stopping(Due::default()),
        ..hooked
    };
    let gone = |role| ContainerState {
        life: DOWN,
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
        life: stopping(Due {
            term_due: Some(t + secs(3)),
            kill_at: None,
        }),
        ..running(Regular)
    };
    let termed = ContainerState {
        life: stopping(Due {
            kill_at: Some(t + secs(2)),
            term_due: None,
        }),
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
        life: Life::Down {
            retry_at: Some(t + secs(10)),
            pull_failed: true,
        },
        ..new(Regular)
    };
    let mut state = initialized(RestartPolicy::Always, vec![waiting]);
    assert_eq!(plan(&state, t), [ImageBackOff(0)]);
    state.containers[0].life = Life::Down {
        retry_at: Some(t + secs(10)),
        pull_failed: false,
    };
    assert_eq!(plan(&state, t), []);
    assert_eq!(plan(&state, t + secs(10)), [Start(0)]);
    state.volume_check = Some(t + secs(1));
    assert_eq!(next_wake(&state), Some(t + secs(1)));
    assert_eq!(plan(&state, t + secs(1)), [CheckVolumes]);
}
