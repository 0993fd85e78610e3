//! The node's admission: allocatable resources, pods Pending with the scheduler's reason,
//! priority classes, the pending queue in priority order, preemption and non-preempting pods.

use std::time::{Duration, SystemTime};

use wasmpod::Reason::*;
use wasmpod::k8s_openapi::api::core::v1::PodStatus;
use wasmpod::{Allocatable, Error, NodeOptions, PodOptions};
use wasmpod_tests::{
    PodYaml, TestNode, Timeline, condition, is_running, priority_class, read_classes, remove,
    running, unschedulable, wait_for,
};

const LIMIT: Duration = Duration::from_secs(20);

/// The test classes: `low` 1, `mid` 5, `high` 10, `high-waits` 10 that does not preempt, `top` 100.
fn classes() -> String {
    [
        priority_class("low", 1, ""),
        priority_class("mid", 5, ""),
        priority_class("high", 10, ""),
        priority_class("high-waits", 10, "preemptionPolicy: Never"),
        priority_class("top", 100, ""),
    ]
    .concat()
}

/// A node with the test classes (read from YAML, as `wasmpod run --config` does), `memory_mib`
/// of allocatable memory and room for `pods` pods.
fn node(memory_mib: u64, pods: u64, more: &str) -> TestNode {
    let classes = read_classes(&format!("{}{more}", classes())).unwrap();
    TestNode::with(|o: NodeOptions| {
        o.allocatable(
            Allocatable::from_machine()
                .memory(memory_mib << 20)
                .pods(pods),
        )
        .priority_classes(classes)
    })
}

/// A pod of one container that handles TERM by exiting 300 ms later; `class` may be empty.
fn pod(name: &str, class: &str, memory: &str, args: &str) -> String {
    let mut pod = PodYaml::new(name)
        .never()
        .spec("terminationGracePeriodSeconds: 5");
    if !class.is_empty() {
        pod = pod.spec(&format!("priorityClassName: {class}"));
    }
    pod.container(&format!(
        r#"{{ name: c, image: "{{term}}", args: {args}, resources: {{ requests: {{ memory: {memory} }} }} }}"#
    ))
    .build()
}

const SLEEPS: &str = r#"[on-term, "0", "300", print, up, sleep, "600000"]"#;

fn scheduled(status: &PodStatus) -> (String, Option<String>, Option<String>) {
    condition(status, "PodScheduled")
}

/// The time of the pod's first event with `reason` (container or pod level).
fn time_of(timeline: &Timeline, reason: wasmpod::Reason) -> SystemTime {
    let i = timeline
        .0
        .iter()
        .position(|e| e.reason == reason)
        .unwrap_or_else(|| panic!("no {reason:?} in\n{timeline}"));
    timeline.time(i)
}

