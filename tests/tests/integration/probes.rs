//! Probes, as the kubelet runs them (each test states the Kubernetes rule it checks): exported
//! functions of preview1 modules and preview2 components, exec with argv, thresholds, initial
//! delays, timeouts, the startup probe gating liveness, readiness and the next init container,
//! probe-level grace.
//!
//! Kubernetes' probe fields are whole seconds, so these tests use periods of 1 s and scale the
//! scenarios' other times down to fit; orderings and ratios are Kubernetes'.

use std::path::PathBuf;
use std::time::Duration;

use wasmpod::Reason::*;
use wasmpod::{ContainerError, ExecError};
use wasmpod_tests::{TestNode, Timeline, condition, container, remove, wait_for};

const LIMIT: Duration = Duration::from_secs(30);

/// A node whose pods can mount `{probe}`, a host directory the test controls.
fn node() -> (TestNode, PathBuf) {
    let node = TestNode::new();
    let dir = node.dir.path().join("probe");
    std::fs::create_dir(&dir).unwrap();
    (node, dir)
}

fn with_probe_dir(yaml: &str, dir: &std::path::Path) -> String {
    yaml.replace("{probe}", &dir.display().to_string())
}

/// Kubernetes: a sidecar's startup probe gates the next container.
#[tokio::test]
async fn a_sidecars_startup_probe_gates_the_next_container() {
    let (node, dir) = node();
    let yaml = with_probe_dir(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: s20 }
spec:
  restartPolicy: Never
  volumes: [ { name: v, hostPath: { path: "{probe}" } } ]
  initContainers:
  - name: s1
    image: "{p1}"
    restartPolicy: Always
    args: [sleep, "300", write, /v/s1, ok, sleep, "100000"]
    volumeMounts: [ { name: v, mountPath: /v } ]
    startupProbe: { exec: { command: [agnhost, exists, /v/s1] }, periodSeconds: 1 }
  - name: s2
    image: "{p2}"
    restartPolicy: Always
    args: [sleep, "300", write, /v/s2, ok, sleep, "100000"]
    volumeMounts: [ { name: v, mountPath: /v } ]
    startupProbe: { exec: { command: [agnhost, exists, /v/s2] }, periodSeconds: 1 }
  containers:
  - { name: r1, image: "{p1}", args: [sleep, "10"] }
"#,
        &dir,
    );
    let (t, status) = node.run(&yaml, LIMIT).await;
    assert!(
        t.first("s1", StartupSucceeded) < t.first("s2", Started),
        "{t}"
    );
    assert!(
        t.first("s2", StartupSucceeded) < t.first("r1", Started),
        "{t}"
    );
    assert!(
        t.count("s1", Unhealthy) >= 1,
        "the first probe, before the marker, fails:\n{t}"
    );
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));

    // Without a startup probe a sidecar counts as started as soon as it runs.
    let (t, _) = node
        .run(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: s20b }
spec:
  restartPolicy: Never
  initContainers: [ { name: s1, image: "{p1}", restartPolicy: Always, args: [sleep, "100000"] } ]
  containers: [ { name: r1, image: "{p1}", args: [sleep, "10"] } ]
"#,
            LIMIT,
        )
        .await;
    // At once: not after a probe period (10 s by default).
    assert!(
        t.between(t.first("s1", Started), t.first("r1", Started)) < Duration::from_secs(5),
        "{t}"
    );
}

