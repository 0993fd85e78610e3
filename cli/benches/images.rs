//! Pull-and-start of a 5 MiB component from a local registry (Debian's `docker-registry` on
//! loopback): from `create_pod` until its container is Running, cold (an empty image store and
//! compile cache: the pull, the digest checks, the compile) and warm (`IfNotPresent` with the
//! image present: the store's check of the blob, the compiled module from the cache). p50 and
//! max of 5 runs each.
//!
//! `cargo bench -p wasmpod-cli --bench images`; writes `target/wasmpod-bench/images.json` and
//! compares with the `images` entry of `docs/bench-baseline.json`.

use std::time::{Duration, Instant};

use serde_json::json;
use wasmpod::{Node, NodeOptions, PodOptions, PodSpec};
use wasmpod_tests::registry::Registry;

const RUNS: usize = 5;

/// The test component with a 5 MiB custom section: an image of a realistic size.
fn five_mib_component() -> Vec<u8> {
    let mut wasm = std::fs::read(wasmpod_tests::guests::AGNHOST_P2).unwrap();
    let payload = (5 << 20) - wasm.len().min(5 << 20);
    let mut section = vec![1u8, b'x'];
    section.resize(payload.max(2), 0x5a);
    wasm.push(0);
    let mut len = section.len();
    loop {
        let byte = (len & 0x7f) as u8;
        len >>= 7;
        wasm.push(if len == 0 { byte } else { byte | 0x80 });
        if len == 0 {
            break;
        }
    }
    wasm.extend_from_slice(&section);
    wasm
}

async fn start_once(node: &Node, image: &str, i: usize) -> Duration {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{ name: p{i} }}\nspec:\n  containers:\n  - {{ name: c, image: \"{image}\", imagePullPolicy: IfNotPresent, args: [print, up, sleep, \"600000\"] }}\n"
    );
    let spec = PodSpec::from_yaml(&yaml, "/".as_ref()).unwrap();
    let start = Instant::now();
    let pod = node.create_pod(spec, PodOptions::default()).await.unwrap();
    pod.wait_until(|s| {
        s.container_statuses
            .iter()
            .flatten()
            .any(|c| c.state.as_ref().is_some_and(|st| st.running.is_some()))
    })
    .await;
    let took = start.elapsed();
    pod.delete(Some(Duration::ZERO));
    pod.deleted().await;
    took
}

fn p50_max(mut times: Vec<Duration>) -> (f64, f64) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(times[times.len() / 2]), ms(times[times.len() - 1]))
}

fn main() {
    let registry = Registry::start(false);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let wasm = five_mib_component();
    runtime.block_on(registry.push_wasm("bench:1.0", &wasm));
    let image = format!("{}/bench:1.0", registry.host);
    let tmp = tempfile::tempdir().unwrap();
    let node_in = |dir: &std::path::Path| {
        Node::new(
            NodeOptions::default()
                .state_dir(dir.join("state"))
                .cache_dir(Some(dir.join("cache")))
                .insecure_registry(registry.host.clone()),
        )
        .unwrap()
    };
    let mut cold = Vec::new();
    for i in 0..RUNS {
        let dir = tmp.path().join(format!("cold{i}"));
        let node = node_in(&dir);
        cold.push(runtime.block_on(start_once(&node, &image, i)));
    }
    let node = node_in(&tmp.path().join("warm"));
    runtime.block_on(start_once(&node, &image, 100));
    let warm: Vec<Duration> = (0..RUNS)
        .map(|i| runtime.block_on(start_once(&node, &image, i)))
        .collect();
    let (cold_p50, cold_max) = p50_max(cold);
    let (warm_p50, warm_max) = p50_max(warm);
    println!(
        "pull-and-start of a {:.1} MiB component from a local registry:",
        wasm.len() as f64 / 1048576.0
    );
    println!("  cold (pull, checks, compile)   p50 {cold_p50:>8.1} ms   max {cold_max:>8.1} ms");
    println!("  warm (present, compiled)       p50 {warm_p50:>8.1} ms   max {warm_max:>8.1} ms");
    let report = json!({
        "image_bytes": wasm.len(),
        "cold_p50_ms": cold_p50,
        "cold_max_ms": cold_max,
        "warm_p50_ms": warm_p50,
        "warm_max_ms": warm_max,
    });
    wasmpod_tests::compare_bench("images", &report, &["cold_p50_ms", "warm_p50_ms"]);
    wasmpod_tests::save_bench("images", &report);
}