/// A pod whose requests do not fit stays Pending with the scheduler's reason and starts once
/// room is made; pod count and CPU are resources too.
#[tokio::test]
async fn pods_that_do_not_fit_wait_pending() {
    let node = node(256, 2, "");
    let big = node.start(&pod("big", "", "200Mi", SLEEPS)).await;
    running(&big, &["c"]).await;
    assert_eq!(scheduled(&big.status()).0, "True");

    let waiting = node.start(&pod("waiting", "", "100Mi", SLEEPS)).await;
    let message = unschedulable(&waiting, LIMIT).await;
    assert!(
        message.starts_with("0/1 nodes are available: 1 Insufficient memory."),
        "{message}"
    );
    assert!(
        waiting.status().start_time.is_none(),
        "an unscheduled pod has no start time"
    );
    let err = waiting
        .logs("c", wasmpod::LogOptions::default())
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "container \"c\" in pod \"waiting\" is waiting to start: ContainerCreating"
    );
    let events = Timeline::so_far(&waiting).await;
    assert_eq!(events.pod_positions(FailedScheduling).len(), 1, "{events}");
    assert!(events.positions("c", Created).is_empty(), "{events}");

    // Two pods fill the node's pod count: a third best-effort pod waits too.
    let small = node.start(&pod("small", "", "10Mi", SLEEPS)).await;
    running(&small, &["c"]).await;
    let third = node.start(&pod("third", "", "0", SLEEPS)).await;
    let message = unschedulable(&third, LIMIT).await;
    assert!(message.contains("1 Too many pods"), "{message}");

    // Deleting the big pod makes room for `waiting` (oldest first) but not yet for `third`.
    big.delete(None);
    running(&waiting, &["c"]).await;
    let big_events = Timeline::collect(&big).await;
    let waiting_events = Timeline::so_far(&waiting).await;
    assert!(
        time_of(&waiting_events, Started) > big_events.time(big_events.last("c", Exited)),
        "started before the big pod stopped:\n{big_events}\n{waiting_events}"
    );
    assert!(waiting.status().start_time.is_some());
    assert_eq!(third.status().phase.as_deref(), Some("Pending"));
    small.delete(Some(Duration::ZERO));
    running(&third, &["c"]).await;

    // CPU: a request larger than the node is never admitted.
    let cpu = Allocatable::from_machine().cpu_milli + 1;
    let greedy = node
        .start(
            &pod("greedy", "", "0", SLEEPS).replace("{ memory: 0 }", &format!("{{ cpu: {cpu}m }}")),
        )
        .await;
    let message = unschedulable(&greedy, LIMIT).await;
    assert!(message.contains("Insufficient cpu"), "{message}");
    // Deleting a pod that never started is immediate.
    greedy.delete(None);
    tokio::time::timeout(LIMIT, greedy.deleted()).await.unwrap();
    for pod in [&waiting, &third] {
        pod.delete(Some(Duration::ZERO));
    }
}

