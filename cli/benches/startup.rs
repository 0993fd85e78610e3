//! Start-up benchmark: how long a one-container pod takes, in process and as a whole `wasmpod run`,
//! next to a bare wasmtime embedding running the same module and, when a wasmtime-cli is at hand
//! (`$WASMTIME` or `wasmtime` on `PATH`), next to `wasmtime run` of it with a warm cache.
//!
//! The whole-process runs are of `$WASMPOD` when set: the binary users install, as
//! `cargo build --release -p wasmpod-cli` makes it (`tools/bench-peers.sh` puts one at hand).
//! Without it they are of the `wasmpod` this bench was built with, whose dependencies have the
//! features the benches' dev-dependencies add: other code, laid out without the release build's
//! startup order (`cli/startup.order`), so it maps about twice the memory at start.
//!
//! `cargo bench -p wasmpod-cli --bench startup` prints a table, writes it as JSON to
//! `target/wasmpod-bench/startup.json`, and compares with `docs/bench-baseline.json` when present.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use wasmpod::{Node, NodeOptions, PodOptions, PodSpec, Reason};
use wasmpod_tests::guests::AGNHOST_P1;

#[path = "support/bare.rs"]
mod bare;
use bare::Embedding;

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

/// Target for `wasmpod run` of the hello pod against `wasmtime run` of its module, warm (p50).
const RUN_TARGET: f64 = 0.8;

