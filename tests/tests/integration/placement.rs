//! Placement against the node's other pods: pod affinity and anti-affinity (the pod's own and
//! the admitted pods'), and topology spread constraints with `minDomains` and a node missing the
//! topology key, each passing and failing with the scheduler's message.

use std::time::Duration;

use wasmpod_tests::{PodYaml, TestNode, remove, running, unschedulable};

const LIMIT: Duration = Duration::from_secs(20);

/// A sleeping pod labelled `app: <app>` with `spec` lines added.
fn pod(name: &str, app: &str, spec: &[&str]) -> String {
    let mut pod = PodYaml::new(name)
        .metadata(&format!("labels: {{ app: {app} }}"))
        .spec("terminationGracePeriodSeconds: 0");
    for line in spec {
        pod = pod.spec(line);
    }
    pod.container(r#"{ name: c, image: "{p1}", args: [print, up, sleep, "600000"] }"#)
        .build()
}

fn node() -> TestNode {
    TestNode::with(|o| o.node_name("edge-1").labels([("zone", "a")]))
}

fn expect(message: &str, reason: &str) {
    assert_eq!(
        message,
        format!(
            "0/1 nodes are available: 1 {reason}. preemption: 0/1 nodes are available: 1 \
             Preemption is not helpful for scheduling."
        )
    );
}

const ANTI_WEB: &str = "affinity: { podAntiAffinity: { requiredDuringSchedulingIgnoredDuringExecution: [ { topologyKey: kubernetes.io/hostname, labelSelector: { matchLabels: { app: web } } } ] } }";

/// One `web` per node: the second waits with the scheduler's reason; a pod the first one's
/// anti-affinity repels waits too; a term whose key the node lacks repels nothing; deleting the
/// first lets the second start.
#[tokio::test]
async fn pod_anti_affinity_keeps_pods_apart() {
    let node = node();
    let first = node.start(&pod("web-1", "web", &[ANTI_WEB])).await;
    running(&first, &["c"]).await;
    let second = node.start(&pod("web-2", "web", &[ANTI_WEB])).await;
    expect(
        &unschedulable(&second, LIMIT).await,
        "node(s) didn't match pod anti-affinity rules",
    );
    let plain = node.start(&pod("plain-web", "web", &[])).await;
    expect(
        &unschedulable(&plain, LIMIT).await,
        "node(s) didn't satisfy existing pods anti-affinity rules",
    );
    // Another namespace is out of the term's reach (its own namespace only, by default).
    let elsewhere = node
        .start(
            &pod("web-3", "web", &[])
                .replace("  name: web-3\n", "  name: web-3\n  namespace: other\n"),
        )
        .await;
    running(&elsewhere, &["c"]).await;
    let rackless = ANTI_WEB.replace("kubernetes.io/hostname", "rack");
    // An `api` pod keeping away from `web` on a key the node lacks runs beside them.
    let by_rack = node.start(&pod("by-rack", "api", &[&rackless])).await;
    running(&by_rack, &["c"]).await;
    remove(&first).await;
    running(&second, &["c"]).await;
    for p in [second, plain, elsewhere, by_rack] {
        remove(&p).await;
    }
}

/// A pod that needs a `db` beside it waits for one and starts when it comes; the first pod of a
/// group that matches its own term runs alone.
#[tokio::test]
async fn pod_affinity_waits_for_its_peer() {
    let node = node();
    let near_db = "affinity: { podAffinity: { requiredDuringSchedulingIgnoredDuringExecution: [ { topologyKey: zone, labelSelector: { matchExpressions: [ { key: app, operator: In, values: [db] } ] } } ] } }";
    let cache = node.start(&pod("cache", "cache", &[near_db])).await;
    expect(
        &unschedulable(&cache, LIMIT).await,
        "node(s) didn't match pod affinity rules",
    );
    // The first `db` may follow its own rule: no pod matches yet and it matches itself.
    let db = node.start(&pod("db", "db", &[near_db])).await;
    running(&db, &["c"]).await;
    running(&cache, &["c"]).await;
    // A term on a key the node lacks is never met, and `racked` is no db to start a group.
    let by_rack = near_db.replace("topologyKey: zone", "topologyKey: rack");
    let racked = node.start(&pod("racked", "cache", &[&by_rack])).await;
    expect(
        &unschedulable(&racked, LIMIT).await,
        "node(s) didn't match pod affinity rules",
    );
    for p in [cache, db, racked] {
        remove(&p).await;
    }
}

/// Topology spread on the node's `zone`: one domain, so a constraint only binds when
/// `minDomains` asks for more domains than there are (the global minimum is then 0); a node
/// without the key never takes a `DoNotSchedule` constraint on it, and `ScheduleAnyway` only
/// scores.
#[tokio::test]
async fn topology_spread_with_min_domains_and_a_missing_key() {
    let node = node();
    let spread = |key: &str, more: &str| {
        format!(
            "topologySpreadConstraints: [ {{ maxSkew: 1, topologyKey: {key}, whenUnsatisfiable: DoNotSchedule, labelSelector: {{ matchLabels: {{ app: spread }} }}{more} }} ]"
        )
    };
    // Without minDomains: skew = 0 + 1 - 0, then 1 + 1 - 1, ... always 1.
    let mut pods = Vec::new();
    for i in 0..3 {
        let p = node
            .start(&pod(&format!("even-{i}"), "spread", &[&spread("zone", "")]))
            .await;
        running(&p, &["c"]).await;
        pods.push(p);
    }
    for p in pods.drain(..) {
        remove(&p).await;
    }
    // minDomains 2 on a node of one zone: the global minimum is 0, so one pod fits (skew 1)
    // and the second (skew 2) does not.
    let min2 = spread("zone", ", minDomains: 2");
    let one = node.start(&pod("md-1", "spread", &[&min2])).await;
    running(&one, &["c"]).await;
    let two = node.start(&pod("md-2", "spread", &[&min2])).await;
    expect(
        &unschedulable(&two, LIMIT).await,
        "node(s) didn't match pod topology spread constraints",
    );
    // A pod its own selector does not match adds nothing: skew 1.
    let other = node.start(&pod("md-other", "other", &[&min2])).await;
    running(&other, &["c"]).await;
    remove(&one).await;
    running(&two, &["c"]).await;

    let rack = pod("racked", "spread", &[&spread("rack", "")]);
    assert!(node.node.check_fits(&node.spec(&rack)).is_err());
    let racked = node.start(&rack).await;
    let message = unschedulable(&racked, LIMIT).await;
    assert!(
        message.starts_with(
            "0/1 nodes are available: 1 node(s) didn't match pod topology spread constraints \
             (missing required label)."
        ),
        "{message}"
    );
    let anyway = pod(
        "anyway",
        "spread",
        &[&spread("rack", "").replace("DoNotSchedule", "ScheduleAnyway")],
    );
    let anyway = node.start(&anyway).await;
    running(&anyway, &["c"]).await;
    for p in [two, other, racked, anyway] {
        remove(&p).await;
    }
}

/// Bad terms and constraints are refused with the API server's messages, at their fields.
#[test]
fn bad_placement_names_the_field() {
    let node = node();
    let message = node.invalid(&pod(
        "bad",
        "web",
        &[
            "affinity: { podAntiAffinity: { requiredDuringSchedulingIgnoredDuringExecution: [ { labelSelector: { matchExpressions: [ { key: app, operator: In } ] } } ] } }",
            "topologySpreadConstraints: [ { maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway, minDomains: 2 } ]",
        ],
    ));
    for want in [
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: Required value: can not be empty",
        "requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0].values: must be specified when `operator` is 'In' or 'NotIn'",
        "spec.topologySpreadConstraints[0].minDomains: Invalid value: 2: can only use minDomains if whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway",
    ] {
        assert!(message.contains(want), "{want}\nnot in\n{message}");
    }
}
