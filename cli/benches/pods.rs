//! Many pods on one node: N one-container pods of a sleeping guest started one after another in
//! one process (default 1,000 and 10,000; `BENCH_PODS=a,b` changes them): the time from create to
//! `Started` per pod (p50/p99), the total, the node's resident memory per pod, and, with all of
//! them running, the node's other work: a new pod's create → `Started`, an exported-function
//! probe of another pod (a fresh instance and a call) and its usage, and a deletion's event.
//!
//! Memory is the growth of the process's resident set (`VmRSS`) per pod, the figure of the
//! ≤ 64 KiB target, and beside it the growth of its proportional set (`Pss`): the resident set
//! counts a page once per mapping of it, so the module's memory image, which every instance maps
//! from one shared copy, is counted once per pod there and once in all in the proportional set.
//!
//! `cargo bench -p wasmpod-cli --bench pods`; writes `target/wasmpod-bench/pods.json` and prints
//! the 10,000-pod run beside the `pods` entry of `docs/bench-baseline.json`.
//!
//! Past ~31,000 pods a 47-bit address space no longer holds a 4 GiB reservation per linear
//! memory: `BENCH_ADDRESS_SPACE=compact` runs every size on compact, bounds-checked memories
//! (`AddressSpace::Compact`), as a node chooses them where the space is short. Each mapping
//! counts against `vm.max_map_count` (6 a pod).

use std::time::{Duration, Instant};

use serde_json::json;
use wasmpod::{Node, PodHandle, PodOptions, PodSpec, Reason};

/// Memory mappings of this process (Linux caps them at `vm.max_map_count`, 65,530 by default).
fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count())
}

/// Proportional set size of this process, in bytes (shared pages count once in all).
fn pss_bytes() -> u64 {
    wasmpod_tests::proc_kib("/proc/self/smaps_rollup", "Pss:").map_or(0, |kib| kib * 1024)
}

/// The target for a sleeping pod's resident memory (issue 50's third target).
const TARGET_BYTES_PER_POD: u64 = 64 * 1024;

/// The target for a new pod's create → `Started` beside the most pods, against beside the
/// fewest (issue 50's third target).
const NEW_POD_RATIO: f64 = 2.0;

fn pct(s: &[Duration], p: f64) -> Duration {
    s[((s.len() - 1) as f64 * p).round() as usize]
}

fn spec(dir: &std::path::Path, name: &str) -> PodSpec {
    let yaml = wasmpod_tests::fill(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: {name} }}
spec:
  containers:
  - {{ name: c, image: "{{p1}}", args: [sleep, "100000000"] }}
"#
    ));
    PodSpec::from_yaml(&yaml, dir).unwrap()
}

/// A sleeping pod whose container's `readiness` export reads the file in `probe_dir`.
fn probed_spec(dir: &std::path::Path, probe_dir: &std::path::Path) -> PodSpec {
    let yaml = wasmpod_tests::fill(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: probed }}
spec:
  volumes: [ {{ name: v, hostPath: {{ path: "{}" }} }} ]
  containers:
  - name: c
    image: "{{p1}}"
    args: [sleep, "100000000"]
    volumeMounts: [ {{ name: v, mountPath: /probe }} ]
"#,
        probe_dir.display()
    ));
    PodSpec::from_yaml(&yaml, dir).unwrap()
}

/// Creates a pod and waits for its container's `Started` event; panics with the pod's events if
/// the container ends instead (e.g. the host ran out of memory mappings).
async fn start(node: &Node, dir: &std::path::Path, name: &str) -> (PodHandle, Duration) {
    let spec = spec(dir, name);
    let t0 = Instant::now();
    let pod = node.create_pod(spec, PodOptions::default()).await.unwrap();
    let mut events = pod.events();
    let started = async {
        while let Some(e) = events.next().await {
            match e.reason {
                Reason::Started => return,
                Reason::Exited | Reason::Failed | Reason::BackOff => {
                    panic!("pod {name} did not start: {:?} {}", e.reason, e.message)
                }
                _ => {}
            }
        }
        panic!("pod {name} ended before starting")
    };
    if tokio::time::timeout(Duration::from_secs(10), started)
        .await
        .is_err()
    {
        let mut seen = pod.events();
        let mut so_far = Vec::new();
        while let Ok(Some(e)) = tokio::time::timeout(Duration::ZERO, seen.next()).await {
            so_far.push(format!("{:?} {}", e.reason, e.message));
        }
        panic!(
            "pod {name} not started after 10 s; events: {so_far:#?}; status: {:#?}",
            pod.status()
        );
    }
    (pod, t0.elapsed())
}

