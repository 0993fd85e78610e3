//! Termination latency: TERM -> exit for a guest that does not handle TERM (default action) and
//! for one that exits on TERM, and grace deadline -> exit for a guest that ignores TERM (KILL
//! through epoch interruption), while computing and while blocked in a host call.
//!
//! `cargo bench -p wasmpod-cli --bench termination` prints p50/p99, writes
//! `target/wasmpod-bench/termination.json`, prints them beside the `termination` entry of
//! `docs/bench-baseline.json`, and says whether 200 blocked guests' p99 meets its 20 ms target.

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::json;
use wasmpod::{Event, Node, PodHandle, PodOptions, PodSpec, Reason};

const PODS: usize = 200;
/// The mass kill whose p99 has a target, and the target.
const BLOCKED: &str = "deadline -> exit, blocked guest";
const TARGET_BLOCKED_P99: Duration = Duration::from_millis(20);

fn time(e: &Event) -> SystemTime {
    let t: wasmpod::k8s_openapi::jiff::Timestamp = e.time.parse().unwrap();
    SystemTime::from(t)
}

fn yaml(name: &str, grace: u32, image: &str, args: &str) -> String {
    wasmpod_tests::fill(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{ name: {name}-INDEX }}\nspec:\n  terminationGracePeriodSeconds: {grace}\n  containers:\n  - {{ name: c, image: \"{image}\", args: {args} }}\n"
    ))
}

/// Starts `n` pods, deletes them all once running, and returns for each the time from TERM
/// (`Killing`) plus `offset` to `Exited`.
async fn measure(node: &Node, dir: &Path, n: usize, yaml: &str, offset: Duration) -> Vec<Duration> {
    let mut pods: Vec<PodHandle> = Vec::new();
    for i in 0..n {
        // One pod of a name at a time: each has its own.
        let spec = PodSpec::from_yaml(&yaml.replace("INDEX", &i.to_string()), dir).unwrap();
        let pod = node.create_pod(spec, PodOptions::default()).await.unwrap();
        pod.wait_until(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        })
        .await;
        pods.push(pod);
    }
    for pod in &pods {
        pod.delete(None);
    }
    let mut samples = Vec::new();
    for pod in pods {
        let mut events = pod.events();
        let (mut term, mut exit) = (None, None);
        while let Some(e) = events.next().await {
            match e.reason {
                Reason::Killing => term = Some(time(&e)),
                Reason::Exited => exit = Some(time(&e)),
                _ => {}
            }
        }
        let due = term.unwrap() + offset;
        samples.push(
            exit.unwrap()
                .duration_since(due)
                .unwrap_or_else(|e| panic!("exited {:?} before its deadline", e.duration())),
        );
    }
    samples.sort();
    samples
}

fn pct(s: &[Duration], p: f64) -> Duration {
    s[((s.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() {
    // A node on a temporary state dir with the shared compile cache.
    let wasmpod_tests::TestNode { node, dir } = wasmpod_tests::TestNode::new();
    let cases = [
        (
            "TERM -> exit, default action",
            yaml("plain", 30, "{p1}", r#"[sleep, "100000"]"#),
            Duration::ZERO,
        ),
        (
            "TERM -> exit, guest waits on TERM",
            yaml("handler", 30, "{probed}", "[wait-term-pollable]"),
            Duration::ZERO,
        ),
        (
            "deadline -> exit, busy guest",
            yaml("busy", 2, "{term}", "[loop]"),
            Duration::from_secs(2),
        ),
        (
            BLOCKED,
            yaml("blocked", 2, "{term}", r#"[sleep, "100000"]"#),
            Duration::from_secs(2),
        ),
    ];
    let mut results = serde_json::Map::new();
    println!("{:<36} {:>6} {:>12} {:>12}", "measure", "n", "p50", "p99");
    // `BENCH_CASE=blocked` (any part of a name) runs only the matching cases, for profiling.
    let only = std::env::var("BENCH_CASE").unwrap_or_default();
    for (name, yaml, offset) in cases {
        if !name.contains(only.as_str()) {
            continue;
        }
        // busy guests share two cores: fewer of them at once
        let pods = std::env::var("BENCH_PODS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(PODS);
        let n = if name.contains("busy") {
            pods.min(20)
        } else {
            pods
        };
        let s = measure(&node, dir.path(), n, &yaml, offset).await;
        println!(
            "{name:<36} {n:>6} {:>12?} {:>12?}",
            pct(&s, 0.5),
            pct(&s, 0.99)
        );
        results.insert(name.into(), json!({ "n": n, "p50_us": pct(&s, 0.5).as_secs_f64() * 1e6, "p99_us": pct(&s, 0.99).as_secs_f64() * 1e6 }));
    }
    let results = serde_json::Value::Object(results);
    wasmpod_tests::save_bench("termination", &results);
    let cases: Vec<String> = results
        .as_object()
        .into_iter()
        .flat_map(|cases| cases.keys())
        .flat_map(|case| [format!("/{case}/p50_us"), format!("/{case}/p99_us")])
        .collect();
    let keys: Vec<&str> = cases.iter().map(String::as_str).collect();
    wasmpod_tests::compare_bench("termination", &results, &keys);
    if let Some(p99) = results
        .pointer(&format!("/{BLOCKED}/p99_us"))
        .and_then(|v| v.as_f64())
    {
        println!(
            "{BLOCKED}, p99: {:.1} ms; target ≤ {} ms: {}",
            p99 / 1e3,
            TARGET_BLOCKED_P99.as_millis(),
            wasmpod_tests::verdict(p99 <= TARGET_BLOCKED_P99.as_secs_f64() * 1e6)
        );
    }
}