/// Target for a cold `wasmpod run` (its pod's output) against a warm one (p50).
const COLD_TARGET: f64 = 2.0;

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
    // `BENCH_RT=current`: the node on one thread, every hand-off between its tasks a call on
    // that thread: what a pod's own work costs, without waking other threads. `BENCH_WORKERS=N`:
    // N workers (the default is one a core), the caller on a thread of its own either way.
    let runtime = if std::env::var("BENCH_RT").as_deref() == Ok("current") {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    } else if let Ok(n) = std::env::var("BENCH_WORKERS") {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n.parse().unwrap())
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Runtime::new().unwrap()
    };

    // `BENCH_CASE=in-process N`: only N in-process pods and the bare run, their p50/p99 and
    // ratio (for a profiler, or builds compared run after run; with `BENCH_RT=current`, on one
    // thread).
    if let Ok(case) = std::env::var("BENCH_CASE")
        && let Some(n) = case.strip_prefix("in-process ")
    {
        let n: usize = n.parse().unwrap();
        let (started, finished) = runtime.block_on(in_process(tmp.path(), &yaml, n));
        let (_, from_task) = from_a_task(&runtime, tmp.path(), &yaml, n);
        let bare = runtime.block_on(bare_wasmtime(300));
        let on_worker = runtime.block_on(bare_on_worker(300));
        for (name, s) in [
            ("create -> Started", &started),
            ("create -> exited", &finished),
            ("  from a task", &from_task),
            ("bare", &bare),
            ("bare on a worker", &on_worker),
        ] {
            println!(
                "{name:<20} p50 {:>10?} p99 {:>10?}",
                s.pct(0.5),
                s.pct(0.99)
            );
        }
        let ratio = finished.pct(0.5).as_secs_f64() / bare.pct(0.5).as_secs_f64();
        println!("create -> exited / bare (p50): {ratio:.2}");
        return;
    }
    // First, while this process is small (see `run_timed`).
    let whole = whole_process(tmp.path(), &pod_file);
    let (started, finished) = runtime.block_on(in_process(tmp.path(), &yaml, 300));
    let (_, from_task) = from_a_task(&runtime, tmp.path(), &yaml, 300);
    let bare = runtime.block_on(bare_wasmtime(300));
    let on_worker = runtime.block_on(bare_on_worker(300));
    let new_tiered = runtime.block_on(new_module(tmp.path(), &yaml, true));
    let new_untiered = runtime.block_on(new_module(tmp.path(), &yaml, false));
    let (baseline, optimized) = runtime.block_on(steady_state(tmp.path()));
    let steady = baseline.pct(0.5).as_secs_f64() / optimized.pct(0.5).as_secs_f64();

    let ratio = finished.pct(0.5).as_secs_f64() / bare.pct(0.5).as_secs_f64();
    let mut results = json!({
        "pod_create_to_started": started.json(),
        "pod_create_to_exit": finished.json(),
        "pod_create_to_exit_from_a_task": from_task.json(),
        "bare_wasmtime_instantiate_and_run": bare.json(),
        "bare_wasmtime_on_a_worker": on_worker.json(),
        "new_module_create_to_started": new_tiered.json(),
        "new_module_create_to_started_untiered": new_untiered.json(),
        "churn_on_baseline_code": baseline.json(),
        "churn_on_optimized_code": optimized.json(),
        "baseline_over_optimized_p50": steady,
        "overhead_ratio_p50": ratio,
        "wasmpod_run_cold_cache": whole.cold.json(),
        "wasmpod_run_cold_cache_output": whole.cold_output.json(),
        "wasmpod_run_cold_cache_untiered": whole.cold_untiered.json(),
        "wasmpod_run_cold_cache_untiered_output": whole.cold_untiered_output.json(),
        "wasmpod_run_warm_cache": whole.warm.json(),
        "wasmpod_run_peak_rss_cold_bytes": whole.cold_rss,
        "wasmpod_run_peak_rss_warm_bytes": whole.warm_rss,
    });
    println!("{:<36} {:>12} {:>12}", "measure", "p50", "p99");
    let mut rows = vec![
        ("pod create -> Started (in process)", &started),
        ("pod create -> exited (in process)", &finished),
        ("  the caller a task on the runtime", &from_task),
        ("bare wasmtime instantiate + run", &bare),
        ("  the same on a worker", &on_worker),
        ("a new module: create -> Started", &new_tiered),
        ("  untiered", &new_untiered),
        ("churn 2000: Started -> exited, baseline", &baseline),
        ("  optimized", &optimized),
        ("wasmpod run, cold: the pod's output", &whole.cold_output),
        ("wasmpod run, cold: the process's end", &whole.cold),
        ("  untiered: the pod's output", &whole.cold_untiered_output),
        ("  untiered: the process's end", &whole.cold_untiered),
        ("wasmpod run, warm compile cache", &whole.warm),
    ];
    if let Some((_, theirs, _)) = &whole.wasmtime {
        rows.push(("wasmtime run, warm cache", theirs));
    }
    for (name, s) in rows {
        println!("{name:<36} {:>12?} {:>12?}", s.pct(0.5), s.pct(0.99));
    }
    println!(
        "overhead ratio (create->exit / bare, p50): {ratio:.2}; target ≤ {TARGET_RATIO}: {}",
        wasmpod_tests::verdict(ratio <= TARGET_RATIO)
    );
    println!(
        "  the caller a task on the runtime: {:.2}",
        from_task.pct(0.5).as_secs_f64() / bare.pct(0.5).as_secs_f64()
    );
    let warm = whole.warm.pct(0.5).as_secs_f64();
    let cold_ratio = whole.cold.pct(0.5).as_secs_f64() / warm;
    let output_ratio = whole.cold_output.pct(0.5).as_secs_f64() / warm;
    println!(
        "wasmpod run, cold / warm, p50: {cold_ratio:.2} (its pod's output: {output_ratio:.2}); \
         target ≤ {COLD_TARGET}: {}",
        wasmpod_tests::verdict(cold_ratio <= COLD_TARGET)
    );
    results["cold_over_warm_p50"] = json!(cold_ratio);
    results["cold_output_over_warm_p50"] = json!(output_ratio);
    println!(
        "steady state: a container's work on baseline code / on optimized code, p50: {steady:.2}"
    );
    let mib = |bytes: u64| bytes as f64 / 1048576.0;
    println!(
        "wasmpod run peak RSS: cold cache {:.1} MiB, warm cache {:.1} MiB (this bench's own \
         peak before the runs, a floor for either: {:.1} MiB)",
        mib(whole.cold_rss),
        mib(whole.warm_rss),
        mib(whole.floor)
    );
    if let Some((version, theirs, their_rss)) = &whole.wasmtime {
        let over = whole.warm.pct(0.5).as_secs_f64() / theirs.pct(0.5).as_secs_f64();
        println!(
            "wasmpod run / wasmtime run ({version}), warm, p50: {over:.2}; \
             target ≤ {RUN_TARGET}: {}",
            wasmpod_tests::verdict(over <= RUN_TARGET)
        );
        let rss = whole.warm_rss as f64 / *their_rss as f64;
        println!(
            "peak RSS, wasmpod run / wasmtime run: {:.1} / {:.1} MiB = {rss:.2}; target ≤ 1: {}",
            mib(whole.warm_rss),
            mib(*their_rss),
            wasmpod_tests::verdict(rss <= 1.0)
        );
        results["wasmtime_run_warm_cache"] = theirs.json();
        results["wasmtime_run_peak_rss_bytes"] = json!(their_rss);
        results["wasmpod_run_over_wasmtime_run_p50"] = json!(over);
    } else {
        println!(
            "no wasmtime found (set WASMTIME): `wasmpod run` not compared with `wasmtime run`"
        );
    }
    wasmpod_tests::save_bench("startup", &results);
    wasmpod_tests::compare_bench(
        "startup",
        &results,
        &[
            "/pod_create_to_started/p50_us",
            "/pod_create_to_exit/p50_us",
            "/bare_wasmtime_instantiate_and_run/p50_us",
            "overhead_ratio_p50",
            "/wasmpod_run_cold_cache/p50_us",
            "/wasmpod_run_warm_cache/p50_us",
            "/wasmtime_run_warm_cache/p50_us",
            "wasmpod_run_over_wasmtime_run_p50",
            "wasmpod_run_peak_rss_warm_bytes",
        ],
    );
    report_startup_order(&wasmpod_bin());
}