/// Kubernetes: Ready turns True no sooner than the readiness initial delay; a sidecar's
/// readiness counts toward the pod's.
#[tokio::test]
async fn ready_waits_for_the_readiness_initial_delay() {
    let (node, dir) = node();
    std::fs::write(dir.join("readiness"), "").unwrap();
    let yaml = with_probe_dir(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: s28 }
spec:
  volumes: [ { name: v, hostPath: { path: "{probe}" } } ]
  initContainers:
  - name: s1
    image: "{p1}"
    restartPolicy: Always
    args: [sleep, "100000"]
    volumeMounts: [ { name: v, mountPath: /probe } ]
    readinessProbe: { exec: { command: [readiness] }, initialDelaySeconds: 2, periodSeconds: 1 }
  containers:
  - name: r1
    image: "{probed}"
    args: [sleep, "100000"]
    volumeMounts: [ { name: v, mountPath: /probe } ]
    readinessProbe: { exec: { command: [readiness] }, initialDelaySeconds: 1, periodSeconds: 1 }
"#,
        &dir,
    );
    let pod = node.start(&yaml).await;
    let ready = wait_for(&pod, LIMIT, |s| condition(s, "Ready").0 == "True").await;
    assert_eq!(container(&ready, "r1").restart_count, 0);
    pod.delete(Some(Duration::ZERO));
    let t = Timeline::collect(&pod).await;
    let r1 = t.between(t.first("r1", Started), t.first("r1", Ready));
    // Not before its initial delay (the prober's timing itself is table-tested in
    // supervisor/probe.rs on a paused clock).
    assert!(r1 >= Duration::from_secs(1), "r1 ready after {r1:?}\n{t}");
    let s1 = t.between(t.first("s1", Started), t.first("s1", Ready));
    assert!(s1 >= Duration::from_secs(2), "s1 ready after {s1:?}");
    // r1 was ready first, yet the pod turned Ready only once the sidecar was
    assert!(t.first("r1", Ready) < t.first("s1", Ready), "{t}");
    let pod_ready = ready
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    let pod_ready = std::time::SystemTime::from(pod_ready.last_transition_time.as_ref().unwrap().0);
    assert!(
        pod_ready >= t.time(t.first("s1", Ready)),
        "pod Ready before the sidecar was:\n{t}"
    );
}

/// Kubernetes: an exec liveness probe that starts failing restarts the container; one that
/// keeps passing never does.
#[tokio::test]
async fn a_failing_exec_liveness_probe_restarts_the_container() {
    let (node, dir) = node();
    let yaml = |name: &str, deletes: bool| {
        let script = if deletes {
            r#"[write, /v/healthy, ok, sleep, "1000", rm, /v/healthy, sleep, "100000"]"#
        } else {
            r#"[write, /v/healthy, ok, sleep, "100000"]"#
        };
        with_probe_dir(
            &format!(
                r#"
apiVersion: v1
kind: Pod
metadata: {{ name: {name} }}
spec:
  volumes: [ {{ name: v, hostPath: {{ path: "{{probe}}" }} }} ]
  containers:
  - name: r1
    image: "{{p1}}"
    args: {script}
    volumeMounts: [ {{ name: v, mountPath: /v }} ]
    livenessProbe: {{ exec: {{ command: [agnhost, cat, /v/healthy] }}, initialDelaySeconds: 1, periodSeconds: 1, timeoutSeconds: 5, failureThreshold: 1 }}
"#
            ),
            &dir,
        )
    };
    let pod = node.start(&yaml("s30", true)).await;
    wait_for(&pod, LIMIT, |s| container(s, "r1").restart_count >= 1).await;
    pod.delete(Some(Duration::ZERO));
    let t = Timeline::collect(&pod).await;
    let unhealthy = &t.0[t.first("r1", Unhealthy)];
    assert!(
        unhealthy
            .message
            .starts_with("Liveness probe failed: command exited with 2"),
        "{}",
        unhealthy.message
    );
    assert!(
        t.0[t.first("r1", Killing)]
            .message
            .contains("failed liveness probe, will be restarted"),
        "{t}"
    );

    let pod = node.start(&yaml("s30b", false)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = pod.status();
    assert_eq!(container(&status, "r1").restart_count, 0);
    pod.delete(Some(Duration::ZERO));
    let t = Timeline::collect(&pod).await;
    assert_eq!(t.count("r1", Unhealthy), 0, "{t}");
}

/// Kubernetes: a failing startup probe kills even when liveness passes.
#[tokio::test]
async fn a_failing_startup_probe_kills_even_when_liveness_passes() {
    let (node, dir) = node();
    std::fs::write(dir.join("liveness"), "").unwrap();
    let yaml = with_probe_dir(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: s33 }
spec:
  volumes: [ { name: v, hostPath: { path: "{probe}" } } ]
  containers:
  - name: r1
    image: "{p1}"
    args: [sleep, "100000"]
    volumeMounts: [ { name: v, mountPath: /probe } ]
    startupProbe: { exec: { command: [startup] }, initialDelaySeconds: 1, periodSeconds: 1, failureThreshold: 2 }
    livenessProbe: { exec: { command: [liveness] }, periodSeconds: 1 }
"#,
        &dir,
    );
    let pod = node.start(&yaml).await;
    wait_for(&pod, LIMIT, |s| container(s, "r1").restart_count >= 1).await;
    pod.delete(Some(Duration::ZERO));
    let t = Timeline::collect(&pod).await;
    assert!(
        t.0[t.first("r1", Unhealthy)]
            .message
            .starts_with("Startup probe failed"),
        "{t}"
    );
    assert_eq!(t.count("r1", StartupSucceeded), 0);
    // killed after 2 failures, at 1 s and 2 s
    let killed = t.between(t.first("r1", Started), t.first("r1", Killing));
    assert!(killed >= Duration::from_secs(2), "{killed:?}");
}

