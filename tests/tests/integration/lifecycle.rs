//! The kubelet's pod lifecycle, scenario by scenario, with real guests: each test states the
//! Kubernetes rule it checks.
//! Kubernetes' seconds become tens of milliseconds and the backoff is 100 ms doubling to 800 ms;
//! the orderings and ratios are Kubernetes'.

use std::time::Duration;

use wasmpod::Reason::*;
use wasmpod_tests::{
    TestNode, condition, container, is_running, remove, running, wait_for, waiting_reason,
};

const LIMIT: Duration = Duration::from_secs(20);

/// Kubernetes: init containers run one at a time, in order, before the regular container.
#[tokio::test]
async fn init_containers_run_one_at_a_time_in_order() {
    let node = TestNode::new();
    let (t, status) = node
        .run(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: s01 }
spec:
  restartPolicy: Never
  initContainers:
  - { name: i1, image: "{p1}", args: [sleep, "30"] }
  - { name: i2, image: "{p2}", args: [sleep, "30"] }
  - { name: i3, image: "{p1}", args: [sleep, "30"] }
  containers:
  - { name: r1, image: "{p1}", args: [sleep, "30"] }
"#,
            LIMIT,
        )
        .await;
    assert!(t.last("i1", Exited) < t.first("i2", Started), "{t}");
    assert!(t.last("i2", Exited) < t.first("i3", Started), "{t}");
    assert!(t.last("i3", Exited) < t.first("r1", Started), "{t}");
    for c in ["i1", "i2", "i3", "r1"] {
        assert_eq!(t.count(c, Started), 1, "{c} started once:\n{t}");
        assert_eq!(t.exit_codes(c), [0]);
    }
    assert!(t.pod_positions(Initialized)[0] < t.first("r1", Started));
    // The events' messages, as `kubectl describe pod` shows the kubelet's.
    let said = |container: Option<&str>, reason| {
        t.0.iter()
            .find(|e| e.container.as_deref() == container && e.reason == reason)
            .map(|e| e.message.as_str())
    };
    assert_eq!(
        said(None, Initialized),
        Some("All init containers have completed")
    );
    assert_eq!(said(Some("i2"), Created), Some("Created container i2"));
    assert_eq!(said(Some("r1"), Started), Some("Started container r1"));
    let phases: Vec<_> = t.0.iter().filter(|e| e.reason == PhaseChanged).collect();
    let phases: Vec<_> = phases.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(
        phases,
        ["Pod is Pending", "Pod is Running", "Pod is Succeeded"]
    );
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    assert_eq!(t.phases(), ["Pending", "Running", "Succeeded"]);
    assert_eq!(condition(&status, "Initialized").0, "True");
    assert_eq!(
        condition(&status, "Ready"),
        ("False".into(), Some("PodCompleted".into()), None)
    );
    assert_eq!(t.0.last().unwrap().reason, Deleted);
}

/// Kubernetes: a failed init container under Never fails the pod; the regular one never starts.
#[tokio::test]
async fn a_failed_init_container_under_never_fails_the_pod() {
    let node = TestNode::new();
    let (t, status) = node
        .run(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: s04 }
spec:
  restartPolicy: Never
  initContainers:
  - { name: i1, image: "{p1}", args: [sleep, "20", exit, "1"] }
  containers:
  - { name: r1, image: "{p1}", args: [print, never] }
"#,
            LIMIT,
        )
        .await;
    assert_eq!(t.exit_codes("i1"), [1]);
    assert_eq!(t.count("r1", Started), 0, "{t}");
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    assert_eq!(
        waiting_reason(&status, "r1").as_deref(),
        Some("PodInitializing")
    );
    let (s, reason, message) = condition(&status, "Initialized");
    assert_eq!(
        (s.as_str(), reason.as_deref()),
        ("False", Some("ContainersNotInitialized"))
    );
    assert_eq!(
        message.as_deref(),
        Some("containers with incomplete status: [i1]")
    );
}

/// Kubernetes: a failing init container under Always is restarted with backoff; the pod stays
/// Pending; later containers wait with `PodInitializing`; Initialized never goes back to False
/// once True (here: it never becomes True).
#[tokio::test]
async fn a_failing_init_container_under_always_restarts_with_backoff() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: s06 }
spec:
  initContainers:
  - { name: init1, image: "{p1}", args: [exit, "1"] }
  - { name: init2, image: "{p1}", args: [exit, "0"] }
  containers:
  - { name: run1, image: "{p1}", args: [sleep, "100000"] }
