//! The shim under a real containerd (Debian's 1.6, started here with its own root).
//!
//! - `ctr run --rm` start to exit of a small module and of a component printing a line (p50 and
//!   max of 15 runs, the `ctr` command's wall time: containerd, the shim's start, compiling or
//!   loading the guest, running it, the teardown);
//! - through the CRI, as the kubelet drives it: a pod's start (`RunPodSandbox`, then
//!   `CreateContainer` + `StartContainer` until the container runs), the start of a second
//!   container of the same image in the running pod, an `ExecSync` round trip (p50 of 30), and
//!   the memory of the pod's shim process with 1, 2 and 10 sleeping containers: resident memory
//!   (RSS) and proportional set size (PSS), and what each container past the first adds.
//!
//! `cargo bench -p wasmpod-shim --bench containerd`; writes `target/wasmpod-bench/shim.json` and
//! compares with the `shim` entry of `docs/bench-baseline.json`. Needs root and containerd.

#[path = "../tests/support/cri.rs"]
mod support;

use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use serde_json::json;
use support::{Node, Spec, shims_of};
use wasmpod_tests::containerd::{Containerd, pss_kib, rss_kib};
use wasmpod_tests::guests;

/// The shim under test: `$WASMPOD_SHIM` when set (the binary a node installs, a release build of
/// the shim alone: the benches' own build has other dependency features and code layout), else
/// the one this bench was built with.
fn shim() -> String {
    std::env::var("WASMPOD_SHIM")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_containerd-shim-wasmpod-v1").to_owned())
}
const RUNS: usize = 15;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn p50_max(mut times: Vec<Duration>) -> (f64, f64) {
    times.sort();
    (ms(times[times.len() / 2]), ms(times[times.len() - 1]))
}

/// `ctr run` to the end, `RUNS` times (after one run that warms containerd and the caches).
fn start_to_exit(ctd: &Containerd, image: &str, name: &str) -> (f64, f64) {
    let mut times = Vec::new();
    for i in 0..=RUNS {
        let start = Instant::now();
        let run = ctd.run(&[], image, &format!("{name}-{i}"), &["print", "hi"]);
        let took = start.elapsed();
        assert_eq!((run.code, run.stdout.as_str()), (0, "hi\n"), "{run:?}");
        if i > 0 {
            times.push(took);
        }
    }
    p50_max(times)
}

/// Starts a sleeping container in `pod` and waits until it prints: how long that took.
fn start_sleeper(
    node: &mut Node,
    pod: &str,
    config: &cri::PodSandboxConfig,
    image: &str,
    name: &str,
) -> Duration {
    let start = Instant::now();
    node.start_container(
        pod,
        config,
        &Spec {
            name,
            image,
            args: &["print", "up", "sleep", "600000"],
            ..Default::default()
        },
    );
    node.wait_for_line(&config.metadata.as_ref().unwrap().name, name, "up");
    start.elapsed()
}

/// RSS and PSS of the pod's shim process, in KiB.
fn pod_memory(pod: &str) -> (u64, u64) {
    let pids = shims_of(&[pod]);
    assert_eq!(pids.len(), 1, "one shim process per pod");
    (rss_kib(pids[0]).unwrap(), pss_kib(pids[0]).unwrap())
}