/// Kubernetes: the startup probe holds liveness off.
#[tokio::test]
async fn the_startup_probe_holds_liveness_off() {
    let (node, dir) = node();
    let yaml = with_probe_dir(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: s34 }
spec:
  volumes: [ { name: v, hostPath: { path: "{probe}" } } ]
  containers:
  - name: r1
    image: "{p1}"
    args: [sleep, "100000"]
    volumeMounts: [ { name: v, mountPath: /probe } ]
    startupProbe: { exec: { command: [startup] }, periodSeconds: 1, failureThreshold: 60 }
    livenessProbe: { exec: { command: [liveness] }, periodSeconds: 1, failureThreshold: 1 }
"#,
        &dir,
    );
    let pod = node.start(&yaml).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(container(&pod.status(), "r1").restart_count, 0);
    assert!(!container(&pod.status(), "r1").started.unwrap());
    pod.delete(Some(Duration::ZERO));
    let t = Timeline::collect(&pod).await;
    let unhealthy: Vec<_> = t
        .positions("r1", Unhealthy)
        .into_iter()
        .map(|i| &t.0[i].message)
        .collect();
    assert!(
        unhealthy.len() >= 2
            && unhealthy
                .iter()
                .all(|m| m.starts_with("Startup probe failed")),
        "{t}"
    );
}

/// Kubernetes: a liveness kill uses the probe's own grace period, not the pod's.
#[tokio::test]
async fn a_liveness_kill_uses_the_probes_own_grace_period() {
    let (node, dir) = node();
    let yaml = with_probe_dir(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: s37 }
spec:
  terminationGracePeriodSeconds: 500
  volumes: [ { name: v, hostPath: { path: "{probe}" } } ]
  containers:
  - name: r1
    image: "{term}"
    args: [sleep, "100000"]
    volumeMounts: [ { name: v, mountPath: /probe } ]
    livenessProbe: { exec: { command: [liveness] }, initialDelaySeconds: 1, periodSeconds: 1, failureThreshold: 1, terminationGracePeriodSeconds: 3 }
"#,
        &dir,
    );
    let pod = node.start(&yaml).await;
    wait_for(&pod, LIMIT, |s| container(s, "r1").restart_count >= 1).await;
    pod.delete(Some(Duration::ZERO));
    let t = Timeline::collect(&pod).await;
    let killing = t.first("r1", Killing);
    assert!(
        t.0[killing].message.ends_with("with grace period 3s"),
        "{}",
        t.0[killing].message
    );
    let took = t.between(killing, t.first("r1", Exited));
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(4),
        "{took:?}"
    );
    assert_eq!(t.exit_codes("r1")[0], 137);
}

