//! CPU limits: the share of a core a spinning guest uses under `resources.limits.cpu`, measured
//! from this process's CPU time over 5 s per limit, less the idle node's own (Linux). Writes `target/wasmpod-bench/cpu.json`.

use std::time::{Duration, Instant};

use serde_json::json;
use wasmpod::{PodOptions, PodSpec};

#[tokio::main]
async fn main() {
    // A node on a temporary state dir with the shared compile cache.
    let wasmpod_tests::TestNode { node, dir } = wasmpod_tests::TestNode::new();
    let mut results = serde_json::Map::new();
    // The node's own cost with no pod (epoch ticker, runtime), subtracted from each measurement.
    let (cpu, wall) = (wasmpod_tests::cpu_time(), Instant::now());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle = (wasmpod_tests::cpu_time() - cpu).as_secs_f64() / wall.elapsed().as_secs_f64();
    println!("idle node: {idle:.4} of a core");
    results.insert("idle_node_cores".into(), json!(idle));
    println!(
        "{:<10} {:>10} {:>10} {:>8}",
        "limit", "expected", "measured", "error"
    );
    for (limit, expected) in [
        ("50m", 0.05),
        ("100m", 0.1),
        ("250m", 0.25),
        ("500m", 0.5),
        ("none", 1.0),
    ] {
        let resources = if limit == "none" {
            String::new()
        } else {
            format!(", resources: {{ limits: {{ cpu: {limit} }} }}")
        };
        let yaml = wasmpod_tests::fill(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{ name: spin }}\nspec:\n  containers:\n  - {{ name: c, image: \"{{p1}}\", args: [loop]{resources} }}\n"
        ));
        let pod = node
            .create_pod(
                PodSpec::from_yaml(&yaml, dir.path()).unwrap(),
                PodOptions::default(),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (cpu, wall) = (wasmpod_tests::cpu_time(), Instant::now());
        tokio::time::sleep(Duration::from_secs(5)).await;
        let measured =
            (wasmpod_tests::cpu_time() - cpu).as_secs_f64() / wall.elapsed().as_secs_f64() - idle;
        let error = (measured - expected) / expected * 100.0;
        println!("{limit:<10} {expected:>10.3} {measured:>10.3} {error:>+7.1}%");
        results.insert(
            limit.into(),
            json!({ "expected_cores": expected, "measured_cores": measured }),
        );
        pod.delete(Some(Duration::ZERO));
        pod.deleted().await;
    }
    wasmpod_tests::save_bench("cpu", &serde_json::Value::Object(results));
}
