//! Probe cost: one exported-function probe call (fresh instance + call, through
//! `PodHandle::exec`) for a preview1 module and a component, p50/p99; and the CPU that N
//! containers (default 1,000; `BENCH_PODS`) each probed once a second cost the node.
//!
//! `cargo bench -p wasmpod-cli --bench probes`; writes `target/wasmpod-bench/probes.json`.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use wasmpod::{PodOptions, PodSpec};

fn pct(s: &[Duration], p: f64) -> Duration {
    s[((s.len() - 1) as f64 * p).round() as usize]
}

fn pod(name: &str, image: &str, probe_dir: &Path, readiness: bool) -> String {
    let probe = if readiness {
        "\n    readinessProbe: { exec: { command: [readiness] }, periodSeconds: 1 }"
    } else {
        ""
    };
    wasmpod_tests::fill(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: {name} }}
spec:
  volumes: [ {{ name: v, hostPath: {{ path: "{}" }} }} ]
  containers:
  - name: c
    image: "{image}"
    args: [sleep, "100000000"]
    volumeMounts: [ {{ name: v, mountPath: /probe }} ]{probe}
"#,
        probe_dir.display()
    ))
}

#[tokio::main]
async fn main() {
    // A node on a temporary state dir with the shared compile cache.
    let wasmpod_tests::TestNode { node, dir } = wasmpod_tests::TestNode::new();
    let probe_dir = dir.path().join("probe");
    std::fs::create_dir(&probe_dir).unwrap();
    std::fs::write(probe_dir.join("readiness"), "").unwrap();
    let mut results = serde_json::Map::new();
    println!("{:<44} {:>12} {:>12}", "measure", "p50", "p99");
    for (kind, image) in [("preview1 module", "{p1}"), ("component", "{probed}")] {
        let spec = PodSpec::from_yaml(&pod("one", image, &probe_dir, false), dir.path()).unwrap();
        let handle = node.create_pod(spec, PodOptions::default()).await.unwrap();
        handle
            .wait_until(|s| s.container_statuses.iter().flatten().all(|c| c.ready))
            .await;
        let mut samples = Vec::new();
        for i in 0..1100 {
            let t0 = Instant::now();
            handle.exec("c", &["readiness"]).await.unwrap();
            if i >= 100 {
                samples.push(t0.elapsed());
            }
        }
        samples.sort();
        let name = format!("exported-function probe, {kind}");
        println!(
            "{name:<44} {:>12?} {:>12?}",
            pct(&samples, 0.5),
            pct(&samples, 0.99)
        );
        results.insert(name, json!({ "n": samples.len(), "p50_us": pct(&samples, 0.5).as_secs_f64() * 1e6, "p99_us": pct(&samples, 0.99).as_secs_f64() * 1e6 }));
        handle.delete(Some(Duration::ZERO));
        handle.deleted().await;
    }

    let n: usize = std::env::var("BENCH_PODS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let mut pods = Vec::new();
    for i in 0..n {
        // One pod of a name at a time: each has its own.
        let yaml = pod(&format!("probed-{i}"), "{p1}", &probe_dir, true);
        let spec = PodSpec::from_yaml(&yaml, dir.path()).unwrap();
        pods.push(node.create_pod(spec, PodOptions::default()).await.unwrap());
    }
    for pod in &pods {
        pod.wait_until(|s| s.container_statuses.iter().flatten().all(|c| c.ready))
            .await;
    }
    let window = Duration::from_secs(10);
    {
        let before = wasmpod_tests::cpu_time();
        tokio::time::sleep(window).await;
        let used = wasmpod_tests::cpu_time() - before;
        let cores = used.as_secs_f64() / window.as_secs_f64();
        println!(
            "{n} containers probed once a second: {:.1}% of one core ({:.0} µs CPU per probe)",
            cores * 100.0,
            used.as_secs_f64() * 1e6 / (n as f64 * window.as_secs_f64())
        );
        results.insert(
            "probed_once_a_second".into(),
            json!({ "containers": n, "cpu_cores": cores }),
        );
    }
    for pod in &pods {
        pod.delete(Some(Duration::ZERO));
    }
    for pod in &pods {
        pod.deleted().await;
    }
    wasmpod_tests::save_bench("probes", &serde_json::Value::Object(results));
}