/// Kubernetes: a probe kill runs preStop first; under Never there is no restart.
#[tokio::test]
async fn a_probe_kill_runs_pre_stop_first() {
    let (node, dir) = node();
    let yaml = with_probe_dir(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: s40 }
spec:
  restartPolicy: Never
  volumes: [ { name: v, hostPath: { path: "{probe}" } } ]
  containers:
  - name: r1
    image: "{term}"
    args: [on-term, "0", "300", sleep, "100000"]
    env: [ { name: PRE_STOP_MS, value: "200" } ]
    volumeMounts: [ { name: v, mountPath: /probe } ]
    lifecycle: { preStop: { exec: { command: [pre-stop] } } }
    startupProbe: { exec: { command: [startup] }, initialDelaySeconds: 1, periodSeconds: 1, failureThreshold: 1 }
"#,
        &dir,
    );
    let (t, status) = node.run(&yaml, LIMIT).await;
    let (pre, kill, exit) = (
        t.first("r1", PreStopHook),
        t.first("r1", Killing),
        t.first("r1", Exited),
    );
    assert!(pre < kill && kill < exit, "{t}");
    assert!(t.between(pre, kill) >= Duration::from_millis(200));
    assert_eq!(t.count("r1", Started), 1, "no restart under Never");
    assert_eq!(t.exit_codes("r1"), [0]);
    assert_eq!(
        std::fs::read_to_string(dir.join("hooks.log")).unwrap(),
        "pre-stop\n"
    );
    assert_eq!(container(&status, "r1").restart_count, 0);
}

/// A probe that exceeds its timeout fails, and its instance is stopped: a hung probe does not
/// pile up instances.
#[tokio::test]
async fn probe_timeout_is_a_failure() {
    let (node, dir) = node();
    std::fs::write(dir.join("liveness.hang"), "").unwrap();
    let yaml = with_probe_dir(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: timeout }
spec:
  volumes: [ { name: v, hostPath: { path: "{probe}" } } ]
  containers:
  - name: r1
    image: "{probed}"
    args: [sleep, "100000"]
    volumeMounts: [ { name: v, mountPath: /probe } ]
    livenessProbe: { exec: { command: [liveness] }, periodSeconds: 1, timeoutSeconds: 1, failureThreshold: 2 }
"#,
        &dir,
    );
    let pod = node.start(&yaml).await;
    let t = Timeline::until(&pod, "r1", Killing, LIMIT).await;
    pod.delete(Some(Duration::ZERO));
    let unhealthy = t.positions("r1", Unhealthy);
    assert_eq!(unhealthy.len(), 2, "{t}");
    for &i in &unhealthy {
        assert_eq!(t.0[i].message, "Liveness probe failed: timed out after 1s");
    }
    let took = t.between(t.first("r1", Started), unhealthy[0]);
    assert!(took >= Duration::from_secs(1), "{took:?}");
    // The second attempt timed out too: the hung instance was dropped, not waited for (when an
    // attempt begins is table-tested in supervisor/probe.rs on a paused clock).
    let next = t.between(unhealthy[0], unhealthy[1]);
    assert!(next >= Duration::from_millis(900), "{next:?}");
}