async fn run(n: usize) -> serde_json::Value {
    // A node on a temporary state dir with the shared compile cache.
    // The node counts a guest's whole linear memory as in use (its resident part is far
    // smaller): past ~20,000 of these 1.1 MiB guests that crosses a small machine's memory and
    // the node would evict pods. This measures what the runtime holds, not that policy.
    let wasmpod_tests::TestNode { node, dir } =
        wasmpod_tests::TestNode::with(|o| o.eviction_threshold(u64::MAX));
    // Load the module once so that the first pod does not pay for it.
    node.load_images(&spec(dir.path(), "warm")).await.unwrap();
    let before = wasmpod_tests::rss_bytes();
    let pss_before = pss_bytes();
    let maps_before = mappings();
    let cpu_before = wasmpod_tests::cpu_times();
    let all = Instant::now();
    let mut pods = Vec::with_capacity(n);
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let (pod, took) = start(&node, dir.path(), &format!("p{i}")).await;
        pods.push(pod);
        samples.push(took);
    }
    let total = all.elapsed();
    // The CPU the starts took, in user space (the runtime's own work) and in the kernel (page
    // faults, clearing pages, mappings): where a run's time varies from one run to the next.
    let cpu_after = wasmpod_tests::cpu_times();
    let user_per_pod = (cpu_after.0 - cpu_before.0) / n as u32;
    let system_per_pod = (cpu_after.1 - cpu_before.1) / n as u32;
    // Let the pods settle into their sleep before measuring memory.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let per_pod = wasmpod_tests::rss_bytes().saturating_sub(before) / n as u64;
    let pss_per_pod = pss_bytes().saturating_sub(pss_before) / n as u64;
    let maps_per_pod = mappings().saturating_sub(maps_before) as f64 / n as f64;
    let running = pods
        .iter()
        .filter(|p| {
            p.status()
                .container_statuses
                .iter()
                .flatten()
                .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        })
        .count();
    assert_eq!(running, n, "every pod is Running");
    // What the node costs while all of them sleep.
    let cpu0 = wasmpod_tests::cpu_time();
    let wall0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_cores =
        (wasmpod_tests::cpu_time() - cpu0).as_secs_f64() / wall0.elapsed().as_secs_f64();

    // The node stays responsive: a new pod starts, its events arrive.
    let mut extra = Vec::new();
    for i in 0..20 {
        let (pod, took) = start(&node, dir.path(), &format!("extra{i}")).await;
        extra.push(took);
        pod.delete(Some(Duration::ZERO));
    }
    // A probe and a container's metrics beside them: an exported-function probe's path (a fresh
    // instance of the container's image, one call) and `PodHandle::usage`.
    let probe_dir = dir.path().join("probe");
    std::fs::create_dir_all(&probe_dir).unwrap();
    std::fs::write(probe_dir.join("readiness"), "").unwrap();
    let probed = node
        .create_pod(probed_spec(dir.path(), &probe_dir), PodOptions::default())
        .await
        .unwrap();
    probed
        .wait_until(|s| s.container_statuses.iter().flatten().all(|c| c.ready))
        .await;
    let (mut probes, mut usages) = (Vec::new(), Vec::new());
    for i in 0..220 {
        let t0 = Instant::now();
        probed.exec("c", &["readiness"]).await.unwrap();
        let t1 = Instant::now();
        assert!(!probed.usage().is_empty(), "the probed pod's usage");
        if i >= 20 {
            probes.push(t1 - t0);
            usages.push(t1.elapsed());
        }
    }
    probed.delete(Some(Duration::ZERO));
    probed.deleted().await;
    // Delete → the `Terminating` event in the watcher's hands.
    let mut lags = Vec::new();
    for pod in pods.iter().take(200) {
        let mut events = pod.events();
        while let Ok(Some(_)) = tokio::time::timeout(Duration::ZERO, events.next()).await {}
        let asked = Instant::now();
        pod.delete(Some(Duration::ZERO));
        while let Some(e) = events.next().await {
            if e.reason == Reason::Terminating {
                lags.push(asked.elapsed());
                break;
            }
        }
    }
    samples.sort();
    extra.sort();
    lags.sort();
    probes.sort();
    usages.sort();
    println!(
        "{n:>6} pods: all started in {:>8.2?} (CPU a pod: {user_per_pod:.2?} user, \
         {system_per_pod:.2?} system); create→Started p50 {:>9.2?} p99 {:>9.2?}; \
         {:>6.1} KiB resident ({:.1} KiB proportional) and {maps_per_pod:.1} memory mappings \
         per pod; \
         {:.2} % of a core while they sleep; new pod create→Started p50 {:>9.2?}; \
         delete→Terminating event p50 {:>9.2?} p99 {:>9.2?}; a probe p50 {:>9.2?}, a pod's \
         usage p50 {:>9.2?}",
        total,
        pct(&samples, 0.5),
        pct(&samples, 0.99),
        per_pod as f64 / 1024.0,
        pss_per_pod as f64 / 1024.0,
        idle_cores * 100.0,
        pct(&extra, 0.5),
        pct(&lags, 0.5),
        pct(&lags, 0.99),
        pct(&probes, 0.5),
        pct(&usages, 0.5),
    );
    for pod in &pods {
        pod.delete(Some(Duration::ZERO));
    }
    for pod in &pods {
        pod.deleted().await;
    }
    json!({
        "pods": n,
        "all_started_s": total.as_secs_f64(),
        "start_user_cpu_per_pod_us": user_per_pod.as_secs_f64() * 1e6,
        "start_system_cpu_per_pod_us": system_per_pod.as_secs_f64() * 1e6,
        "create_to_started_p50_us": pct(&samples, 0.5).as_secs_f64() * 1e6,
        "create_to_started_p99_us": pct(&samples, 0.99).as_secs_f64() * 1e6,
        "resident_bytes_per_pod": per_pod,
        "proportional_bytes_per_pod": pss_per_pod,
        "memory_mappings_per_pod": maps_per_pod,
        "idle_cpu_cores": idle_cores,
        "new_pod_create_to_started_p50_us": pct(&extra, 0.5).as_secs_f64() * 1e6,
        "delete_to_terminating_samples": lags.len(),
        "delete_to_terminating_event_p50_us": pct(&lags, 0.5).as_secs_f64() * 1e6,
        "delete_to_terminating_event_p99_us": pct(&lags, 0.99).as_secs_f64() * 1e6,
        "probe_p50_us": pct(&probes, 0.5).as_secs_f64() * 1e6,
        "usage_p50_us": pct(&usages, 0.5).as_secs_f64() * 1e6,
    })
}

