//! Stopping containers: TERM's default action, guests that handle TERM, KILL at the grace
//! deadline through epoch interruption (computing or blocked in a host call), and grace periods
//! that can be shortened but never lengthened.

use std::time::Duration;

use wasmpod::Reason::*;
use wasmpod_tests::{TestNode, Timeline, container, wait_for};

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

async fn running(node: &TestNode, yaml: &str) -> wasmpod::PodHandle {
    let pod = node.start(yaml).await;
    wait_for(&pod, LIMIT, |s| {
        container(s, "c").state.as_ref().unwrap().running.is_some()
    })
    .await;
    pod
}

/// A container that does not import the termination interface is stopped at once on TERM.
#[tokio::test]
async fn default_action_stops_within_50ms() {
    let node = TestNode::new();
    for image in ["{p1}", "{p2}"] {
        let pod = running(&node, &yaml("plain", 30, image, r#"[sleep, "100000"]"#)).await;
        pod.delete(None);
        let t = Timeline::collect(&pod).await;
        assert_eq!(t.exit_codes("c"), [143], "{t}");
        let stop = t.between(t.first("c", Killing), t.first("c", Exited));
        assert!(
            stop < Duration::from_millis(50),
            "{image}: stopped after {stop:?}"
        );
        assert_eq!(t.0.last().unwrap().reason, Deleted);
        assert_eq!(t.phases().last(), Some(&"Failed"));
    }
}

/// A guest that handles TERM gets it as a signal and exits cleanly in its own time.
#[tokio::test]
async fn handling_guest_exits_cleanly() {
    let node = TestNode::new();
    let pod = running(
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
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_millis(1000),
        "{took:?}"
    );
    assert!(
        t.0[t.first("c", Killing)]
            .message
            .contains("grace period 30s"),
        "{t}"
    );
    assert_eq!(pod.status().phase.as_deref(), Some("Succeeded"));
}

/// A guest that ignores TERM is killed at the grace deadline, not before and at most 100 ms
/// after: while computing, and while blocked in a host call (preview1 and preview2 sleeps).
#[tokio::test]
async fn ignoring_guest_is_killed_at_the_deadline() {
    let node = TestNode::new();
    let cases = [
        ("loop", "{term}", r#"[loop]"#),
        ("blocked", "{term}", r#"[sleep, "100000"]"#),
    ];
    let mut pods = Vec::new();
    for (name, image, args) in cases {
        pods.push((name, running(&node, &yaml(name, 2, image, args)).await));
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
            took < Duration::from_millis(2100),
            "{name}: killed late, after {took:?}"
        );
    }
}

/// A grace period can be shortened while terminating (zero forces a kill), never lengthened.
#[tokio::test]
async fn grace_can_be_shortened_not_lengthened() {
    let node = TestNode::new();
    let pod = running(
        &node,
        &yaml("shorten", 60, "{term}", r#"[sleep, "100000"]"#),
    )
    .await;
    pod.delete(None);
    pod.delete(Some(Duration::from_secs(120)));
    tokio::time::sleep(Duration::from_millis(50)).await;
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
    let took = t.between(t.first("c", Killing), t.first("c", Exited));
    assert!(took < Duration::from_millis(500), "{took:?}");

    // lengthening is ignored: a 2 s deletion asked again with 60 s still kills at 2 s
    let pod = running(
        &node,
        &yaml("lengthen", 60, "{term}", r#"[sleep, "100000"]"#),
    )
    .await;
    pod.delete(Some(Duration::from_secs(2)));
    pod.delete(Some(Duration::from_secs(60)));
    let t = Timeline::collect(&pod).await;
    let took = t.between(t.first("c", Killing), t.first("c", Exited));
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_millis(2100),
        "{took:?}"
    );
}

/// KILL never waits less than the kubelet's 2 s minimum after TERM, even with a shorter grace.
#[tokio::test]
async fn kill_waits_at_least_two_seconds_after_term() {
    let node = TestNode::new();
    let pod = running(&node, &yaml("min", 1, "{term}", r#"[sleep, "100000"]"#)).await;
    pod.delete(None);
    let t = Timeline::collect(&pod).await;
    let took = t.between(t.first("c", Killing), t.first("c", Exited));
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_millis(2100),
        "{took:?}"
    );
}