/// Each handler kind: an exported function of a preview1 module and of a component, and exec
/// with argv (the entry point runs with argv = command).
#[tokio::test]
async fn handler_kinds() {
    let (node, dir) = node();
    std::fs::write(dir.join("readiness"), "").unwrap();
    let yaml = with_probe_dir(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: kinds }
spec:
  volumes: [ { name: v, hostPath: { path: "{probe}" } } ]
  containers:
  - name: export-p1
    image: "{p1}"
    args: [sleep, "100000"]
    volumeMounts: [ { name: v, mountPath: /probe } ]
    readinessProbe: { exec: { command: [readiness] }, periodSeconds: 1 }
  - name: export-p2
    image: "{probed}"
    args: [sleep, "100000"]
    volumeMounts: [ { name: v, mountPath: /probe } ]
    readinessProbe: { exec: { command: [readiness] }, periodSeconds: 1 }
  - name: argv-p2
    image: "{p2}"
    args: [sleep, "100000"]
    volumeMounts: [ { name: v, mountPath: /probe } ]
    readinessProbe: { exec: { command: [agnhost, exists, /probe/readiness] }, periodSeconds: 1 }
"#,
        &dir,
    );
    let pod = node.start(&yaml).await;
    wait_for(&pod, LIMIT, |s| condition(s, "ContainersReady").0 == "True").await;
    std::fs::remove_file(dir.join("readiness")).unwrap();
    let s = wait_for(&pod, LIMIT, |s| {
        ["export-p1", "export-p2", "argv-p2"]
            .iter()
            .all(|c| !container(s, c).ready)
    })
    .await;
    assert_eq!(condition(&s, "Ready").0, "False");
    pod.delete(Some(Duration::ZERO));
    let t = Timeline::collect(&pod).await;
    for c in ["export-p1", "export-p2", "argv-p2"] {
        assert!(t.first(c, Ready) < t.first(c, NotReady), "{c}\n{t}");
        assert_eq!(
            container(&s, c).restart_count,
            0,
            "readiness never restarts"
        );
    }
    let p1 = &t.0[t.first("export-p1", Unhealthy)].message;
    assert!(p1.contains("wasmpod_probe_readiness returned 1"), "{p1}");
    let p2 = &t.0[t.first("export-p2", Unhealthy)].message;
    assert!(
        p2.starts_with("Readiness probe failed: /probe/readiness:"),
        "{p2}"
    );
}

/// Probes that break the kubelet's rules are validation errors.
#[test]
fn invalid_probes_are_rejected() {
    let node = TestNode::new();
    let err = node.invalid(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: bad }
spec:
  initContainers:
  - { name: i, image: "{p1}", readinessProbe: { exec: { command: [readiness] } } }
  containers:
  - name: c
    image: "{p1}"
    livenessProbe: { exec: { command: [liveness] }, successThreshold: 2 }
    startupProbe: { grpc: { port: 80 }, tcpSocket: { port: 80 } }
    readinessProbe: { httpGet: { port: web, scheme: HTTPS } }
"#,
    );
    assert!(
        err.contains("spec.initContainers[0].readinessProbe: not supported by init containers"),
        "{err}"
    );
    assert!(
        err.contains(
            "spec.containers[0].livenessProbe.successThreshold: invalid value 2: must be 1"
        ),
        "{err}"
    );
    assert!(
        err.contains("spec.containers[0].startupProbe: may not specify more than one handler type"),
        "{err}"
    );
    assert!(
        err.contains(r#"spec.containers[0].readinessProbe.httpGet.port: not found: no container port named "web""#),
        "{err}"
    );
    assert!(
        err.contains(
            r#"spec.containers[0].readinessProbe.httpGet.scheme: unsupported value "HTTPS""#
        ),
        "{err}"
    );
}

/// `PodHandle::exec` runs a handler in a fresh instance of a running container, like `kubectl
/// exec`: exports by name, or the entry point with argv.
#[tokio::test]
async fn exec_in_a_running_container() {
    let (node, dir) = node();
    std::fs::write(dir.join("readiness"), "").unwrap();
    let yaml = with_probe_dir(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: exec }
spec:
  volumes: [ { name: v, hostPath: { path: "{probe}" } } ]
  containers:
  - { name: p1, image: "{p1}", args: [sleep, "100000"], volumeMounts: [ { name: v, mountPath: /probe } ] }
  - { name: p2, image: "{probed}", args: [sleep, "100000"], volumeMounts: [ { name: v, mountPath: /probe } ] }
"#,
        &dir,
    );
    let pod = node.start(&yaml).await;
    wait_for(&pod, LIMIT, |s| condition(s, "ContainersReady").0 == "True").await;
    for c in ["p1", "p2"] {
        assert_eq!(pod.exec(c, &["readiness"]).await, Ok(()), "{c}");
        let err = pod.exec(c, &["liveness"]).await.unwrap_err().to_string();
        assert!(err.contains("/probe/liveness"), "{c}: {err}");
        assert_eq!(
            pod.exec(c, &["agnhost", "write", "/probe/from-exec", c])
                .await,
            Ok(())
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("from-exec")).unwrap(),
            format!("{c}\n")
        );
        let err = pod
            .exec(c, &["agnhost", "print", "nope", "exit", "3"])
            .await
            .unwrap_err();
        // Rust's wasip2 std exits through `wasi:cli/exit.exit(err)`: any failure is 1
        let code = if c == "p1" { 3 } else { 1 };
        assert_eq!(
            err,
            ExecError::Failed(format!("command exited with {code}: nope")),
            "{c}"
        );
    }
    assert_eq!(
        pod.exec("nosuch", &["readiness"]).await,
        Err(ExecError::Container(ContainerError::NoSuchContainer(
            "nosuch".into()
        )))
    );
    assert_eq!(
        container(&pod.status(), "p1").restart_count,
        0,
        "exec does not touch the container"
    );
    remove(&pod).await;
    assert_eq!(
        pod.exec("p1", &["readiness"]).await,
        Err(ExecError::Container(ContainerError::PodGone("exec".into())))
    );
}

