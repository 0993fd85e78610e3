//! Stopping containers: TERM's default action, guests that handle TERM, KILL at the grace
//! deadline through epoch interruption (computing or blocked in a host call), and grace periods
//! that can be shortened but never lengthened.

use std::time::Duration;

use wasmpod::Reason::*;
use wasmpod_tests::{PodYaml, TestNode, Timeline, container, running, wait_for, waiting_reason};

const LIMIT: Duration = Duration::from_secs(20);

fn yaml(name: &str, grace: u32, image: &str, args: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: {name} }}
spec:
  terminationGracePeriodSeconds: {grace}
  containers:
  - {{ name: c, image: "{image}", args: {args} }}
"#
    )
}

async fn start_running(node: &TestNode, yaml: &str) -> wasmpod::PodHandle {
    let pod = node.start(yaml).await;
    running(&pod, &["c"]).await;
    pod
}

/// A container that does not import the termination interface is stopped at once on TERM
/// (its default action, 143): before a container of the same pod that takes 300 ms to finish
/// after TERM, and long before the grace period's end.
#[tokio::test]
async fn a_guest_without_the_term_import_stops_at_once() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: plain }
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - { name: p1, image: "{p1}", args: [sleep, "100000"] }
  - { name: p2, image: "{p2}", args: [sleep, "100000"] }
  - { name: handler, image: "{term}", args: [on-term, "0", "300", sleep, "100000"] }
"#,
        )
        .await;
    running(&pod, &["p1", "p2", "handler"]).await;
    pod.delete(None);
    let t = Timeline::collect(&pod).await;
    let handled = t.first("handler", Exited);
    for plain in ["p1", "p2"] {
        assert_eq!(t.exit_codes(plain), [143], "{t}");
        assert!(
            t.first(plain, Exited) < handled,
            "{plain} before handler:\n{t}"
        );
    }
    assert_eq!(t.exit_codes("handler"), [0], "{t}");
    assert_eq!(t.0.last().unwrap().reason, Deleted);
    assert_eq!(t.phases().last(), Some(&"Failed"));
}

/// A guest that handles TERM gets it as a signal and exits cleanly in its own time.
#[tokio::test]
async fn handling_guest_exits_cleanly() {
    let node = TestNode::new();
    let pod = start_running(
        &node,
        &yaml(
            "handler",
            30,
            "{term}",
            r#"[on-term, "0", "200", sleep, "100000"]"#,
        ),
    )
    .await;
    pod.delete(None);
    pod.deleted().await;
    let t = Timeline::collect(&pod).await;
    assert_eq!(t.exit_codes("c"), [0], "{t}");
    let took = t.between(t.first("c", Killing), t.first("c", Exited));
    assert!(took >= Duration::from_millis(200), "{took:?}");
    assert!(
        t.0[t.first("c", Killing)]
            .message
            .contains("grace period 30s"),
        "{t}"
    );
    assert_eq!(pod.status().phase.as_deref(), Some("Succeeded"));
}