/// Containers running at once count against the node's instances: room for 10 pods but 3
/// containers lets a pod of two containers and a sidecar run, and a one-container pod waits
/// until it is gone.
#[tokio::test]
async fn containers_count_against_the_nodes_instances_not_only_pods() {
    let node = TestNode::with(|o: NodeOptions| {
        o.allocatable(Allocatable::from_machine().pods(10).containers(3))
    });
    let three = PodYaml::new("three")
        .never()
        .init(r#"{ name: side, image: "{p1}", restartPolicy: Always, args: [sleep, "600000"] }"#)
        .container(r#"{ name: a, image: "{p1}", args: [sleep, "600000"] }"#)
        .container(r#"{ name: c, image: "{p1}", args: [sleep, "600000"] }"#)
        .build();
    let three = node.start(&three).await;
    running(&three, &["c"]).await;
    let one = node.start(&pod("one", "", "0", SLEEPS)).await;
    let message = unschedulable(&one, LIMIT).await;
    assert!(
        message.contains("1 Insufficient wasmpod.dev/containers"),
        "{message}"
    );
    three.delete(Some(Duration::ZERO));
    running(&one, &["c"]).await;
    remove(&one).await;
}

/// The default container count leaves the process within its memory-mapping limit.
#[test]
fn the_default_container_count_fits_the_mapping_limit() {
    let a = Allocatable::from_machine();
    let max_map_count: u64 = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Six mappings per live instance, and a reserve for the runtime, probes and hooks.
    assert!(a.containers * 6 + 4096 <= max_map_count, "{a:?}");
    assert!(a.pods <= a.containers, "{a:?}");
}

/// Pending pods are admitted highest priority first, whatever their order of creation.
#[tokio::test]
async fn pending_pods_start_in_priority_order() {
    let node = node(1024, 1, "");
    let blocker = node.start(&pod("blocker", "high", "0", SLEEPS)).await;
    running(&blocker, &["c"]).await;
    let quick = r#"[print, done]"#;
    let low = node.start(&pod("low", "low", "0", quick)).await;
    let mid = node.start(&pod("mid", "mid", "0", quick)).await;
    let default = node.start(&pod("default", "", "0", quick)).await;
    for pod in [&low, &mid, &default] {
        // None can preempt the higher-priority blocker.
        let message = unschedulable(pod, LIMIT).await;
        assert!(message.contains("No preemption victims found"), "{message}");
    }
    blocker.delete(Some(Duration::ZERO));
    let mut started = Vec::new();
    for pod in [&low, &mid, &default] {
        tokio::time::timeout(LIMIT, pod.wait()).await.unwrap();
        started.push((
            time_of(&Timeline::so_far(pod).await, Started),
            pod.name().to_owned(),
        ));
    }
    started.sort();
    let order: Vec<&str> = started.iter().map(|(_, n)| n.as_str()).collect();
    // A pod without a class has priority 0: after `low` (1).
    assert_eq!(order, ["mid", "low", "default"]);
    // Each started only after the one before it had stopped (room for one pod).
    let mid_events = Timeline::so_far(&mid).await;
    let low_events = Timeline::so_far(&low).await;
    assert!(time_of(&low_events, Started) > mid_events.time(mid_events.last("c", Exited)));
}

/// A pod that does not fit preempts the fewest pods of the lowest priority that make room: they
/// are deleted gracefully (`Preempted`, their own grace period), it starts once they are gone,
/// and pods of equal or higher priority are never touched.
#[tokio::test]
async fn preemption_takes_the_lowest_priority_victims() {
    let node = node(400, 100, "");
    let a = node.start(&pod("a", "low", "100Mi", SLEEPS)).await;
    let b = node.start(&pod("b", "mid", "100Mi", SLEEPS)).await;
    let c = node.start(&pod("c", "high", "200Mi", SLEEPS)).await;
    for pod in [&a, &b, &c] {
        running(pod, &["c"]).await;
    }
    // Equal priority: `c` (10) is not a victim for another 10, so only a and b could be,
    // and they would not make room for 300Mi.
    let equal = node.start(&pod("equal", "high", "300Mi", SLEEPS)).await;
    let message = unschedulable(&equal, LIMIT).await;
    assert!(message.contains("No preemption victims found"), "{message}");
    equal.delete(None);
    equal.deleted().await;

    // `top` (100) needs 200Mi: removing `c` alone would do, but the victims are the pods of
    // the lowest priority that make room: a and b.
    let top = node.start(&pod("top", "top", "200Mi", SLEEPS)).await;
    // While its victims stop (300 ms each), it is nominated to this node.
    let s = wait_for(&top, LIMIT, |s| {
        s.nominated_node_name.is_some() || is_running(s, "c")
    })
    .await;
    assert_eq!(s.nominated_node_name, Some(node_name()));
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let s = running(&top, &["c"]).await;
    assert_eq!(s.nominated_node_name, None);
    let (a_events, b_events) = (Timeline::collect(&a).await, Timeline::collect(&b).await);
    let top_events = Timeline::so_far(&top).await;
    for victim in [&a, &b] {
        let (status, reason, _) = condition(&victim.status(), "DisruptionTarget");
        assert_eq!(
            (status.as_str(), reason.as_deref()),
            ("True", Some("PreemptionByScheduler"))
        );
    }
    for (victim, events) in [("a", &a_events), ("b", &b_events)] {
        let preempted = events.pod_positions(Preempted);
        assert_eq!(preempted.len(), 1, "{victim}:\n{events}");
        assert_eq!(
            events.0[preempted[0]].message,
            format!("Preempted by pod default/top on node {}", node_name())
        );
        // Gracefully, with the pod's own grace period: TERM, then the guest's own exit.
        let terminating = events.pod_positions(Terminating)[0];
        assert!(terminating > preempted[0]);
        assert_eq!(
            events.0[terminating].message,
            "Deleting pod with grace period 5s"
        );
        assert_eq!(events.exit_codes("c"), [0], "{victim}:\n{events}");
        assert!(
            time_of(&top_events, Started) > events.time(events.last("c", Exited)),
            "top started before {victim} stopped:\n{events}\n{top_events}"
        );
    }
    // It said why it waited, once.
    assert_eq!(
        top_events.pod_positions(FailedScheduling).len(),
        1,
        "{top_events}"
    );
    assert!(
        is_running(&c.status(), "c"),
        "c (priority 10) was not a victim"
    );
    assert!(
        Timeline::so_far(&c)
            .await
            .pod_positions(Preempted)
            .is_empty()
    );
    for pod in [&c, &top] {
        pod.delete(Some(Duration::ZERO));
    }
}

/// A pod with `preemptionPolicy: Never` waits for room instead of preempting, ahead of
/// lower-priority pending pods.
#[tokio::test]
async fn non_preempting_pods_wait() {
    let node = node(200, 100, "");
    let low = node.start(&pod("low", "low", "200Mi", SLEEPS)).await;
    running(&low, &["c"]).await;
    let waits = node
        .start(&pod("waits", "high-waits", "100Mi", SLEEPS))
        .await;
    let message = unschedulable(&waits, LIMIT).await;
    assert!(
        message.ends_with("preemption: not eligible due to preemptionPolicy=Never."),
        "{message}"
    );
    assert_eq!(waits.status().nominated_node_name, None);
    // Another lower-priority pod queued behind it does not jump ahead once there is room.
    let later = node.start(&pod("later", "low", "150Mi", SLEEPS)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        Timeline::so_far(&low)
            .await
            .pod_positions(Preempted)
            .is_empty()
    );
    assert!(is_running(&low.status(), "c"));
    low.delete(None);
    running(&waits, &["c"]).await;
    assert_eq!(later.status().phase.as_deref(), Some("Pending"));
    for pod in [&waits, &later] {
        pod.delete(Some(Duration::ZERO));
    }
}

/// Priority classes: a pod naming an unknown one is refused; the global default applies to pods
/// without a class; two global defaults are an error.
#[tokio::test]
async fn priority_classes_resolve_at_admission() {
    let default = priority_class("everyday", 3, "globalDefault: true");
    let node = node(100, 100, &default);
    let unknown = node
        .node
        .create_pod(
            node.spec(&pod("x", "nope", "0", SLEEPS)),
            PodOptions::default(),
        )
        .await;
    match unknown {
        Err(e @ Error::UnknownPriorityClass(_)) => assert_eq!(
            e.to_string(),
            "spec.priorityClassName: no PriorityClass with name nope was found"
        ),
        other => panic!(
            "expected UnknownPriorityClass, got {:?}",
            other.map(|p| p.status())
        ),
    }
    // The name is free again after the refusal.
    let low = node.start(&pod("x", "low", "100Mi", SLEEPS)).await;
    running(&low, &["c"]).await;
    // Without a class, the pod gets the global default (3 > 1): it preempts `low`.
    let plain = node.start(&pod("plain", "", "100Mi", SLEEPS)).await;
    running(&plain, &["c"]).await;
    let events = Timeline::collect(&low).await;
    assert_eq!(events.pod_positions(Preempted).len(), 1, "{events}");
    plain.delete(Some(Duration::ZERO));

    let twice = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        twice.path(),
        format!("{default}{}", default.replace("everyday", "other")),
    )
    .unwrap();
    let classes = wasmpod::read_priority_classes(twice.path()).unwrap();
    let err = wasmpod::Node::new(NodeOptions::default().priority_classes(classes))
        .expect_err("two global defaults");
    assert!(
        err.to_string()
            .contains("only one PriorityClass can be the global default")
    );

    let bad = priority_class("huge", 2_000_000_000, "preemptionPolicy: Sometimes");
    let err = read_classes(&bad).unwrap_err();
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["document 1.value", "document 1.preemptionPolicy"]);
}

fn node_name() -> String {
    NodeOptions::default().node_name
}

/// `nodeSelector` against the node's labels (the kubelet's own and the node's options): a pod
/// that matches runs; one that does not stays Pending with the scheduler's reason, whatever room
/// the node has, and runs on a node that has the label.
#[tokio::test]
async fn node_selector_matches_the_node_labels() {
    let pod = |name: &str, selector: &str| {
        PodYaml::new(name)
            .never()
            .spec(&format!("nodeSelector: {selector}"))
            .container(r#"{ name: c, image: "{p1}", args: [print, ran] }"#)
            .build()
    };
    let node = TestNode::new();
    assert_eq!(node.node.labels()["kubernetes.io/os"], "linux");
    let (_, status) = node
        .run(&pod("linux", "{ kubernetes.io/os: linux }"), LIMIT)
        .await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let ssd = node.start(&pod("ssd", "{ disk: ssd }")).await;
    let message = unschedulable(&ssd, LIMIT).await;
    assert!(
        message.starts_with(
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
        ),
        "{message}"
    );
    assert!(
        node.node
            .check_fits(&node.spec(&pod("ssd", "{ disk: ssd }")))
            .is_err()
    );
    ssd.delete(None);
    ssd.deleted().await;
    let labelled = TestNode::with(|o| o.labels([("disk", "ssd")]));
    let (_, status) = labelled.run(&pod("ssd", "{ disk: ssd }"), LIMIT).await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
}

/// Required node affinity, against the node's labels and name as the scheduler's NodeAffinity
/// filter: a pod whose terms match runs; one whose terms do not stays Pending with the
/// scheduler's reason. Preferred terms only score, so they never keep a pod from a node.
#[tokio::test]
async fn required_node_affinity_matches_the_node() {
    let node = TestNode::with(|o| {
        o.node_name("edge-1")
            .labels([("zone", "a"), ("cores", "8")])
    });
    let pod = |name: &str, terms: &str| {
        PodYaml::new(name)
            .never()
            .spec(&format!(
                "affinity: {{ nodeAffinity: {{ requiredDuringSchedulingIgnoredDuringExecution: {{ nodeSelectorTerms: {terms} }}, preferredDuringSchedulingIgnoredDuringExecution: [ {{ weight: 1, preference: {{ matchExpressions: [ {{ key: zone, operator: In, values: [b] }} ] }} }} ] }} }}"
            ))
            .container(r#"{ name: c, image: "{p1}", args: [print, ran] }"#)
            .build()
    };
    for (name, terms) in [
        (
            "in",
            "[ { matchExpressions: [ { key: zone, operator: In, values: [a, b] } ] } ]",
        ),
        (
            "gt",
            "[ { matchExpressions: [ { key: cores, operator: Gt, values: [\"4\"] } ] } ]",
        ),
        (
            "named",
            "[ { matchFields: [ { key: metadata.name, operator: In, values: [edge-1] } ] } ]",
        ),
        (
            "either",
            "[ { matchExpressions: [ { key: gpu, operator: Exists } ] }, { matchExpressions: [ { key: kubernetes.io/os, operator: In, values: [linux] } ] } ]",
        ),
    ] {
        let (_, status) = node.run(&pod(name, terms), LIMIT).await;
        assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{name}");
    }
    let gpu = pod(
        "gpu",
        "[ { matchExpressions: [ { key: gpu, operator: Exists } ] } ]",
    );
    assert!(node.node.check_fits(&node.spec(&gpu)).is_err());
    let pending = node.start(&gpu).await;
    let message = unschedulable(&pending, LIMIT).await;
    assert!(
        message.starts_with(
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
        ),
        "{message}"
    );
    pending.delete(None);
    pending.deleted().await;
}

/// `nodeName` binds a pod to a node: this node's name runs it, another one leaves it Pending
/// with the scheduler's reason.
#[tokio::test]
async fn node_name_binds_the_pod() {
    let node = TestNode::with(|o| o.node_name("edge-1"));
    let pod = |name: &str, node_name: &str| {
        PodYaml::new(name)
            .never()
            .spec(&format!("nodeName: {node_name}"))
            .container(r#"{ name: c, image: "{p1}", args: [print, ran] }"#)
            .build()
    };
    let (_, status) = node.run(&pod("here", "edge-1"), LIMIT).await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let elsewhere = node.start(&pod("there", "edge-2")).await;
    let message = unschedulable(&elsewhere, LIMIT).await;
    assert!(
        message.starts_with(
            "0/1 nodes are available: 1 node(s) didn't match the requested node name."
        ),
        "{message}"
    );
    elsewhere.delete(None);
    elsewhere.deleted().await;
}

/// A pod asking for a resource the node does not advertise (a GPU, hugepages) is a valid pod
/// that stays Pending with the scheduler's reason, as on a cluster node without it;
/// `ephemeral-storage` is accepted and runs (a wasm container has no writable layer to budget).
#[tokio::test]
async fn unadvertised_resources_leave_the_pod_pending() {
    let node = TestNode::new();
    let pod = |name: &str, resources: &str| {
        PodYaml::new(name)
            .never()
            .container(&format!(
                r#"{{ name: c, image: "{{p1}}", args: [print, ran], resources: {resources} }}"#
            ))
            .build()
    };
    let (_, status) = node
        .run(
            &pod(
                "storage",
                "{ limits: { ephemeral-storage: 1Gi, memory: 64Mi }, requests: { ephemeral-storage: 10Mi } }",
            ),
            LIMIT,
        )
        .await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let gpu = node
        .start(&pod(
            "gpu",
            "{ limits: { nvidia.com/gpu: 1, hugepages-2Mi: 4Mi, memory: 64Mi } }",
        ))
        .await;
    let message = unschedulable(&gpu, LIMIT).await;
    assert!(
        message.starts_with(
            "0/1 nodes are available: 1 Insufficient hugepages-2Mi, 1 Insufficient \
             nvidia.com/gpu."
        ),
        "{message}"
    );
    gpu.delete(None);
    gpu.deleted().await;
}

/// Taints against tolerations: a `NoSchedule` taint keeps a pod that does not tolerate it
/// Pending with the scheduler's reason; one that tolerates it (by key and value, or `Exists`)
/// runs; a `PreferNoSchedule` taint is only a preference.
#[tokio::test]
async fn taints_need_tolerations() {
    let node = TestNode::with(|o| {
        o.taints([
            taint("dedicated", "wasm", "NoSchedule"),
            taint("spot", "", "PreferNoSchedule"),
        ])
    });
    let pod = |name: &str, tolerations: &str| {
        PodYaml::new(name)
            .never()
            .spec(&format!("tolerations: {tolerations}"))
            .container(r#"{ name: c, image: "{p1}", args: [print, ran] }"#)
            .build()
    };
    for (name, tolerations) in [
        (
            "equal",
            "[ { key: dedicated, operator: Equal, value: wasm, effect: NoSchedule } ]",
        ),
        ("exists", "[ { operator: Exists } ]"),
    ] {
        let (_, status) = node.run(&pod(name, tolerations), LIMIT).await;
        assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{name}");
    }
    let intolerant = node.start(&pod("intolerant", "[]")).await;
    let message = unschedulable(&intolerant, LIMIT).await;
    assert!(
        message.starts_with(
            "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: wasm}."
        ),
        "{message}"
    );
    intolerant.delete(None);
    intolerant.deleted().await;
}

fn taint(key: &str, value: &str, effect: &str) -> wasmpod::k8s_openapi::api::core::v1::Taint {
    wasmpod::k8s_openapi::api::core::v1::Taint {
        key: key.into(),
        value: Some(value.into()),
        effect: effect.into(),
        time_added: None,
    }
}

/// A `NoExecute` taint keeps out pods that do not tolerate it; a pod that tolerates it for
/// `tolerationSeconds` runs, then is deleted when they run out, as the taint eviction controller
/// deletes it (`DisruptionTarget`: `DeletionByTaintManager`); tolerated for ever, a pod stays.
#[tokio::test]
async fn no_execute_tolerations_run_out() {
    let node = TestNode::with(|o| o.taints([taint("maintenance", "soon", "NoExecute")]));
    let pod = |name: &str, tolerations: &str| {
        PodYaml::new(name)
            .spec("terminationGracePeriodSeconds: 0")
            .spec(&format!("tolerations: {tolerations}"))
            .container(r#"{ name: c, image: "{p1}", args: [print, up, sleep, "600000"] }"#)
            .build()
    };
    let intolerant = node.start(&pod("intolerant", "[]")).await;
    let message = unschedulable(&intolerant, LIMIT).await;
    assert!(
        message.starts_with(
            "0/1 nodes are available: 1 node(s) had untolerated taint {maintenance: soon}."
        ),
        "{message}"
    );
    let started = std::time::Instant::now();
    let brief = node
        .start(&pod(
            "brief",
            "[ { key: maintenance, operator: Exists, effect: NoExecute, tolerationSeconds: 1 } ]",
        ))
        .await;
    let ever = node
        .start(&pod(
            "ever",
            "[ { key: maintenance, operator: Exists, effect: NoExecute } ]",
        ))
        .await;
    running(&ever, &["c"]).await;
    let s = wait_for(&brief, LIMIT, |s| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "DisruptionTarget")
    })
    .await;
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(
        condition(&s, "DisruptionTarget"),
        (
            "True".into(),
            Some("DeletionByTaintManager".into()),
            Some("Taint manager: deleting due to NoExecute taint".into())
        )
    );
    tokio::time::timeout(LIMIT, brief.deleted()).await.unwrap();
    let events = Timeline::collect(&brief).await;
    assert_eq!(events.pod_positions(Terminating).len(), 1, "{events}");
    assert!(is_running(&ever.status(), "c"));
    for p in [intolerant, ever] {
        remove(&p).await;
    }
}

/// `runtimeClassName`: the names wasm pods carry in the wild run here; another name fails as
/// the API server fails it until a RuntimeClass of that name is given to the node, and a class
/// whose handler the node does not run fails as the runtime does.
#[tokio::test]
async fn runtime_classes_resolve_at_creation() {
    use wasmpod::k8s_openapi::api::node::v1::RuntimeClass;
    let node = TestNode::new();
    let pod = |name: &str, class: &str| {
        PodYaml::new(name)
            .never()
            .spec(&format!("runtimeClassName: {class}"))
            .container(r#"{ name: c, image: "{p1}", args: [print, ran] }"#)
            .build()
    };
    for class in ["wasmpod", "spin", "crun"] {
        let (_, status) = node.run(&pod(class, class), LIMIT).await;
        assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{class}");
    }
    let create = |name: &str, class: &str| {
        node.node
            .create_pod(node.spec(&pod(name, class)), PodOptions::default())
    };
    let err = create("edge", "edge-wasm").await.unwrap_err();
    assert!(matches!(err, Error::UnknownRuntimeClass(_)));
    assert_eq!(
        err.to_string(),
        "spec.runtimeClassName: RuntimeClass \"edge-wasm\" not found"
    );
    let class = |name: &str, handler: &str| {
        let mut c = RuntimeClass {
            handler: handler.into(),
            ..RuntimeClass::default()
        };
        c.metadata.name = Some(name.into());
        c
    };
    node.node
        .set_runtime_classes(&[class("edge-wasm", "wasmtime"), class("sandboxed", "runsc")]);
    let (_, status) = node.run(&pod("edge", "edge-wasm"), LIMIT).await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let err = create("sandboxed", "sandboxed").await.unwrap_err();
    assert!(
        err.to_string()
            .contains("RuntimeClass \"sandboxed\" has handler \"runsc\": no runtime for \"runsc\" is configured"),
        "{err}"
    );
}

/// `priority` and `preemptionPolicy`, which an exported pod carries, are accepted when they are
/// what the pod's PriorityClass gives, and refused as the API server refuses them otherwise;
/// service account names are accepted (no token is mounted).
#[tokio::test]
async fn written_priorities_must_match_the_class() {
    let node = TestNode::new();
    let pod = |name: &str, lines: &[&str]| {
        let mut pod = PodYaml::new(name).never();
        for line in lines {
            pod = pod.spec(line);
        }
        pod.container(r#"{ name: c, image: "{p1}", args: [print, ran] }"#)
            .build()
    };
    let exported = [
        "priority: 0",
        "preemptionPolicy: PreemptLowerPriority",
        "serviceAccountName: default",
        "serviceAccount: default",
    ];
    let (_, status) = node.run(&pod("exported", &exported), LIMIT).await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let err = node
        .node
        .create_pod(
            node.spec(&pod("forged", &["priority: 7"])),
            PodOptions::default(),
        )
        .await
        .expect_err("a priority the class does not give");
    assert!(
        err.to_string().starts_with(
            "spec.priority: the integer value of priority (7) must not be provided in pod spec"
        ),
        "{err}"
    );
    let err = node
        .node
        .create_pod(
            node.spec(&pod("never", &["preemptionPolicy: Never"])),
            PodOptions::default(),
        )
        .await
        .expect_err("a preemption policy the class does not give");
    assert!(
        err.to_string().contains("computed PreemptLowerPriority"),
        "{err}"
    );
}