"#,
        )
        .await;
    let initialized_seen = std::cell::Cell::new(false);
    let status = wait_for(&pod, LIMIT, |s| {
        initialized_seen.set(initialized_seen.get() || condition(s, "Initialized").0 == "True");
        container(s, "init1").restart_count >= 3
    })
    .await;
    assert!(!initialized_seen.get());
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    for name in ["init2", "run1"] {
        assert_eq!(container(&status, name).restart_count, 0);
        assert_eq!(
            waiting_reason(&status, name).as_deref(),
            Some("PodInitializing")
        );
    }
    let (s, reason, message) = condition(&status, "Initialized");
    assert_eq!(
        (s.as_str(), reason.as_deref()),
        ("False", Some("ContainersNotInitialized"))
    );
    assert_eq!(
        message.as_deref(),
        Some("containers with incomplete status: [init1 init2]")
    );
    pod.delete(None);
    let t = wasmpod_tests::Timeline::collect(&pod).await;
    assert!(t.count("init1", BackOff) >= 2, "{t}");
    assert_eq!(t.count("init2", Started), 0);
    assert!(t.pod_positions(Initialized).is_empty(), "{t}");
}

/// Kubernetes: a failing regular container under Always restarts with the kubelet's
/// backoff: immediately, then initial, doubling to the cap, and waits in CrashLoopBackOff.
#[tokio::test]
async fn a_crashing_container_restarts_with_the_kubelets_backoff() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: s10 }
spec:
  containers:
  - { name: r1, image: "{p1}", args: [exit, "1"] }
"#,
        )
        .await;
    let waiting = wait_for(&pod, LIMIT, |s| {
        let c = container(s, "r1");
        c.restart_count >= 2 && c.state.as_ref().unwrap().waiting.is_some()
    })
    .await;
    let r1 = container(&waiting, "r1");
    let w = r1.state.as_ref().unwrap().waiting.as_ref().unwrap();
    assert_eq!(w.reason.as_deref(), Some("CrashLoopBackOff"));
    assert!(w.message.as_deref().unwrap().contains("back-off"), "{w:?}");
    assert_eq!(
        r1.last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        1
    );
    assert_eq!(
        waiting.phase.as_deref(),
        Some("Running"),
        "Always with a stopped container is Running"
    );
    wait_for(&pod, LIMIT, |s| container(s, "r1").restart_count >= 6).await;
    pod.delete(None);
    let t = wasmpod_tests::Timeline::collect(&pod).await;
    let exits = t.positions("r1", Exited);
    let starts = t.positions("r1", Started);
    // delays between an exit and the next start: 0, 100, 200, 400, 800, 800 ms
    let expected = [0, 100, 200, 400, 800, 800];
    for (n, want) in expected.iter().enumerate() {
        let got = t.between(exits[n], starts[n + 1]).as_millis() as i64;
        assert!(
            (got - want).abs() <= 60 || (*want == 0 && got < 60),
            "delay {n}: {got} ms, want {want} ms\n{t}"
        );
    }
    assert!(t.count("r1", BackOff) >= 5);
    let backoff = &t.0[t.first("r1", BackOff)];
    assert!(
        backoff
            .message
            .starts_with("Back-off restarting failed container r1"),
        "{}",
        backoff.message
    );
}

/// Kubernetes: inits are not re-run when the main container restarts. (Kubernetes' R1 exits
/// 255; a preview1 guest exits 125 here, since wasmtime traps on exit statuses of 126 and above.)
#[tokio::test]
async fn init_containers_do_not_run_again_when_the_main_one_restarts() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: s11 }
spec:
  restartPolicy: Always
  initContainers:
  - { name: i1, image: "{p1}", args: [sleep, "10"] }
  - { name: i2, image: "{p1}", args: [sleep, "10"] }
  - { name: i3, image: "{p1}", args: [sleep, "10"] }
  containers:
  - { name: r1, image: "{p1}", args: [sleep, "50", exit, "125"] }