fn main() {
    let shim = shim();
    println!("shim: {shim}");
    let ctd = Containerd::start(shim.as_ref());
    let p1 = ctd.import("p1", guests::AGNHOST_P1.as_ref());
    let p2 = ctd.import("p2", guests::AGNHOST_P2.as_ref());
    let module_kib = std::fs::metadata(guests::AGNHOST_P1).unwrap().len() / 1024;
    let component_kib = std::fs::metadata(guests::AGNHOST_P2).unwrap().len() / 1024;
    let (module_p50, module_max) = start_to_exit(&ctd, &p1, "m");
    let (component_p50, component_max) = start_to_exit(&ctd, &p2, "c");
    drop(ctd);

    let mut node = Node::start(&shim);
    let image = node.ctd.import("probed", guests::PROBED_P2.as_ref());
    let config = node.sandbox_config("bench", &[]);
    let start = Instant::now();
    let pod = node.run_pod(&config);
    let first = start_sleeper(&mut node, &pod, &config, &image, "c0");
    let pod_start = start.elapsed();
    let one = pod_memory(&pod);
    let second = start_sleeper(&mut node, &pod, &config, &image, "c1");
    let two = pod_memory(&pod);
    let mut later = Vec::new();
    for i in 2..10 {
        later.push(start_sleeper(
            &mut node,
            &pod,
            &config,
            &image,
            &format!("c{i}"),
        ));
    }
    std::thread::sleep(Duration::from_millis(300));
    let ten = pod_memory(&pod);
    let (later_p50, _) = p50_max(later);

    let mut execs = Vec::new();
    let c0 = node.container_id("c0");
    for _ in 0..=30 {
        let start = Instant::now();
        let out = node
            .exec_sync(&c0, &["/app.wasm", "print", "x"], 10)
            .unwrap();
        execs.push(start.elapsed());
        assert_eq!(out.exit_code, 0);
    }
    execs.remove(0);
    let (exec_p50, exec_max) = p50_max(execs);
    node.remove_pod(&pod);

    let per_extra = |a: (u64, u64), b: (u64, u64), n: u64| {
        (
            (b.0 as f64 - a.0 as f64) / n as f64,
            (b.1 as f64 - a.1 as f64) / n as f64,
        )
    };
    let (rss_extra, pss_extra) = per_extra(one, ten, 9);
    println!("ctr run --rm, start to exit (p50 / max of {RUNS}):");
    println!("  module    ({module_kib} KiB)    {module_p50:>7.1} / {module_max:>7.1} ms");
    println!("  component ({component_kib} KiB)   {component_p50:>7.1} / {component_max:>7.1} ms");
    println!(
        "through the CRI (a component of {} KiB):",
        std::fs::metadata(guests::PROBED_P2).unwrap().len() / 1024
    );
    println!(
        "  RunPodSandbox + Create + Start until its output: {:.1} ms (the container alone {:.1} ms)",
        ms(pod_start),
        ms(first)
    );
    println!(
        "  a second container of the pod: {:.1} ms; the 3rd to 10th: p50 {later_p50:.1} ms",
        ms(second)
    );
    println!("  ExecSync round trip: p50 {exec_p50:.2} ms, max {exec_max:.2} ms (of 30)");
    println!(
        "  the pod's shim process: 1 container RSS {} KiB PSS {} KiB; 2: {} / {}; 10: {} / {}",
        one.0, one.1, two.0, two.1, ten.0, ten.1
    );
    println!("  each container past the first: RSS {rss_extra:.0} KiB, PSS {pss_extra:.0} KiB");
    let report = json!({
        "module_start_to_exit_p50_ms": module_p50,
        "module_start_to_exit_max_ms": module_max,
        "component_start_to_exit_p50_ms": component_p50,
        "component_start_to_exit_max_ms": component_max,
        "cri_pod_start_ms": ms(pod_start),
        "cri_second_container_start_ms": ms(second),
        "cri_later_container_start_p50_ms": later_p50,
        "exec_sync_p50_ms": exec_p50,
        "pod_rss_kib": {"1": one.0, "2": two.0, "10": ten.0},
        "pod_pss_kib": {"1": one.1, "2": two.1, "10": ten.1},
        "rss_per_extra_container_kib": rss_extra,
        "pss_per_extra_container_kib": pss_extra,
    });
    wasmpod_tests::compare_bench(
        "shim",
        &report,
        &[
            "module_start_to_exit_p50_ms",
            "component_start_to_exit_p50_ms",
            "cri_second_container_start_ms",
            "exec_sync_p50_ms",
            "pss_per_extra_container_kib",
        ],
    );
    wasmpod_tests::save_bench("shim", &report);
}
