//! Misbehaving guests — traps, memory hogs, infinite loops, output floods — end or are stopped
//! with the right status, and never harm the runtime or other pods.

use std::time::Duration;

use wasmpod::Reason::*;
use wasmpod_tests::{
    PodYaml, TestNode, Timeline, container, container_yaml, is_running, read, remove, running,
    terminated, wait_for,
};

const LIMIT: Duration = Duration::from_secs(30);

fn one(name: &str, image: &str, args: &str) -> String {
    PodYaml::new(name)
        .never()
        .container(&container_yaml("c", image, args))
        .build()
}

/// A trap ends the container with 134, reason Error, the trap in the message and where in the
/// guest it happened (the innermost frames of its wasm backtrace, names demangled).
#[tokio::test]
async fn trap_is_exit_134() {
    let node = TestNode::new();
    for image in ["{p1}", "{p2}"] {
        let (t, status) = node.run(&one("trap", image, "[trap]"), LIMIT).await;
        assert_eq!(t.exit_codes("c"), [134]);
        let term = terminated(&status, "c");
        assert_eq!(
            (term.exit_code, term.reason.as_deref()),
            (134, Some("Error"))
        );
        let message = term.message.clone().unwrap_or_default();
        let lines: Vec<&str> = message.lines().collect();
        assert!(lines[0].contains("unreachable"), "{image}: {message}");
        assert_eq!(lines.get(1), Some(&"wasm backtrace:"), "{image}: {message}");
        assert!(
            lines.iter().any(|l| l.ends_with("!agnhost::main")),
            "{image}: {message}"
        );
        assert_eq!(status.phase.as_deref(), Some("Failed"));
    }
}

/// A guest that recurses without end traps once its wasm stack is spent (134, the trap in the
/// message), and the instances after it, which get the fiber stack it dirtied to its depth
/// (stacks are reused), start clean and run.
#[tokio::test]
async fn stack_exhaustion_is_a_trap_and_the_next_instances_run() {
    let node = TestNode::new();
    let path = node.dir.path().join("recurse.wasm");
    let wat = r#"(module
        (func $down (param i64) (result i64)
            (i64.add (call $down (i64.add (local.get 0) (i64.const 1))) (local.get 0)))
        (func (export "_start") (drop (call $down (i64.const 0)))))"#;
    std::fs::write(&path, wat::parse_str(wat).unwrap()).unwrap();
    let image = path.display().to_string();
    for round in 0..3 {
        let (t, status) = node.run(&one("deep", &image, "[]"), LIMIT).await;
        assert_eq!(t.exit_codes("c"), [134], "round {round}: {t}");
        let message = terminated(&status, "c").message.unwrap_or_default();
        assert!(message.contains("stack"), "{message}");
        // Thousands of frames deep: the message keeps the innermost ten.
        assert!(message.lines().count() <= 13, "{message}");
        assert!(message.ends_with("more frames"), "{message}");
        for image in ["{p1}", "{p2}"] {
            let (t, status) = node
                .run(&one("after", image, "[print, hello]"), LIMIT)
                .await;
            assert_eq!(t.exit_codes("c"), [0], "round {round}, {image}: {t}");
            assert_eq!(status.phase.as_deref(), Some("Succeeded"));
        }
    }
}