/// A probe whose guest sleeps past its timeout (a preview1 module's `sleep`, the entry point
/// with argv = command) is stopped at the timeout like one that computes: its sleep is a timer,
/// not a blocked thread, so the timed-out instances are gone and hold none of the container's
/// memory. Both ways a probe runs: on the runtime's workers (`probed`: its mounts, none here,
/// are on local file systems) and on a thread of its own (`remote`: a mount on procfs, which
/// wasmpod does not count as local), where its file reads are made inline.
#[tokio::test]
async fn a_probe_sleeping_past_its_timeout_is_stopped() {
    let node = TestNode::new();
    let yaml = r#"
apiVersion: v1
kind: Pod
metadata: { name: sleepy }
spec:
  volumes: [ { name: k, hostPath: { path: /proc/sys/kernel } } ]
  containers:
  - name: plain
    image: "{p1}"
    args: [sleep, "100000"]
  - name: probed
    image: "{p1}"
    args: [sleep, "100000"]
    readinessProbe: { exec: { command: [agnhost, sleep, "100000"] }, periodSeconds: 1, timeoutSeconds: 1 }
  - name: remote
    image: "{p1}"
    args: [sleep, "100000"]
    volumeMounts: [ { name: k, mountPath: /k, readOnly: true } ]
    readinessProbe: { exec: { command: [agnhost, sleep, "100000"] }, periodSeconds: 1, timeoutSeconds: 1 }
"#;
    let pod = node.start(yaml).await;
    let mut events = pod.events();
    let mut timed_out = [0, 0];
    tokio::time::timeout(LIMIT, async {
        while let Some(e) = events.next().await {
            let which = match e.container.as_deref() {
                Some("probed") => 0,
                Some("remote") => 1,
                _ => continue,
            };
            if e.reason == Unhealthy {
                assert_eq!(e.message, "Readiness probe failed: timed out after 1s");
                timed_out[which] += 1;
                if timed_out.iter().all(|n| *n >= 3) {
                    break;
                }
            }
        }
    })
    .await
    .expect("three probe timeouts in each container");
    // Each container holds its main instance's memory and the attempt in flight's: a timed-out
    // instance is dropped as the next attempt begins (for a moment there are three), where
    // sleeping threads would hold one more instance every second.
    let memory = |name: &str| {
        let usage = pod.usage();
        usage.iter().find(|c| c.name == name).unwrap().memory
    };
    let plain = memory("plain");
    for probed in ["probed", "remote"] {
        let start = std::time::Instant::now();
        while memory(probed) > 2 * plain {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{probed}: {} bytes held beside {plain} for the same guest without a probe",
                memory(probed)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // A command in `remote` reads through its procfs mount on its own thread.
    let command = ["agnhost", "cat", "/k/ostype"].map(String::from);
    let out = pod.exec_output("remote", &command, 1 << 10).await.unwrap();
    assert_eq!(
        (out.exit_code, String::from_utf8_lossy(&out.stdout).as_ref()),
        (0, "Linux\n"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    remove(&pod).await;
}