"#,
        )
        .await;
    wait_for(&pod, LIMIT, |s| container(s, "r1").restart_count >= 3).await;
    pod.delete(None);
    let t = wasmpod_tests::Timeline::collect(&pod).await;
    for i in ["i1", "i2", "i3"] {
        assert_eq!(t.count(i, Started), 1, "{t}");
    }
    assert!(t.count("r1", Started) >= 3);
    assert!(
        t.exit_codes("r1").iter().take(3).all(|&c| c == 125),
        "{:?}\n{t}",
        t.exit_codes("r1")
    );
    assert!(t.last("i3", Exited) < t.first("r1", Started));
}

/// Kubernetes: inits and sidecars interleaved; sidecars run alongside the regular
/// container and are stopped after it; the pod Succeeds.
#[tokio::test]
async fn inits_and_sidecars_interleave_and_sidecars_stop_last() {
    let node = TestNode::new();
    let (t, status) = node
        .run(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: s14 }
spec:
  restartPolicy: Never
  initContainers:
  - { name: i1, image: "{p1}", args: [sleep, "20"] }
  - { name: s1, image: "{p1}", restartPolicy: Always, args: [sleep, "100000"] }
  - { name: i2, image: "{p1}", args: [sleep, "20"] }
  - { name: s2, image: "{p2}", restartPolicy: Always, args: [sleep, "100000"] }
  - { name: i3, image: "{p1}", args: [sleep, "20"] }
  containers:
  - { name: r1, image: "{p1}", args: [sleep, "20"] }
"#,
            LIMIT,
        )
        .await;
    assert!(t.first("i1", Exited) < t.first("s1", Started));
    assert!(t.first("s1", Started) < t.first("i2", Started));
    assert!(t.first("i2", Exited) < t.first("s2", Started));
    assert!(t.first("s2", Started) < t.first("i3", Started));
    assert!(t.first("i3", Exited) < t.first("r1", Started));
    // S1 and S2 run alongside R1 and are stopped only after it.
    assert!(t.first("r1", Exited) < t.first("s1", Killing), "{t}");
    assert!(t.first("r1", Exited) < t.first("s2", Killing), "{t}");
    assert_eq!(t.count("s1", Started), 1);
    assert_eq!(t.count("s2", Started), 1);
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let s1 = container(&status, "s1");
    assert_eq!(
        s1.state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        143,
        "TERM's default action"
    );
}

/// Kubernetes: a long-running sidecar does not keep the pod alive (N and OF).
#[tokio::test]
async fn a_sidecar_does_not_keep_the_pod_alive() {
    for policy in ["Never", "OnFailure"] {
        let node = TestNode::new();
        let (t, status) = node
            .run(
                &r#"
apiVersion: v1
kind: Pod
metadata: { name: s15 }
spec:
  restartPolicy: POLICY
  initContainers:
  - { name: s1, image: "{p1}", restartPolicy: Always, args: [sleep, "100000"] }
  containers:
  - { name: r1, image: "{p1}", args: [sleep, "20"] }
"#
                .replace("POLICY", policy),
                LIMIT,
            )
            .await;
        assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{policy}");
        assert_eq!(
            t.count("s1", Started),
            1,
            "{policy}: S1 never started again\n{t}"
        );
        assert!(t.first("r1", Exited) < t.first("s1", Killing));
    }
}

/// Kubernetes: a sidecar that exits is always restarted, whatever the pod's policy, and
/// its exit codes do not change the phase.
#[tokio::test]
async fn a_sidecar_is_always_restarted() {
    for (policy, code) in [("Never", "0"), ("OnFailure", "1"), ("Never", "1")] {
        let node = TestNode::new();
        let (t, status) = node
            .run(
                &r#"
apiVersion: v1
kind: Pod
metadata: { name: s17 }
spec:
  restartPolicy: POLICY
  initContainers:
  - { name: s1, image: "{p1}", restartPolicy: Always, args: [sleep, "50", exit, "CODE"] }
  - { name: i1, image: "{p1}", args: [sleep, "50"] }
  containers:
  - { name: r1, image: "{p1}", args: [sleep, "600"] }
"#
                .replace("POLICY", policy)
                .replace("CODE", code),
                LIMIT,
            )
            .await;
        assert!(t.first("s1", Started) < t.first("r1", Started));
        let restarted_after_r1 = t
            .positions("s1", Started)
            .into_iter()
            .any(|i| i > t.first("r1", Started));
        assert!(
            restarted_after_r1,
            "{policy}/{code}: S1 restarts after R1 started\n{t}"
        );
        assert_eq!(
            status.phase.as_deref(),
            Some("Succeeded"),
            "{policy}/{code}\n{t}"
        );
    }
}