/// Exit codes reach the status: WASI exit code, 0 for a normal return.
#[tokio::test]
async fn exit_codes_are_reported() {
    let node = TestNode::new();
    for (image, code, phase) in [
        ("{p1}", 0, "Succeeded"),
        ("{p1}", 3, "Failed"),
        ("{p2}", 0, "Succeeded"),
        ("{p2}", 1, "Failed"),
    ] {
        let (t, status) = node
            .run(&one("code", image, &format!(r#"[exit, "{code}"]"#)), LIMIT)
            .await;
        assert_eq!(t.exit_codes("c"), [code], "{image}");
        let reason = if code == 0 { "Completed" } else { "Error" };
        assert_eq!(t.0[t.first("c", Exited)].message, reason);
        assert_eq!(status.phase.as_deref(), Some(phase));
    }
}

/// A guest that grows past the memory limit ends with 137 OOMKilled; a pod next to it is
/// unaffected.
#[tokio::test]
async fn memory_hog_is_oom_killed_alone() {
    let node = TestNode::with(|o| o.memory_limit(64 << 20));
    let neighbour = node
        .start(&one("calm", "{p1}", r#"[sleep, "300", print, done]"#))
        .await;
    let (t, status) = node
        .run(&one("hog", "{p1}", r#"[alloc, "1000"]"#), LIMIT)
        .await;
    assert_eq!(t.exit_codes("c"), [137], "{t}");
    let term = terminated(&status, "c");
    assert_eq!(term.reason.as_deref(), Some("OOMKilled"));
    assert_eq!(t.0[t.first("c", Exited)].message, "OOMKilled");
    let calm = tokio::time::timeout(LIMIT, neighbour.wait()).await.unwrap();
    assert_eq!(calm.phase.as_deref(), Some("Succeeded"));
}

/// A guest in a tight loop does not stop its neighbours from running on time, and is stopped
/// at once on deletion.
#[tokio::test]
async fn busy_loop_does_not_starve_neighbours() {
    let node = TestNode::new();
    let spinners: Vec<_> = futures_start(&node, 4).await;
    let start = std::time::Instant::now();
    let (t, status) = node
        .run(
            &one("calm", "{p1}", r#"[sleep, "100", print, done]"#),
            LIMIT,
        )
        .await;
    let took = start.elapsed();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let run = t.between(t.first("c", Started), t.first("c", Exited));
    assert!(
        run < Duration::from_millis(400),
        "a 100 ms sleep took {run:?} next to 4 spinning guests"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    for pod in spinners {
        pod.delete(None);
        let t = Timeline::collect(&pod).await;
        assert_eq!(t.exit_codes("c"), [143]);
    }
}

/// A pod flooding its output slows only itself (to the speed of its log writer): a neighbour's
/// 100 ms sleep still ends within the same bound as next to spinning guests, and the node's
/// memory stays bounded by the per-pod output channel.
#[tokio::test]
async fn log_flood_does_not_delay_neighbours() {
    let node = TestNode::new();
    let flood = node
        .start(&one(
            "flood",
            "{p1}",
            r#"[flood, "300000", sleep, "600000"]"#,
        ))
        .await;
    running(&flood, &["c"]).await;
    let (t, status) = node
        .run(
            &one("calm", "{p1}", r#"[sleep, "100", print, done]"#),
            LIMIT,
        )
        .await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let run = t.between(t.first("c", Started), t.first("c", Exited));
    assert!(
        run < Duration::from_millis(400),
        "a 100 ms sleep took {run:?} next to a flooding pod"
    );
    flood.delete(Some(Duration::ZERO));
}

/// A latency-sensitive pod next to spinning guests in other pods still meets its probe
/// deadlines: a 1 s liveness probe (exported function, fresh instance) with
/// `failureThreshold: 1` never fails over five periods, so the container is never restarted.
#[tokio::test]
async fn probes_meet_their_deadlines_next_to_spinners() {
    let node = TestNode::new();
    let probe_dir = node.dir.path().join("probe");
    std::fs::create_dir(&probe_dir).unwrap();
    std::fs::write(probe_dir.join("liveness"), "").unwrap();
    std::fs::write(probe_dir.join("readiness"), "").unwrap();
    let spinners = futures_start(&node, 4).await;
    let yaml = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: sensitive }}
spec:
  volumes: [ {{ name: v, hostPath: {{ path: "{}" }} }} ]
  containers:
  - name: c
    image: "{{p1}}"
    args: [sleep, "600000"]
    volumeMounts: [ {{ name: v, mountPath: /probe }} ]
    livenessProbe: {{ exec: {{ command: [liveness] }}, periodSeconds: 1, timeoutSeconds: 1, failureThreshold: 1 }}
    readinessProbe: {{ exec: {{ command: [readiness] }}, periodSeconds: 1, timeoutSeconds: 1 }}
"#,
        probe_dir.display()
    );
    let pod = node.start(&yaml).await;
    wait_for(&pod, LIMIT, |s| {
        s.container_statuses.iter().flatten().any(|c| c.ready)
    })
    .await;
    // Five liveness periods with both cores busy: any missed deadline would be Unhealthy and,
    // with a threshold of 1, a restart.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let t = Timeline::so_far(&pod).await;
    assert_eq!(t.count("c", Unhealthy), 0, "{t}");
    assert_eq!(pod.status().container_statuses.unwrap()[0].restart_count, 0);
    pod.delete(Some(Duration::ZERO));
    for pod in spinners {
        pod.delete(Some(Duration::ZERO));
    }
}

async fn futures_start(node: &TestNode, n: usize) -> Vec<wasmpod::PodHandle> {
    let mut pods = Vec::new();
    for i in 0..n {
        let pod = node
            .start(&one(&format!("spin{i}"), "{p1}", "[loop]"))
            .await;
        running(&pod, &["c"]).await;
        pods.push(pod);
    }
    pods
}

/// Output is kept in CRI log files, one record per line; over-long lines are split into
/// partial records; a flood is written in full.
#[tokio::test]
async fn output_is_logged_in_cri_format() {
    let node = TestNode::new();
    let yaml = one(
        "logs",
        "{p1}",
        r#"[print, hello, eprint, oops, longline, "40000", flood, "100000"]"#,
    );
    let pod = node.start(&yaml).await;
    pod.wait().await;
    // Once read through to its end, the log file is complete.
    let mut logs = pod.logs("c", wasmpod::LogOptions::default()).unwrap();
    while logs.next().await.is_some() {}
    // The flood is past 10 MiB: the log was rotated once, `0.log.<time>` then `0.log`.
    let current = pod.log_file("c", 0);
    let mut files: Vec<_> = std::fs::read_dir(current.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p != &current)
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.push(current);
    let log: String = files.iter().map(|f| read(f)).collect();
    let records: Vec<&str> = log.lines().collect();
    assert_eq!(records.len(), 2 + 3 + 100_000);
    let fields = |r: &str| r.splitn(4, ' ').map(str::to_owned).collect::<Vec<_>>();
    let first = fields(records[0]);
    assert!(
        first[0].ends_with('Z') && first[0].len() == "2026-11-21T10:00:00.123456789Z".len(),
        "{}",
        first[0]
    );
    assert_eq!(&first[1..], ["stdout", "F", "hello"]);
    let stderr = records
        .iter()
        .map(|r| fields(r))
        .find(|f| f[1] == "stderr")
        .unwrap();
    assert_eq!(&stderr[2..], ["F", "oops"]);
    let long: Vec<_> = records
        .iter()
        .map(|r| fields(r))
        .filter(|f| f[3].starts_with("yyy"))
        .collect();
    assert_eq!(
        long.iter()
            .map(|f| (f[2].as_str(), f[3].len()))
            .collect::<Vec<_>>(),
        [("P", 16384), ("P", 16384), ("F", 7232)]
    );
    assert!(records.last().unwrap().ends_with(
        "flood line 99999 xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
    ));
    pod.delete(None);
    pod.deleted().await;
    assert!(!pod.dir().join("volumes").exists());
}

/// The log of each restart is its own file, as the kubelet lays them out.
#[tokio::test]
async fn each_restart_has_its_own_log() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: restarts }
spec:
  restartPolicy: OnFailure
  volumes: [ { name: v, emptyDir: {} } ]
  containers:
  - { name: c, image: "{p1}", args: [count, /v/n, fail-after, /v/n2, "3"], volumeMounts: [ { name: v, mountPath: /v } ] }
"#,
        )
        .await;
    let status = tokio::time::timeout(LIMIT, pod.wait()).await.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    assert_eq!(container(&status, "c").restart_count, 2);
    // As the kubelet keeps one dead container per container, the logs of the current and the
    // previous instance are kept; older ones are removed when a new instance starts.
    assert!(!pod.log_file("c", 0).exists(), "restart 0's log is removed");
    for (restart, line) in [(1, "count 2"), (2, "count 3")] {
        assert!(
            read(&pod.log_file("c", restart)).trim_end().ends_with(line),
            "restart {restart}"
        );
    }
    pod.delete(None);
    let t = Timeline::collect(&pod).await;
    assert_eq!(t.exit_codes("c"), [1, 1, 0]);
}

/// `resources.limits.memory` caps a container's memory: past it the container is OOMKilled (137)
/// while its neighbour without a limit allocates the same freely. QoS classes: requests alone
/// make the pod Burstable, none BestEffort, equal limits and requests for both Guaranteed.
#[tokio::test]
async fn memory_limit_per_container_and_qos() {
    let node = TestNode::new();
    let (t, status) = node
        .run(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: limits }
spec:
  restartPolicy: Never
  containers:
  - { name: capped, image: "{p1}", args: [alloc, "100"], resources: { limits: { memory: 32Mi } } }
  - { name: free, image: "{p2}", args: [alloc, "100"], resources: { requests: { memory: 16Mi, cpu: 100m } } }
"#,
            LIMIT,
        )
        .await;
    assert_eq!(t.exit_codes("capped"), [137], "{t}");
    assert_eq!(
        terminated(&status, "capped").reason.as_deref(),
        Some("OOMKilled")
    );
    assert_eq!(t.exit_codes("free"), [0], "{t}");
    assert_eq!(status.qos_class.as_deref(), Some("Burstable"));

    let (_, status) = node
        .run(&one("besteffort", "{p1}", "[exit, \"0\"]"), LIMIT)
        .await;
    assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));

    let guaranteed = r#"
apiVersion: v1
kind: Pod
metadata: { name: guaranteed }
spec:
  restartPolicy: Never
  containers:
  - { name: c, image: "{p1}", args: [exit, "0"], resources: { limits: { memory: 64Mi, cpu: 200m } } }
"#;
    let (_, status) = node.run(guaranteed, LIMIT).await;
    assert_eq!(status.qos_class.as_deref(), Some("Guaranteed"));
}

/// Pod-level `spec.resources` (PodLevelResources): its memory limit holds the containers'
/// memory together (each alone would fit; the second past the pod's limit is OOMKilled while
/// the first runs on), its CPU limit holds them together (two spinners under `cpu: 500m` use
/// about half a core between them), it decides the QoS class, and its requests must cover the
/// containers'.
#[tokio::test]
async fn pod_level_resources_cap_the_containers_together() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: shared-limit }
spec:
  restartPolicy: Never
  resources: { limits: { memory: 24Mi } }
  volumes: [ { name: data, emptyDir: {} } ]
  initContainers:
  - name: first
    image: "{p1}"
    restartPolicy: Always
    args: [alloc, "12", write, /data/ready, x, sleep, "600000"]
    volumeMounts: [ { name: data, mountPath: /data } ]
    startupProbe: { exec: { command: [agnhost, exists, /data/ready] }, periodSeconds: 1 }
  containers:
  - { name: second, image: "{p1}", args: [alloc, "12", sleep, "600000"] }