/// One pod run to its end: create -> its container `Started` (from the event's time), create ->
/// every container stopped, and `Started` -> stopped.
struct PodRun {
    started: Duration,
    exited: Duration,
    ran: Duration,
}

/// Runs a pod of `spec` on `node` until it ends, then deletes it.
async fn run_pod(node: &Node, spec: &PodSpec) -> PodRun {
    let wall = SystemTime::now();
    let t0 = Instant::now();
    let pod = node
        .create_pod(spec.clone(), PodOptions::default())
        .await
        .unwrap();
    pod.wait().await;
    let exited = t0.elapsed();
    let mut events = pod.events();
    let mut started = None;
    while let Some(e) = events.next().await {
        if e.reason == Reason::Started && started.is_none() {
            let t: wasmpod::k8s_openapi::jiff::Timestamp = e.time.parse().unwrap();
            started = SystemTime::from(t).duration_since(wall).ok();
            pod.delete(None);
        }
    }
    let started = started.unwrap();
    PodRun {
        started,
        exited,
        ran: exited.saturating_sub(started),
    }
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
    for i in 0..n + 20 {
        if i == 10 {
            // The first pods ran on the module's baseline code; the optimized code replaces it.
            node.optimized().await;
        }
        if i == 20 {
            // Pods of the optimized image have run: its twin in the instance pool (made 50 ms
            // after a pod of the image ended) is there, as on a node that runs the image often.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let run = run_pod(&node, &spec).await;
        if i >= 20 {
            started.push(run.started);
            finished.push(run.exited);
        }
    }
    (Stats::new(started), Stats::new(finished))
}

/// [`in_process`] with the caller a task on the runtime, as a server's request handler is,
/// where the other rows' caller is the thread `block_on` runs on, outside the runtime's workers
/// (a pod takes its first steps there): from a task the node's tasks start on the caller's
/// worker, and the pod's end wakes a task.
fn from_a_task(
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
    yaml: &str,
    n: usize,
) -> (Stats, Stats) {
    // A node of its own, on a state dir of its own.
    let (dir, yaml) = (dir.join("from-a-task"), yaml.to_owned());
    std::fs::create_dir_all(&dir).unwrap();
    runtime
        .block_on(runtime.spawn(async move { in_process(&dir, &yaml, n).await }))
        .unwrap()
}

/// A container's own run time (`Started` -> exited) on baseline code (the first pod of a node
/// whose compile cache is empty) and on optimized code (a pod after that), for a guest doing
/// ordinary work (`churn`: sorting, a hash map, a string).
async fn steady_state(dir: &Path) -> (Stats, Stats) {
    let yaml = POD.replace("[print, hello]", "[churn, \"2000\"]");
    let spec = PodSpec::from_yaml(&wasmpod_tests::fill(&yaml), dir).unwrap();
    let (mut baseline, mut optimized) = (Vec::new(), Vec::new());
    for i in 0..3 {
        let node = Node::new(
            NodeOptions::default()
                .state_dir(dir.join("state"))
                .cache_dir(Some(dir.join(format!("steady-{i}")))),
        )
        .unwrap();
        baseline.push(run_pod(&node, &spec).await.ran);
        node.optimized().await;
        optimized.push(run_pod(&node, &spec).await.ran);
    }
    (Stats::new(baseline), Stats::new(optimized))
}

/// A pod of a module its node never compiled (an empty compile cache), create -> Started.
async fn new_module(dir: &Path, yaml: &str, tiered: bool) -> Stats {
    let spec = PodSpec::from_yaml(yaml, dir).unwrap();
    let mut samples = Vec::new();
    for i in 0..5 {
        let node = Node::new(
            NodeOptions::default()
                .state_dir(dir.join("state"))
                .cache_dir(Some(dir.join(format!("new-{tiered}-{i}"))))
                .tiered_compilation(tiered),
        )
        .unwrap();
        samples.push(run_pod(&node, &spec).await.started);
        node.optimized().await;
    }
    Stats::new(samples)
}

/// The least a wasmtime embedding does to run the module (`support/bare.rs`), `n` times after
/// ten warm-up runs, timed from its start to `_start`'s return: its instance's teardown is not
/// timed (the store is dropped after).
async fn bare_wasmtime(n: usize) -> Stats {
    bare_runs(n, false).await
}

/// The bare run handed to the runtime's workers and awaited, as a node's pod is: what waking a
/// worker and being woken by it add to the same work.
async fn bare_on_worker(n: usize) -> Stats {
    bare_runs(n, true).await
}

async fn bare_runs(n: usize, spawned: bool) -> Stats {
    let bare = Embedding::new();
    let mut samples = Vec::new();
    for i in 0..n + 10 {
        let t0 = Instant::now();
        let (stdout, store) = if spawned {
            tokio::spawn(bare.run()).await.unwrap()
        } else {
            bare.run().await
        };
        if i >= 10 {
            samples.push(t0.elapsed());
        }
        drop(store);
        assert_eq!(&stdout.contents()[..], b"hello\n");
    }
    Stats::new(samples)
}

/// `wasmpod run` as a process, cold (empty compile cache) and warm, and `wasmtime run` of the
/// same module with a warm cache, the two warm runs alternating.
struct WholeProcess {
    cold: Stats,
    /// When a cold run printed the pod's line.
    cold_output: Stats,
    /// Cold, without tiered compilation: every module waits for Cranelift.
    cold_untiered: Stats,
    cold_untiered_output: Stats,
    warm: Stats,
    cold_rss: u64,
    warm_rss: u64,
    /// `wasmtime run`'s runs and peak, when a wasmtime is at hand (`$WASMTIME` or `PATH`).
    wasmtime: Option<(String, Stats, u64)>,
    /// This bench's own peak before the runs: a child's figure cannot be below it (below).
    floor: u64,
}

/// Wall time and peak resident memory of one run of `command`: the child's `ru_maxrss` from
/// `wait4`. The child is spawned with `vfork`, so the kernel counts the memory it shared with
/// this process until its `exec` as well: the figure is the larger of the child's own peak and
/// this process's (hence measured first, while this process is small, and printed beside).
fn run_timed(command: &mut Command) -> (Duration, u64) {
    let (took, _, rss) = run_timed_output(command);
    (took, rss)
}

/// As [`run_timed`], with the time the child's first line of output came.
fn run_timed_output(command: &mut Command) -> (Duration, Duration, u64) {
    use std::io::BufRead;
    let t0 = Instant::now();
    #[expect(
        clippy::zombie_processes,
        reason = "reaped below by wait4, for its rusage"
    )]
    let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let _ = stdout.read_line(&mut line);
    let output = t0.elapsed();
    let _ = std::io::copy(&mut stdout, &mut std::io::sink());
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, with valid pointers to locals.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let took = t0.elapsed();
    assert!(
        pid > 0 && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{command:?} failed"
    );
    (took, output, usage.ru_maxrss as u64 * 1024)
}