/// Kubernetes (restartPolicy Always): the regular container is restarted too.
#[tokio::test]
async fn under_always_the_regular_container_restarts_too() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: s17a }
spec:
  restartPolicy: Always
  initContainers:
  - { name: s1, image: "{p1}", restartPolicy: Always, args: [sleep, "50", exit, "1"] }
  containers:
  - { name: r1, image: "{p1}", args: [sleep, "300"] }
"#,
        )
        .await;
    wait_for(&pod, LIMIT, |s| {
        container(s, "r1").restart_count >= 1 && container(s, "s1").restart_count >= 2
    })
    .await;
    pod.delete(None);
    let t = wasmpod_tests::Timeline::collect(&pod).await;
    assert!(
        t.positions("s1", Started)
            .into_iter()
            .any(|i| i > t.first("r1", Started)),
        "{t}"
    );
}

/// Kubernetes: sidecars shut down in reverse order, each after every later one exited.
#[tokio::test]
async fn sidecars_shut_down_in_reverse_order() {
    let node = TestNode::new();
    let (t, status) = node
        .run(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: s23 }
spec:
  restartPolicy: Never
  initContainers:
  - { name: s1, image: "{term}", restartPolicy: Always, args: [on-term, "0", "100", sleep, "100000"] }
  - { name: s2, image: "{term}", restartPolicy: Always, args: [on-term, "0", "100", sleep, "100000"] }
  - { name: s3, image: "{term}", restartPolicy: Always, args: [on-term, "0", "100", sleep, "100000"] }
  containers:
  - { name: r1, image: "{p1}", args: [sleep, "100"] }
"#,
            LIMIT,
        )
        .await;
    assert!(t.first("s1", Started) < t.first("s2", Started));
    assert!(t.first("s2", Started) < t.first("s3", Started));
    assert!(t.first("s3", Started) < t.first("r1", Started));
    let (r1, s3, s2, s1) = (
        t.first("r1", Exited),
        t.first("s3", Exited),
        t.first("s2", Exited),
        t.first("s1", Exited),
    );
    assert!(r1 < s3 && s3 < s2 && s2 < s1, "{t}");
    // each sidecar is TERMed only once the later one exited, so exits are ~100 ms apart
    assert!(
        t.first("s2", Killing) > s3 && t.first("s1", Killing) > s2,
        "{t}"
    );
    for (a, b) in [(s3, s2), (s2, s1)] {
        assert!(t.between(a, b) >= Duration::from_millis(90), "{t}");
    }
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    for s in ["s1", "s2", "s3"] {
        assert_eq!(t.exit_codes(s), [0], "{s} handled TERM and exited 0");
    }
}

/// Kubernetes: OnFailure with a failed container is Running (it restarts); Never fails;
/// Never with all succeeded is Succeeded; and a never-started container keeps the pod Pending.
#[tokio::test]
async fn the_pod_phase_follows_the_kubelets_table() {
    let node = TestNode::new();
    let yaml = |policy: &str, code: &str| {
        format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{ name: s46 }}
spec:
  restartPolicy: {policy}
  containers:
  - {{ name: a, image: "{{p1}}", args: [exit, "{code}"] }}
  - {{ name: b, image: "{{p1}}", args: [exit, "0"] }}
"#
        )
    };
    let (_, status) = node.run(&yaml("Never", "1"), LIMIT).await;
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    let (_, status) = node.run(&yaml("Never", "0"), LIMIT).await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let (_, status) = node.run(&yaml("OnFailure", "0"), LIMIT).await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));

    let pod = node.start(&yaml("OnFailure", "1")).await;
    let s = wait_for(&pod, LIMIT, |s| {
        container(s, "a").restart_count >= 1
            && container(s, "b")
                .state
                .as_ref()
                .unwrap()
                .terminated
                .is_some()
    })
    .await;
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(
        container(&s, "b").restart_count,
        0,
        "OnFailure does not restart a success"
    );
    pod.delete(None);
    let t = wasmpod_tests::Timeline::collect(&pod).await;
    assert_eq!(t.phases().first(), Some(&"Pending"));
}

