//! Start-up benchmark: how long a one-container pod takes, in process and as a whole `wasmpod run`,
//! next to a bare wasmtime embedding running the same module.
//!
//! `cargo bench -p wasmpod-cli --bench startup` prints a table, writes it as JSON to
//! `target/wasmpod-bench/startup.json`, and compares with `docs/bench-baseline.json` when present.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use wasmpod::{Node, NodeOptions, PodOptions, PodSpec, Reason};
use wasmpod_tests::guests::AGNHOST_P1;

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: { name: hello }
spec:
  restartPolicy: Never
  containers:
  - { name: hello, image: "{p1}", args: [print, hello] }
"#;

/// Target for a short pod: create → exited within this many times the bare run (p50).
const TARGET_RATIO: f64 = 3.0;

struct Stats {
    samples: Vec<Duration>,
}

impl Stats {
    fn new(mut samples: Vec<Duration>) -> Stats {
        samples.sort();
        Stats { samples }
    }
    fn pct(&self, p: f64) -> Duration {
        let i = ((self.samples.len() - 1) as f64 * p).round() as usize;
        self.samples[i]
    }
    fn json(&self) -> Value {
        json!({ "n": self.samples.len(), "p50_us": self.pct(0.5).as_secs_f64() * 1e6, "p99_us": self.pct(0.99).as_secs_f64() * 1e6 })
    }
}

fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = wasmpod_tests::fill(POD);
    let pod_file = tmp.path().join("pod.yaml");
    std::fs::write(&pod_file, &yaml).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();

    // `BENCH_CASE=in-process N`: only N in-process pods and their p50/p99 (for a profiler, or
    // builds compared run after run).
    if let Ok(case) = std::env::var("BENCH_CASE")
        && let Some(n) = case.strip_prefix("in-process ")
    {
        let (started, finished) =
            runtime.block_on(in_process(tmp.path(), &yaml, n.parse().unwrap()));
        for (name, s) in [
            ("create -> Started", &started),
            ("create -> exited", &finished),
        ] {
            println!(
                "{name:<20} p50 {:>10?} p99 {:>10?}",
                s.pct(0.5),
                s.pct(0.99)
            );
        }
        return;
    }
    let (started, finished) = runtime.block_on(in_process(tmp.path(), &yaml, 300));
    let bare = runtime.block_on(bare_wasmtime(300));
    let (cold, warm, cold_rss, warm_rss) = whole_process(tmp.path(), &pod_file);

    let ratio = finished.pct(0.5).as_secs_f64() / bare.pct(0.5).as_secs_f64();
    let results = json!({
        "pod_create_to_started": started.json(),
        "pod_create_to_exit": finished.json(),
        "bare_wasmtime_instantiate_and_run": bare.json(),
        "overhead_ratio_p50": ratio,
        "wasmpod_run_cold_cache": cold.json(),
        "wasmpod_run_warm_cache": warm.json(),
        "wasmpod_run_peak_rss_cold_bytes": cold_rss,
        "wasmpod_run_peak_rss_warm_bytes": warm_rss,
    });
    println!("{:<36} {:>12} {:>12}", "measure", "p50", "p99");
    for (name, s) in [
        ("pod create -> Started (in process)", &started),
        ("pod create -> exited (in process)", &finished),
        ("bare wasmtime instantiate + run", &bare),
        ("wasmpod run, cold compile cache", &cold),
        ("wasmpod run, warm compile cache", &warm),
    ] {
        println!("{name:<36} {:>12?} {:>12?}", s.pct(0.5), s.pct(0.99));
    }
    println!(
        "overhead ratio (create->exit / bare, p50): {ratio:.2}; target ≤ {TARGET_RATIO}: {}",
        if ratio <= TARGET_RATIO {
            "met"
        } else {
            "NOT met"
        }
    );
    println!(
        "wasmpod run peak RSS: cold cache {:.1} MiB, warm cache {:.1} MiB",
        cold_rss as f64 / 1048576.0,
        warm_rss as f64 / 1048576.0
    );
    compare_with_baseline(&results);
    wasmpod_tests::save_bench("startup", &results);
}