"#,
        )
        .await;
    let status = tokio::time::timeout(LIMIT, pod.wait()).await.unwrap();
    assert_eq!(
        terminated(&status, "second").reason.as_deref(),
        Some("OOMKilled")
    );
    // The sidecar kept its memory, and was stopped (TERM) only as the pod ended.
    assert_eq!(terminated(&status, "first").exit_code, 143, "{status:#?}");
    assert_eq!(status.qos_class.as_deref(), Some("Burstable"));
    remove(&pod).await;

    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: shared-cpu }
spec:
  resources: { limits: { cpu: 500m, memory: 64Mi } }
  containers:
  - { name: a, image: "{p1}", args: [loop] }
  - { name: b, image: "{p1}", args: [loop] }
"#,
        )
        .await;
    let status = running(&pod, &["a", "b"]).await;
    // Limits alone default the requests to them: Guaranteed, from the pod's resources.
    assert_eq!(status.qos_class.as_deref(), Some("Guaranteed"));
    let used = || pod.usage().iter().map(|c| c.cpu).sum::<Duration>();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (before, wall) = (used(), std::time::Instant::now());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let share = (used() - before).as_secs_f64() / wall.elapsed().as_secs_f64();
    // Two unlimited spinners would use up to two cores.
    assert!(
        share < 0.75,
        "two spinners under a pod limit of 500m used {share:.2} of a core"
    );
    remove(&pod).await;

    let err = node.invalid(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: bad }
