//! Eviction under memory pressure, in the kubelet's order: pods using more than they request
//! first, lowest priority first, then the largest use above the request; a pod within its
//! requests is never evicted for another's excess.

use std::time::Duration;

use wasmpod::Reason::*;
use wasmpod::{Allocatable, LogOptions, NodeOptions, PodHandle};
use wasmpod_tests::{
    PodYaml, TestNode, Timeline, condition, is_running, priority_class, read_classes, running,
};

const LIMIT: Duration = Duration::from_secs(20);

/// A pod that allocates `mib` MiB, says so, and sleeps; it requests `request`.
fn hog(name: &str, class: &str, request: &str, mib: u32) -> String {
    PodYaml::new(name)
        .never()
        .spec(&format!("priorityClassName: {class}"))
        .container(&format!(
            r#"{{ name: c, image: "{{p1}}", args: [alloc, "{mib}", sleep, "600000"], resources: {{ requests: {{ memory: {request} }} }} }}"#
        ))
        .build()
}

/// Starts a hog and waits until it has allocated (read from its log, followed).
async fn start(node: &TestNode, yaml: &str) -> PodHandle {
    let pod = node.start(yaml).await;
    running(&pod, &["c"]).await;
    let mut logs = pod.logs("c", LogOptions::default().follow()).unwrap();
    let line = tokio::time::timeout(LIMIT, logs.next()).await.unwrap();
    assert!(
        line.unwrap().line.starts_with("allocated"),
        "{}",
        pod.name()
    );
    pod
}

async fn evicted(pod: &PodHandle) -> Timeline {
    let s = tokio::time::timeout(LIMIT, pod.wait()).await.unwrap();
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some("Evicted"));
    let (status, reason, _) = condition(&s, "DisruptionTarget");
    assert_eq!(
        (status.as_str(), reason.as_deref()),
        ("True", Some("TerminationByKubelet"))
    );
    let events = Timeline::so_far(pod).await;
    assert_eq!(events.pod_positions(Evicted).len(), 1, "{events}");
    events
}

#[tokio::test]
async fn memory_pressure_evicts_in_the_kubelets_order() {
    let classes = [
        priority_class("low", 1, ""),
        priority_class("high", 100, ""),
    ]
    .concat();
    let classes = read_classes(&classes).unwrap();
    // Evict when the guests hold more than 60 MiB of linear memory.
    let node = TestNode::with(|o: NodeOptions| {
        o.priority_classes(classes)
            .allocatable(Allocatable::from_machine())
            .eviction_threshold(60 << 20)
    });
    // Two low-priority pods above their requests, by ~9 and ~17 MiB: 28 MiB in all.
    let small = start(&node, &hog("small", "low", "1Mi", 8)).await;
    let big = start(&node, &hog("big", "low", "1Mi", 16)).await;
    assert!(node.node.memory_in_use() < 60 << 20);
    // A pod within its requests takes the node past the threshold: of the two that exceed
    // theirs at the same priority, the one furthest above its request goes.
    let within = start(&node, &hog("within", "low", "64Mi", 40)).await;
    let big_events = evicted(&big).await;
    let message = &big_events.0[big_events.pod_positions(Evicted)[0]].message;
    assert!(
        message.starts_with("The node was low on resource: memory. Threshold quantity: 60Mi"),
        "{message}"
    );
    assert!(is_running(&small.status(), "c"));
    // Its memory went back to the node when its instance ended, before it was finished.
    assert!(node.node.memory_in_use() < 60 << 20);

    // A high-priority pod above its request by more than `small`: `small` (low priority)
    // still goes first; then `high` itself, as `within` is within its requests.
    let high = node.start(&hog("high", "high", "1Mi", 24)).await;
    let small_events = evicted(&small).await;
    let high_events = evicted(&high).await;
    assert!(
        small_events.time(small_events.pod_positions(Evicted)[0])
            < high_events.time(high_events.pod_positions(Evicted)[0])
    );
    // Below the threshold again, the node stops evicting.
    assert!(
        is_running(&within.status(), "c"),
        "a pod within its requests stays"
    );
    assert!(
        Timeline::so_far(&within)
            .await
            .pod_positions(Evicted)
            .is_empty()
    );
    assert!(node.node.memory_in_use() <= 60 << 20);
    within.delete(Some(Duration::ZERO));
}
