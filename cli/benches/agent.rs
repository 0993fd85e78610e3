//! The node agent under load, driven by the real kubectl: N sleeping pods (default 1,000;
//! `BENCH_PODS=n` changes it) created by one `kubectl create -f` of a List through the API
//! (pods created per second, and until all are Running), the agent's resident memory with them
//! (per pod, against the agent with none), and `kubectl get pods` latency with all of them
//! (p50 and max of 10, beside `kubectl version`, which is kubectl's own cost for one request),
//! and what resource metrics cost with all of them: the agent's CPU over 15 s without scrapes
//! and over 15 s with one scrape round (as metrics-server and Prometheus scrape every 15 s:
//! `/metrics/resource`, `/stats/summary`, and the `metrics.k8s.io` pod list `kubectl top pod -A`
//! reads), the sampler reading every container every 15 s in both.
//!
//! `cargo bench -p wasmpod-cli --bench agent`; writes `target/wasmpod-bench/agent.json` and
//! compares with the `agent` entry of `docs/bench-baseline.json`.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use wasmpod::NodeOptions;
use wasmpod_agent::{Agent, AgentOptions};

fn kubectl(agent: &Agent, home: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", agent.kubeconfig())
        .env("HOME", home)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// p50 and max of `runs` timings of `args`.
fn latency(
    agent: &Agent,
    home: &std::path::Path,
    args: &[&str],
    runs: usize,
) -> (Duration, Duration) {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            kubectl(agent, home, args);
            start.elapsed()
        })
        .collect();
    times.sort();
    (times[runs / 2], times[runs - 1])
}

fn main() {
    let n: usize = std::env::var("BENCH_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    wasmpod_tests::warm_shared_cache();
    let tmp = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let node = NodeOptions::default()
        .state_dir(tmp.path().join("state"))
        .cache_dir(Some(wasmpod_tests::shared_cache()));
    let options = AgentOptions::default()
        .node(node)
        .listen(([127, 0, 0, 1], 0).into());
    let agent = runtime.block_on(Agent::start(options)).unwrap();
    let home = tmp.path();
    kubectl(&agent, home, &["get", "pods"]);
    let rss_empty = wasmpod_tests::rss_bytes();
    let pss = || wasmpod_tests::proc_kib("/proc/self/smaps_rollup", "Pss:").unwrap_or(0);
    let pss_empty = pss();

    let items: Vec<_> = (0..n)
        .map(|i| {
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("p{i}")},
                "spec": {"containers": [{"name": "c", "image": wasmpod_tests::guests::AGNHOST_P1, "args": ["sleep", "100000000"]}]},
            })
        })
        .collect();
    // One document per pod (a `kind: List` would need the protobuf OpenAPI v2 that kubectl
    // validates Lists against).
    let list = tmp.path().join("pods.yaml");
    let docs: Vec<String> = items.iter().map(|i| i.to_string()).collect();
    std::fs::write(&list, docs.join("\n---\n")).unwrap();
    let start = Instant::now();
    kubectl(&agent, home, &["create", "-f", list.to_str().unwrap()]);
    let created = start.elapsed();
    loop {
        let running = kubectl(
            &agent,
            home,
            &[
                "get",
                "pods",
                "--field-selector",
                "status.phase=Running",
                "-o",
                "name",
            ],
        );
        if running.lines().count() == n {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "pods did not all run"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let all_running = start.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    let rss = wasmpod_tests::rss_bytes();
    let pss_per_pod_kib = pss().saturating_sub(pss_empty) as f64 / n as f64;
    let (get_p50, get_max) = latency(&agent, home, &["get", "pods"], 10);
    let (version_p50, _) = latency(&agent, home, &["version"], 10);

    // Resource metrics: a 15 s window without scrapes, then one with a scrape round.
    const WINDOW: Duration = Duration::from_secs(15);
    let cpu_over = |scrape: bool| {
        let (cpu, wall) = (wasmpod_tests::cpu_time(), Instant::now());
        if scrape {
            for path in [
                "/metrics/resource",
                "/stats/summary",
                "/apis/metrics.k8s.io/v1beta1/pods",
            ] {
                kubectl(&agent, home, &["get", "--raw", path]);
            }
        }
        std::thread::sleep(WINDOW.saturating_sub(wall.elapsed()));
        (wasmpod_tests::cpu_time() - cpu).as_secs_f64() / wall.elapsed().as_secs_f64()
    };
    let quiet = cpu_over(false);
    let scraped = cpu_over(true);
    let scrape_cost = (scraped - quiet).max(0.0);
    let top = kubectl(&agent, home, &["top", "pod", "--no-headers"]);
    assert_eq!(top.lines().count(), n, "kubectl top lists every pod");

    let per_second = n as f64 / created.as_secs_f64();
    let per_pod_kib = rss.saturating_sub(rss_empty) as f64 / n as f64 / 1024.0;
    println!(
        "agent: {n} pods created by one kubectl create -f: {created:.2?} ({per_second:.0} pods/s), all Running after {all_running:.2?}"
    );
    println!(
        "agent: resident memory {:.1} MiB with {n} pods, {:.1} MiB with none: {per_pod_kib:.1} KiB a pod \
         (proportional: {pss_per_pod_kib:.1} KiB, the module's memory image that every instance \
         maps counted once)",
        rss as f64 / 1048576.0,
        rss_empty as f64 / 1048576.0
    );
    println!(
        "agent: kubectl get pods with {n} pods: p50 {get_p50:.2?}, max {get_max:.2?} (kubectl version: p50 {version_p50:.2?})"
    );
    println!(
        "agent: CPU with {n} sleeping pods: {:.3} % of a core without scrapes, {:.3} % with a scrape round every 15 s: scrapes cost {:.3} %",
        quiet * 100.0,
        scraped * 100.0,
        scrape_cost * 100.0
    );
    let report = json!({
        "idle_cpu_percent": quiet * 100.0,
        "scraped_cpu_percent": scraped * 100.0,
        "scrape_cpu_percent": scrape_cost * 100.0,
        "pods": n,
        "create_seconds": created.as_secs_f64(),
        "pods_created_per_second": per_second,
        "all_running_seconds": all_running.as_secs_f64(),
        "rss_bytes": rss,
        "rss_empty_bytes": rss_empty,
        "rss_per_pod_kib": per_pod_kib,
        "pss_per_pod_kib": pss_per_pod_kib,
        "get_pods_p50_ms": get_p50.as_secs_f64() * 1e3,
        "get_pods_max_ms": get_max.as_secs_f64() * 1e3,
        "kubectl_version_p50_ms": version_p50.as_secs_f64() * 1e3,
    });
    wasmpod_tests::compare_bench(
        "agent",
        &report,
        &[
            "pods_created_per_second",
            "all_running_seconds",
            "rss_per_pod_kib",
            "get_pods_p50_ms",
            "kubectl_version_p50_ms",
            "idle_cpu_percent",
            "scrape_cpu_percent",
        ],
    );
    wasmpod_tests::save_bench("agent", &report);
    runtime.block_on(agent.stop());
}