/// Kubernetes: ContainersReady lists unready containers; readiness gates with no condition
/// keep Ready False.
#[tokio::test]
async fn containers_ready_lists_unready_containers_and_gates_hold_ready() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: s47 }
spec:
  readinessGates: [ { conditionType: "example.com/feature" } ]
  containers:
  - { name: a, image: "{p1}", args: [sleep, "100000"] }
  - { name: b, image: "{p1}", args: [exit, "1"] }
"#,
        )
        .await;
    let s = wait_for(&pod, LIMIT, |s| {
        container(s, "b").restart_count >= 1 && !container(s, "b").ready
    })
    .await;
    let (status, reason, message) = condition(&s, "ContainersReady");
    assert_eq!(
        (status.as_str(), reason.as_deref()),
        ("False", Some("ContainersNotReady"))
    );
    assert_eq!(
        message.as_deref(),
        Some("containers with unready status: [b]")
    );
    assert_eq!(condition(&s, "Ready").0, "False");
    assert_eq!(condition(&s, "PodReadyToStartContainers").0, "True");
    assert_eq!(condition(&s, "Initialized").0, "True");
    remove(&pod).await;

    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: s47b }
spec:
  readinessGates: [ { conditionType: "example.com/feature" } ]
  containers:
  - { name: a, image: "{p1}", args: [sleep, "100000"] }
"#,
        )
        .await;
    let s = wait_for(&pod, LIMIT, |s| condition(s, "ContainersReady").0 == "True").await;
    let (status, reason, message) = condition(&s, "Ready");
    assert_eq!(
        (status.as_str(), reason.as_deref()),
        ("False", Some("ReadinessGatesNotReady"))
    );
    assert!(message.unwrap().contains("example.com/feature"));
    remove(&pod).await;
}

/// activeDeadlineSeconds: the pod fails with DeadlineExceeded and its containers are stopped.
#[tokio::test]
async fn active_deadline_fails_the_pod() {
    let node = TestNode::new();
    let (t, status) = node
        .run(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: deadline }
spec:
  activeDeadlineSeconds: 1
  containers:
  - { name: a, image: "{p1}", args: [sleep, "100000"] }
"#,
            LIMIT,
        )
        .await;
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    assert_eq!(status.reason.as_deref(), Some("DeadlineExceeded"));
    let deadline = t.pod_positions(DeadlineExceeded)[0];
    let started = t.first("a", Started);
    let elapsed = t.between(started, deadline);
    assert!(
        elapsed >= Duration::from_millis(950) && elapsed < Duration::from_secs(10),
        "{elapsed:?}"
    );
    assert!(deadline < t.first("a", Exited));
}

/// A module that can no longer be loaded at restart leaves the container Waiting with
/// `ImagePullBackOff` and a message, retried with backoff; it is not started.
#[tokio::test]
async fn unloadable_module_waits_in_image_pull_backoff() {
    let node = TestNode::new();
    let image = node.dir.path().join("copy.wasm");
    std::fs::copy(wasmpod_tests::guests::AGNHOST_P1, &image).unwrap();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: pull }
spec:
  containers:
  - { name: a, image: copy.wasm, args: [sleep, "100", exit, "1"] }
"#,
        )
        .await;
    running(&pod, &["a"]).await;
    std::fs::write(&image, b"this is not wasm any more").unwrap();
    let s = wait_for(&pod, LIMIT, |s| {
        waiting_reason(s, "a").as_deref() == Some("ImagePullBackOff")
    })
    .await;
    let w = container(&s, "a").state.clone().unwrap().waiting.unwrap();
    assert!(w.message.unwrap().contains("not a WebAssembly module"));
    pod.delete(None);
    let t = wasmpod_tests::Timeline::collect(&pod).await;
    assert_eq!(t.count("a", Started), 1, "{t}");
    assert!(t.count("a", wasmpod::Reason::Failed) >= 1);
}