spec:
  resources: { requests: { memory: 8Mi, nvidia.com/gpu: "1" }, limits: { cpu: 200m } }
  containers:
  - { name: a, image: "{p1}", resources: { requests: { memory: 16Mi }, limits: { cpu: 500m } } }
"#,
    );
    for expected in [
        "spec.resources.requests.nvidia.com/gpu: not supported: pod-level resources may be cpu and memory",
        "spec.resources.requests.memory: must be greater than or equal to aggregate container requests",
        "spec.containers[0].resources.limits.cpu: must be less than or equal to the pod-level cpu limit",
    ] {
        assert!(err.contains(expected), "{expected:?} missing in:\n{err}");
    }
}

/// What a pod uses lists its running containers only: an ended container drops out as its
/// exit reaches the status, and a deleted pod lists none (what `kubectl top` shows).
#[tokio::test]
async fn usage_lists_running_containers_only() {
    let node = TestNode::new();
    let pod = node
        .start(
            &PodYaml::new("usage")
                .never()
                .container(&container_yaml("spin", "{p1}", "[loop]"))
                .container(&container_yaml(
                    "brief",
                    "{p1}",
                    "[alloc, \"4\", exit, \"3\"]",
                ))
                .build(),
        )
        .await;
    wait_for(&pod, LIMIT, |s| {
        is_running(s, "spin")
            && container(s, "brief")
                .state
                .as_ref()
                .is_some_and(|s| s.terminated.is_some())
    })
    .await;
    let names: Vec<String> = pod.usage().into_iter().map(|u| u.name).collect();
    assert_eq!(names, ["spin"]);
    remove(&pod).await;
    assert_eq!(pod.usage(), []);
}

/// Resource errors name their field.
#[test]
fn invalid_resources_are_rejected() {
    let node = TestNode::new();
    let err = node.invalid(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: bad }
spec:
  containers:
  - { name: a, image: "{p1}", resources: { limits: { memory: 12XB } } }
  - { name: b, image: "{p1}", resources: { limits: { memory: 1Mi }, requests: { memory: 2Mi } } }
  - { name: c, image: "{p1}", resources: { limits: { cpu: 500m }, requests: { cpu: "1" } } }
"#,
    );
    assert!(
        err.contains("spec.containers[0].resources.limits.memory: invalid quantity \"12XB\""),
        "{err}"
    );
    assert!(err.contains("spec.containers[1].resources.requests.memory: must be less than or equal to the memory limit"), "{err}");
    assert!(
        err.contains(
            "spec.containers[2].resources.requests.cpu: must be less than or equal to the cpu limit"
        ),
        "{err}"
    );
}