/// A guest that ignores TERM is killed at the grace deadline, not before (and within a second
/// after; `--bench termination` measures how close): while computing, and while blocked in a
/// host call.
#[tokio::test]
async fn ignoring_guest_is_killed_at_the_deadline() {
    let node = TestNode::new();
    let cases = [
        ("loop", "{term}", r#"[loop]"#),
        ("blocked", "{term}", r#"[sleep, "100000"]"#),
    ];
    let mut pods = Vec::new();
    for (name, image, args) in cases {
        pods.push((
            name,
            start_running(&node, &yaml(name, 2, image, args)).await,
        ));
    }
    for (_, pod) in &pods {
        pod.delete(None);
    }
    for (name, pod) in pods {
        let t = Timeline::collect(&pod).await;
        assert_eq!(t.exit_codes("c"), [137], "{name}\n{t}");
        let took = t.between(t.first("c", Killing), t.first("c", Exited));
        assert!(
            took >= Duration::from_secs(2),
            "{name}: killed early, after {took:?}"
        );
        assert!(
            took < Duration::from_secs(3),
            "{name}: killed late, after {took:?}"
        );
    }
}

/// A grace period can be shortened while terminating (zero forces a kill), never lengthened.
#[tokio::test]
async fn grace_can_be_shortened_not_lengthened() {
    let node = TestNode::new();
    let pod = start_running(
        &node,
        &yaml("shorten", 60, "{term}", r#"[sleep, "100000"]"#),
    )
    .await;
    pod.delete(None);
    pod.delete(Some(Duration::from_secs(120)));
    // TERM was sent; the guest, which imports the interface, goes on in its grace period.
    Timeline::until(&pod, "c", Killing, LIMIT).await;
    assert!(
        container(&pod.status(), "c")
            .state
            .as_ref()
            .unwrap()
            .running
            .is_some(),
        "still in its grace period"
    );
    pod.delete(Some(Duration::ZERO));
    let t = Timeline::collect(&pod).await;
    assert_eq!(t.exit_codes("c"), [137]);
    assert_eq!(
        t.pod_positions(Terminating).len(),
        1,
        "one deletion, then shortened:\n{t}"
    );
    assert!(
        t.0[t.last("c", Killing)]
            .message
            .ends_with("with grace period 0s"),
        "{t}"
    );

    // lengthening is ignored: a 2 s deletion asked again with 60 s still kills at 2 s
    let pod = start_running(
        &node,
        &yaml("lengthen", 60, "{term}", r#"[sleep, "100000"]"#),
    )
    .await;
    pod.delete(Some(Duration::from_secs(2)));
    pod.delete(Some(Duration::from_secs(60)));
    let t = Timeline::collect(&pod).await;
    let took = t.between(t.first("c", Killing), t.first("c", Exited));
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert_eq!(t.count("c", Killing), 1, "{t}");
    assert!(
        t.0[t.first("c", Killing)]
            .message
            .ends_with("with grace period 2s"),
        "{t}"
    );
}

/// A forced deletion (grace 0) kills at once and still reports `Killing`, with a zero grace.
#[tokio::test]
async fn forced_deletion_reports_killing() {
    let node = TestNode::new();
    let pod = start_running(&node, &yaml("forced", 60, "{term}", r#"[sleep, "100000"]"#)).await;
    pod.delete(Some(Duration::ZERO));
    let t = Timeline::collect(&pod).await;
    let killing = t.first("c", Killing);
    assert!(
        t.0[killing].message.ends_with("with grace period 0s"),
        "{t}"
    );
    assert!(killing < t.first("c", Exited));
    assert_eq!(t.exit_codes("c"), [137]);
}

/// KILL never waits less than the kubelet's 2 s minimum after TERM, even with a shorter grace.
#[tokio::test]
async fn kill_waits_at_least_two_seconds_after_term() {
    let node = TestNode::new();
    let pod = start_running(&node, &yaml("min", 1, "{term}", r#"[sleep, "100000"]"#)).await;
    pod.delete(None);
    let t = Timeline::collect(&pod).await;
    let took = t.between(t.first("c", Killing), t.first("c", Exited));
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert_eq!(t.exit_codes("c"), [137]);
}

fn hooks_pod(name: &str, grace: u32, env: &str, lifecycle: &str, dir: &std::path::Path) -> String {
    PodYaml::new(name)
        .never()
        .spec(&format!("terminationGracePeriodSeconds: {grace}"))
        .spec(&format!(
            r#"volumes: [ {{ name: v, hostPath: {{ path: "{}" }} }} ]"#,
            dir.display()
        ))
        .container(&format!(
            r#"{{ name: c, image: "{{term}}", args: [on-term, "0", "50", sleep, "100000"], env: {env}, volumeMounts: [ {{ name: v, mountPath: /probe }} ], lifecycle: {lifecycle} }}"#
        ))
        .build()
}

fn probe_dir(node: &TestNode) -> std::path::PathBuf {
    let dir = node.dir.path().join("probe");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// preStop runs before TERM; TERM follows as soon as it returns.
#[tokio::test]
async fn pre_stop_runs_before_term() {
    let node = TestNode::new();
    let dir = probe_dir(&node);
    let yaml = hooks_pod(
        "prestop",
        30,
        r#"[ { name: PRE_STOP_MS, value: "300" } ]"#,
        "{ preStop: { exec: { command: [pre-stop] } } }",
        &dir,
    );
    let pod = start_running(&node, &yaml).await;
    pod.delete(None);
    let t = Timeline::collect(&pod).await;
    let (pre, kill, exit) = (
        t.first("c", PreStopHook),
        t.first("c", Killing),
        t.first("c", Exited),
    );
    assert!(pre < kill && kill < exit, "{t}");
    // TERM follows the hook's return, not the 30 s grace period's end.
    let hook = t.between(pre, kill);
    assert!(
        hook >= Duration::from_millis(300) && hook < Duration::from_secs(10),
        "{hook:?}"
    );
    assert_eq!(t.exit_codes("c"), [0]);
    assert_eq!(
        std::fs::read_to_string(dir.join("hooks.log")).unwrap(),
        "pre-stop\n"
    );
}

/// Kubernetes: a preStop that never returns is cut off at the grace period: TERM at g,
/// KILL at g + 2 s.
#[tokio::test]
async fn a_hanging_pre_stop_is_killed_at_grace_plus_two_seconds() {
    let node = TestNode::new();
    let dir = probe_dir(&node);
    let yaml = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: s43 }}
spec:
  terminationGracePeriodSeconds: 2
  volumes: [ {{ name: v, hostPath: {{ path: "{}" }} }} ]
  containers:
  - name: c
    image: "{{term}}"
    args: [sleep, "100000"]
    env: [ {{ name: PRE_STOP_MS, value: forever }} ]
    volumeMounts: [ {{ name: v, mountPath: /probe }} ]
    lifecycle: {{ preStop: {{ exec: {{ command: [pre-stop] }} }} }}
"#,
        dir.display()
    );
    let pod = start_running(&node, &yaml).await;
    pod.delete(None);
    let t = Timeline::collect(&pod).await;
    let deleted = t.pod_positions(Terminating)[0];
    let term = t.between(deleted, t.first("c", Killing));
    let kill = t.between(deleted, t.first("c", Exited));
    assert!(term >= Duration::from_secs(2), "TERM after {term:?}");
    // KILL 2 s after TERM, and no later than a loaded machine's lateness allows.
    assert!(
        kill >= term + Duration::from_secs(2) && kill < Duration::from_secs(10),
        "KILL {kill:?} after deletion, TERM after {term:?}"
    );
    assert_eq!(t.exit_codes("c"), [137]);
}

/// The sleep handler as preStop.
#[tokio::test]
async fn sleep_pre_stop() {
    let node = TestNode::new();
    let dir = probe_dir(&node);
    let yaml = hooks_pod(
        "sleep",
        30,
        "[]",
        "{ preStop: { sleep: { seconds: 1 } } }",
        &dir,
    );
    let pod = start_running(&node, &yaml).await;
    pod.delete(None);
    let t = Timeline::collect(&pod).await;
    // TERM follows the 1 s sleep, not the 30 s grace period's end.
    let hook = t.between(t.first("c", PreStopHook), t.first("c", Killing));
    assert!(
        hook >= Duration::from_secs(1) && hook < Duration::from_secs(10),
        "{hook:?}"
    );
}

/// postStart: the container is not Running until the hook returns; a failing hook kills the
/// container and the restart policy applies.
#[tokio::test]
async fn post_start_gates_running_and_failure_kills() {
    let node = TestNode::new();
    let dir = probe_dir(&node);
    let yaml = hooks_pod(
        "poststart",
        30,
        r#"[ { name: POST_START_MS, value: "300" } ]"#,
        "{ postStart: { exec: { command: [post-start] } } }",
        &dir,
    );
    let pod = node.start(&yaml).await;
    let waiting = wait_for(&pod, LIMIT, |s| waiting_reason(s, "c").is_some()).await;
    assert_eq!(
        waiting_reason(&waiting, "c").as_deref(),
        Some("ContainerCreating")
    );
    running(&pod, &["c"]).await;
    pod.delete(None);
    let t = Timeline::collect(&pod).await;
    let (created, hook, started) = (
        t.first("c", Created),
        t.first("c", PostStartHook),
        t.first("c", Started),
    );
    assert!(created < hook && hook < started, "{t}");
    assert!(t.between(created, started) >= Duration::from_millis(300));

    let yaml = hooks_pod(
        "poststartfails",
        30,
        r#"[ { name: POST_START_FAIL, value: "1" } ]"#,
        "{ postStart: { exec: { command: [post-start] } } }",
        &dir,
    );
    let pod = node.start(&yaml).await;
    let status = tokio::time::timeout(LIMIT, pod.wait()).await.unwrap();
    pod.delete(None);
    let t = Timeline::collect(&pod).await;
    assert!(
        t.first("c", FailedPostStartHook) < t.first("c", Killing),
        "{t}"
    );
    assert_eq!(t.count("c", Started), 0, "{t}");
    assert!(
        t.0[t.first("c", Killing)]
            .message
            .contains("FailedPostStartHook")
    );
    assert_eq!(
        status.phase.as_deref(),
        Some("Succeeded"),
        "the guest handled TERM and exited 0"
    );
}

/// Sidecars' preStop hooks all start together at the beginning of shutdown; TERM still goes in
/// reverse order.
#[tokio::test]
async fn sidecar_pre_stops_start_together() {
    let node = TestNode::new();
    let dir = probe_dir(&node);
    let sidecar = |name: &str| {
        format!(
            r#"  - name: {name}
    image: "{{term}}"
    restartPolicy: Always
    args: [on-term, "0", "100", sleep, "100000"]
    env: [ {{ name: PRE_STOP_MS, value: "200" }} ]
    volumeMounts: [ {{ name: v, mountPath: /probe }} ]
    lifecycle: {{ preStop: {{ exec: {{ command: [pre-stop] }} }} }}
"#
        )
    };
    let yaml = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: sidecars }}
spec:
  restartPolicy: Never
  volumes: [ {{ name: v, hostPath: {{ path: "{}" }} }} ]
  initContainers:
{}{}  containers:
  - {{ name: r1, image: "{{p1}}", args: [sleep, "100"] }}
"#,
        dir.display(),
        sidecar("s1"),
        sidecar("s2")
    );
    let (t, status) = node.run(&yaml, LIMIT).await;
    let r1 = t.first("r1", Exited);
    let (p1, p2) = (t.first("s1", PreStopHook), t.first("s2", PreStopHook));
    assert!(r1 < p1 && r1 < p2, "{t}");
    // Both hooks start with the shutdown, before either sidecar's turn to stop.
    let first_killing = t.first("s1", Killing).min(t.first("s2", Killing));
    assert!(p1 < first_killing && p2 < first_killing, "{t}");
    assert!(
        t.first("s2", Exited) < t.first("s1", Killing),
        "reverse order:\n{t}"
    );
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
}

/// A component that imports `wasmpod:pod/termination` gets TERM through its pollable and
/// through `requested`.
#[tokio::test]
async fn component_receives_term() {
    let node = TestNode::new();
    for (name, args) in [
        ("pollable", r#"[wait-term-pollable]"#),
        ("requested", r#"[on-term, "3", "0", sleep, "100000"]"#),
    ] {
        let pod = start_running(&node, &yaml(name, 30, "{probed}", args)).await;
        pod.delete(None);
        let t = Timeline::collect(&pod).await;
        let code = if name == "pollable" { 0 } else { 1 };
        assert_eq!(t.exit_codes("c"), [code], "{name}\n{t}");
        // At once, not at the grace period's end (30 s).
        let took = t.between(t.first("c", Killing), t.first("c", Exited));
        assert!(took < Duration::from_secs(5), "{name}: {took:?}");
        let log = wasmpod_tests::read(&pod.log_file("c", 0));
        assert!(log.contains("got TERM"), "{log}");
    }
}

/// A pod deleted while still initialising does not wait for sidecars that never started.
#[tokio::test]
async fn deleted_while_initialising() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: initialising }
spec:
  initContainers:
  - { name: i1, image: "{p1}", args: [sleep, "100000"] }
  - { name: s1, image: "{term}", restartPolicy: Always, args: [sleep, "100000"] }
  containers:
  - { name: r1, image: "{p1}", args: [sleep, "100000"] }
"#,
        )
        .await;
    running(&pod, &["i1"]).await;
    let asked = std::time::Instant::now();
    pod.delete(None);
    let t = Timeline::collect(&pod).await;
    // The sidecar never started: nothing waits for its grace period (30 s).
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(t.exit_codes("i1"), [143]);
    assert_eq!(
        t.count("s1", Started) + t.count("s1", Killing) + t.count("r1", Started),
        0,
        "{t}"
    );
}

/// Regular containers start one at a time, each once the previous one's postStart hook has
/// returned (the kubelet runs the hook inside `startContainer`).
#[tokio::test]
async fn post_start_holds_the_next_container() {
    let node = TestNode::new();
    let dir = probe_dir(&node);
    let yaml = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: ordered }}
spec:
  restartPolicy: Never
  volumes: [ {{ name: v, hostPath: {{ path: "{dir}" }} }} ]
  containers:
  - name: a
    image: "{{term}}"
    args: [sleep, "100000"]
    env: [ {{ name: POST_START_MS, value: "400" }} ]
    volumeMounts: [ {{ name: v, mountPath: /probe }} ]
    lifecycle: {{ postStart: {{ exec: {{ command: [post-start] }} }} }}
  - {{ name: b, image: "{{p1}}", args: [sleep, "100000"] }}
"#,
        dir = dir.display()
    );
    let pod = node.start(&yaml).await;
    running(&pod, &["a", "b"]).await;
    pod.delete(Some(Duration::ZERO));
    let t = Timeline::collect(&pod).await;
    let (a, hook, b) = (
        t.first("a", Created),
        t.first("a", PostStartHook),
        t.first("b", Created),
    );
    assert!(a < hook && hook < b, "{t}");
    assert!(t.between(a, b) >= Duration::from_millis(400), "{t}");
}