/// This process's peak resident memory so far (`VmHWM`), in bytes.
fn own_peak() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Says how many of `cli/startup.order`'s functions the `wasmpod` measured has: one that lacks
/// many was laid out without them, and measures worse. Run after the whole-process runs: `nm`'s
/// output read here would raise this process's peak, which is a floor for its children's.
fn report_startup_order(bin: &Path) {
    if let Some((listed, present)) = startup_order_in(bin) {
        println!(
            "{} has {present} of the {listed} functions of cli/startup.order{}",
            bin.display(),
            if present * 100 < listed * 98 {
                ": its code is laid out without the others; measure the release build \
                 ($WASMPOD) with the lists made again (tools/startup-order.py)"
            } else {
                ""
            }
        );
    }
}

/// How many of `cli/startup.order`'s functions the binary has, by its symbol table (`nm`): a
/// start of a binary that lacks many was laid out without them, and measures worse (see
/// `build/startup_order.rs`). `None` without `nm` or the list.
fn startup_order_in(bin: &Path) -> Option<(usize, usize)> {
    let list =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/startup.order")).ok()?;
    let out = Command::new("nm")
        .args(["--defined-only", "--format=just-symbols"])
        .arg(bin)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let symbols = String::from_utf8_lossy(&out.stdout);
    let symbols: std::collections::HashSet<&str> = symbols.lines().collect();
    let listed: Vec<&str> = list
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    let present = listed.iter().filter(|f| symbols.contains(*f)).count();
    Some((listed.len(), present))
}