/// A pod update of a container's image (what `kubectl apply` of a new image does): the kubelet
/// stops that container and starts it again with the new module, whatever the restart policy;
/// the other containers run on.
#[tokio::test]
async fn a_new_image_restarts_that_container_whatever_the_policy() {
    let node = TestNode::new();
    let pod = node
        .start(
            &wasmpod_tests::PodYaml::new("reimaged")
                .never()
                .container(r#"{ name: c, image: "{term}", args: [print, one, on-term, "0", "10", sleep, "60000"] }"#)
                .container(r#"{ name: other, image: "{p1}", args: [sleep, "60000"] }"#)
                .build(),
        )
        .await;
    pod.wait_until(|s| is_running(s, "c") && is_running(s, "other"))
        .await;
    let new = std::path::Path::new(wasmpod_tests::guests::AGNHOST_P2);
    pod.set_image("c", new).await.unwrap();
    let status = tokio::time::timeout(
        LIMIT,
        pod.wait_until(|s| container(s, "c").restart_count == 1 && is_running(s, "c")),
    )
    .await
    .unwrap();
    let c = container(&status, "c");
    assert_eq!(c.image, new.display().to_string());
    // The old instance ended on TERM, by itself.
    let last = c.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(last.exit_code, 0);
    assert_eq!(container(&status, "other").restart_count, 0);
    let t = wasmpod_tests::Timeline::so_far(&pod).await;
    let killing = t.positions("c", Killing);
    assert_eq!(killing.len(), 1);
    assert!(
        t.0[killing[0]].message.contains("definition changed"),
        "{t:?}"
    );
    assert_eq!(
        pod.set_image("nope", new).await,
        Err(wasmpod::ContainerError::NoSuchContainer("nope".into()))
    );
    remove(&pod).await;
}

/// The kubelet's termination message: what a container writes to its `terminationMessagePath`
/// becomes `state.terminated.message`; with `FallbackToLogsOnError`, a failure that wrote none
/// gives the log's last lines; a new instance starts with an empty file.
#[tokio::test]
async fn termination_messages_come_from_the_file_or_the_log() {
    let node = TestNode::new();
    let yaml = wasmpod_tests::PodYaml::new("messages")
        .never()
        .container(r#"{ name: file, image: "{p1}", terminationMessagePolicy: File, args: [write, /dev/termination-log, "disk full", exit, "3"] }"#)
        .container(r#"{ name: custom, image: "{p2}", terminationMessagePath: /run/app/why, args: [write, /run/app/why, done well] }"#)
        .container(r#"{ name: logs, image: "{p1}", terminationMessagePolicy: FallbackToLogsOnError, args: [print, first, print, last words, exit, "2"] }"#)
        .container(r#"{ name: quiet, image: "{p1}", terminationMessagePolicy: FallbackToLogsOnError, args: [print, fine] }"#)
        .build();
    let pod = node.start(&yaml).await;
    let message = |s: &wasmpod::k8s_openapi::api::core::v1::PodStatus, c: &str| {
        container(s, c)
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.message.clone())
    };
    let status = wait_for(&pod, LIMIT, |s| {
        message(s, "logs").is_some() && s.phase.as_deref() == Some("Failed")
    })
    .await;
    assert_eq!(message(&status, "file").as_deref(), Some("disk full\n"));
    assert_eq!(message(&status, "custom").as_deref(), Some("done well\n"));
    assert_eq!(
        message(&status, "logs").as_deref(),
        Some("first\nlast words")
    );
    // Succeeded: no fallback to the log.
    assert_eq!(message(&status, "quiet"), None);
    pod.delete(None);
    pod.deleted().await;

    // A restarted container finds an empty file: the first instance's message is not the
    // second's.
    let yaml = wasmpod_tests::PodYaml::new("again")
        .spec("restartPolicy: OnFailure")
        .spec("volumes: [ { name: data, emptyDir: {} } ]")
        .container(r#"{ name: c, image: "{p1}", terminationMessagePolicy: File, volumeMounts: [ { name: data, mountPath: /data } ], args: [cat, /dev/termination-log, write, /dev/termination-log, ran, fail-after, /data/n, "2"] }"#)
        .build();
    let pod = node.start(&yaml).await;
    let status = wait_for(&pod, LIMIT, |s| s.phase.as_deref() == Some("Succeeded")).await;
    assert_eq!(container(&status, "c").restart_count, 1);
    let mut logs = pod.logs("c", wasmpod::LogOptions::default()).unwrap();
    while let Some(line) = logs.next().await {
        assert!(
            !line.line.contains("ran"),
            "the file was not emptied: {}",
            line.line
        );
    }
    pod.delete(None);
    pod.deleted().await;
}