#[tokio::main]
async fn main() {
    if std::env::var("BENCH_ADDRESS_SPACE").as_deref() == Ok("compact") {
        wasmpod::AddressSpace::Compact
            .set_for_process()
            .expect("compact, before any node");
        eprintln!("compact memories (BENCH_ADDRESS_SPACE=compact)");
    }
    let sizes: Vec<usize> = std::env::var("BENCH_PODS")
        .unwrap_or_else(|_| "1000,10000".into())
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .expect("BENCH_PODS: numbers separated by commas")
        })
        .collect();
    // Each size runs in a fresh process, so that one run's freed memory does not flatter the next.
    if let [n] = sizes[..] {
        let result = run(n).await;
        println!("RESULT {result}");
        return;
    }
    let mut results = Vec::new();
    for n in sizes {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .env("BENCH_PODS", n.to_string())
            .stderr(std::process::Stdio::inherit())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines() {
            match line.strip_prefix("RESULT ") {
                Some(json) => {
                    results.push(serde_json::from_str::<serde_json::Value>(json).unwrap())
                }
                None => println!("{line}"),
            }
        }
        assert!(out.status.success(), "the {n}-pod run failed");
    }
    wasmpod_tests::save_bench("pods", &json!(results));
    if let Some(ten_thousand) = results.iter().find(|r| r["pods"] == 10_000) {
        wasmpod_tests::compare_bench(
            "pods",
            ten_thousand,
            &[
                "resident_bytes_per_pod",
                "proportional_bytes_per_pod",
                "memory_mappings_per_pod",
                "create_to_started_p50_us",
                "new_pod_create_to_started_p50_us",
            ],
        );
        let resident = ten_thousand["resident_bytes_per_pod"]
            .as_u64()
            .unwrap_or(u64::MAX);
        println!(
            "10,000 sleeping pods: {:.1} KiB resident per pod; target ≤ {} KiB: {}",
            resident as f64 / 1024.0,
            TARGET_BYTES_PER_POD / 1024,
            wasmpod_tests::verdict(resident <= TARGET_BYTES_PER_POD)
        );
    }
    // The largest run against the smallest: what a pod costs as the node fills up.
    if let (Some(small), Some(large)) = (results.first(), results.last())
        && results.len() > 1
    {
        let number = |r: &serde_json::Value, key: &str| r[key].as_f64().unwrap_or(f64::NAN);
        let start_cost = |r: &serde_json::Value| number(r, "all_started_s") / number(r, "pods");
        let (n, m) = (number(small, "pods"), number(large, "pods"));
        let linear = start_cost(large) / start_cost(small);
        // A figure of the largest run against the smallest's.
        let ratio = |key: &str| number(large, key) / number(small, key);
        let (user, system) = (
            ratio("start_user_cpu_per_pod_us"),
            ratio("start_system_cpu_per_pod_us"),
        );
        let beside = ratio("new_pod_create_to_started_p50_us");
        let resident = number(large, "resident_bytes_per_pod") / 1024.0;
        println!(
            "{m} pods against {n}: all started at {linear:.2}× the time a pod (its CPU: \
             {user:.2}× in user space, {system:.2}× in the kernel); a new pod's \
             create→Started {beside:.2}× (target ≤ {NEW_POD_RATIO}×: {}); {resident:.1} KiB \
             resident a pod (target ≤ {} KiB: {}); the node's other work: a probe {:.2}×, a \
             pod's usage {:.2}×, a deletion's `Terminating` {:.2}×",
            wasmpod_tests::verdict(beside <= NEW_POD_RATIO),
            TARGET_BYTES_PER_POD / 1024,
            wasmpod_tests::verdict(resident * 1024.0 <= TARGET_BYTES_PER_POD as f64),
            ratio("probe_p50_us"),
            ratio("usage_p50_us"),
            ratio("delete_to_terminating_event_p50_us"),
        );
    }
}