/// The `wasmpod` whose whole runs are timed: `$WASMPOD`, else the one this bench was built with.
fn wasmpod_bin() -> PathBuf {
    std::env::var_os("WASMPOD").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_wasmpod")),
        PathBuf::from,
    )
}

fn whole_process(dir: &Path, pod: &Path) -> WholeProcess {
    let floor = own_peak();
    let bin = wasmpod_bin();
    println!("wasmpod run: {}", bin.display());
    let command = |cache: &Path| {
        let mut command = Command::new(&bin);
        command
            .args(["run", "--state-dir"])
            .arg(dir.join("state"))
            .arg("--cache-dir")
            .arg(cache);
        command
    };
    let wasmpod = |cache: &Path| run_timed(command(cache).arg(pod));
    // A cold run: when the pod's line came, and when the process ended.
    let cold_run = |cache: &Path, tiered: bool| {
        run_timed_output(
            command(cache)
                .arg(format!("--tiered-compilation={tiered}"))
                .arg(pod),
        )
    };
    let wasmtime = std::env::var("WASMTIME").unwrap_or_else(|_| "wasmtime".into());
    let version = Command::new(&wasmtime)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let wasmtime_run = || {
        let mut command = Command::new(&wasmtime);
        command
            .args(["run", "-C", "cache=y", AGNHOST_P1])
            .args(["print", "hello"]);
        run_timed(&mut command)
    };

    let (mut cold, mut cold_untiered) = (Vec::new(), Vec::new());
    for i in 0..5 {
        cold.push(cold_run(&dir.join(format!("cold-{i}")), true));
        cold_untiered.push(cold_run(&dir.join(format!("cold-untiered-{i}")), false));
    }
    let warm_cache = dir.join("warm");
    wasmpod(&warm_cache);
    if version.is_some() {
        wasmtime_run();
    }
    let (mut warm, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        warm.push(wasmpod(&warm_cache));
        if version.is_some() {
            theirs.push(wasmtime_run());
        }
    }
    let peak = |runs: &[(Duration, u64)]| runs.iter().map(|r| r.1).max().unwrap_or(0);
    let times = |runs: &[(Duration, u64)]| Stats::new(runs.iter().map(|r| r.0).collect());
    let outputs =
        |runs: &[(Duration, Duration, u64)]| Stats::new(runs.iter().map(|r| r.1).collect());
    let ends = |runs: &[(Duration, Duration, u64)]| Stats::new(runs.iter().map(|r| r.0).collect());
    WholeProcess {
        cold: ends(&cold),
        cold_output: outputs(&cold),
        cold_untiered: ends(&cold_untiered),
        cold_untiered_output: outputs(&cold_untiered),
        warm: times(&warm),
        cold_rss: cold.iter().map(|r| r.2).max().unwrap_or(0),
        warm_rss: peak(&warm),
        wasmtime: version.map(|v| (v, times(&theirs), peak(&theirs))),
        floor,
    }
}