/// Pod create -> first container Started, and create -> every container stopped.
async fn in_process(dir: &Path, yaml: &str, n: usize) -> (Stats, Stats) {
    let node = Node::new(
        NodeOptions::default()
            .state_dir(dir.join("state"))
            .cache_dir(Some(dir.join("cache"))),
    )
    .unwrap();
    let spec = PodSpec::from_yaml(yaml, dir).unwrap();
    let (mut started, mut finished) = (Vec::new(), Vec::new());
    for i in 0..n + 10 {
        let wall = SystemTime::now();
        let t0 = Instant::now();
        let pod = node
            .create_pod(spec.clone(), PodOptions::default())
            .await
            .unwrap();
        pod.wait().await;
        let done = t0.elapsed();
        let mut events = pod.events();
        let mut start = None;
        while let Some(e) = events.next().await {
            if e.reason == Reason::Started && start.is_none() {
                let t: wasmpod::k8s_openapi::jiff::Timestamp = e.time.parse().unwrap();
                start = SystemTime::from(t).duration_since(wall).ok();
                pod.delete(None);
            }
        }
        if i >= 10 {
            started.push(start.unwrap());
            finished.push(done);
        }
    }
    (Stats::new(started), Stats::new(finished))
}

struct Bare {
    wasi: wasmtime_wasi::p1::WasiP1Ctx,
}

/// The least a wasmtime embedding does to run the module: pre-linked `InstancePre`, a WASI
/// context with argv and captured stdout, instantiate, call `_start`.
async fn bare_wasmtime(n: usize) -> Stats {
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(true);
    let engine = wasmtime::Engine::new(&config).unwrap();
    let module = wasmtime::Module::from_file(&engine, AGNHOST_P1).unwrap();
    let mut linker = wasmtime::Linker::<Bare>::new(&engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, |s| &mut s.wasi).unwrap();
    let pre = linker.instantiate_pre(&module).unwrap();
    let mut samples = Vec::new();
    for i in 0..n + 10 {
        let t0 = Instant::now();
        let stdout = wasmtime_wasi::p2::pipe::MemoryOutputPipe::new(4096);
        let wasi = wasmtime_wasi::WasiCtxBuilder::new()
            .args(&["hello", "print", "hello"])
            .stdout(stdout.clone())
            .build_p1();
        let mut store = wasmtime::Store::new(&engine, Bare { wasi });
        store.set_epoch_deadline(u64::MAX / 2);
        let instance = pre.instantiate_async(&mut store).await.unwrap();
        let start = instance
            .get_typed_func::<(), ()>(&mut store, "_start")
            .unwrap();
        start.call_async(&mut store, ()).await.unwrap();
        if i >= 10 {
            samples.push(t0.elapsed());
        }
        assert_eq!(&stdout.contents()[..], b"hello\n");
    }
    Stats::new(samples)
}

/// `wasmpod run` as a process, cold (empty compile cache) and warm: wall time, and peak resident
/// memory (the child's `ru_maxrss` from `wait4`), in bytes.
fn whole_process(dir: &Path, pod: &Path) -> (Stats, Stats, u64, u64) {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_wasmpod"));
    let run = |cache: &Path| {
        let t0 = Instant::now();
        #[expect(
            clippy::zombie_processes,
            reason = "reaped below by wait4, for its rusage"
        )]
        let child = Command::new(&bin)
            .args(["run", "--state-dir"])
            .arg(dir.join("state"))
            .arg("--cache-dir")
            .arg(cache)
            .arg(pod)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child, with valid pointers to locals.
        let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
        let took = t0.elapsed();
        assert!(pid > 0 && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        (took, usage.ru_maxrss as u64 * 1024)
    };
    let cold: Vec<_> = (0..5)
        .map(|i| run(&dir.join(format!("cold-{i}"))))
        .collect();
    let warm_cache = dir.join("warm");
    run(&warm_cache);
    let warm: Vec<_> = (0..20).map(|_| run(&warm_cache)).collect();
    let peak = |runs: &[(Duration, u64)]| runs.iter().map(|r| r.1).max().unwrap_or(0);
    let (cold_rss, warm_rss) = (peak(&cold), peak(&warm));
    (
        Stats::new(cold.into_iter().map(|r| r.0).collect()),
        Stats::new(warm.into_iter().map(|r| r.0).collect()),
        cold_rss,
        warm_rss,
    )
}

fn compare_with_baseline(results: &Value) {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/bench-baseline.json");
    let Ok(text) = std::fs::read_to_string(&file) else {
        return;
    };
    let Ok(baseline) = serde_json::from_str::<Value>(&text) else {
        return;
    };
    let Some(base) = baseline.get("startup") else {
        return;
    };
    println!("\nagainst the baseline in docs/bench-baseline.json (p50, now / then):");
    for (key, now) in results.as_object().unwrap() {
        if let (Some(now), Some(then)) = (now["p50_us"].as_f64(), base[key]["p50_us"].as_f64()) {
            println!(
                "  {key:<36} {:>8.0} µs / {:>8.0} µs = {:.2}",
                now,
                then,
                now / then
            );
        }
    }
}
