//! The shim under a real containerd (Debian's, started here with its own root): `ctr run --rm`
//! start-to-exit of a small module and of a component printing a line (p50 and max of 15 runs,
//! the `ctr` command's wall time: containerd, the shim's start, the container's namespaces and
//! cgroup, compiling the guest in the container, running it, the teardown), and the memory of
//! 10 sleeping containers: per container, the resident memory (RSS) and proportional set size
//! (PSS: shared pages split among the processes sharing them) summed over its processes (the
//! shim, runwasi's zygote, the container's process).
//!
//! `cargo bench -p wasmpod-shim --bench containerd`; writes `target/wasmpod-bench/shim.json` and
//! compares with the `shim` entry of `docs/bench-baseline.json`. Needs root and containerd.

use std::time::{Duration, Instant};

use serde_json::json;
use wasmpod_tests::containerd::{Containerd, pss_kib, rss_kib};
use wasmpod_tests::guests;

const SHIM: &str = env!("CARGO_BIN_EXE_containerd-shim-wasmpod-v1");
const RUNS: usize = 15;
const SLEEPERS: usize = 10;

fn p50_max(mut times: Vec<Duration>) -> (f64, f64) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(times[times.len() / 2]), ms(times[times.len() - 1]))
}

/// `ctr run` to the end, `RUNS` times (after one run that warms containerd and the page cache).
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

/// The pids of the processes serving container `id`: its shim and their children.
fn processes_of(id: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let shim = args
            .first()
            .is_some_and(|a| a.ends_with(b"containerd-shim-wasmpod-v1"));
        let ours = args
            .windows(2)
            .any(|w| w[0] == b"-id" && w[1] == id.as_bytes());
        if shim && ours {
            pids.push(pid);
        }
    }
    pids
}

fn main() {
    let ctd = Containerd::start(SHIM.as_ref());
    let p1 = ctd.import("p1", guests::AGNHOST_P1.as_ref());
    let p2 = ctd.import("p2", guests::AGNHOST_P2.as_ref());
    let module_kib = std::fs::metadata(guests::AGNHOST_P1).unwrap().len() / 1024;
    let component_kib = std::fs::metadata(guests::AGNHOST_P2).unwrap().len() / 1024;

    let (module_p50, module_max) = start_to_exit(&ctd, &p1, "m");
    let (component_p50, component_max) = start_to_exit(&ctd, &p2, "c");

    let mut sleepers: Vec<_> = (0..SLEEPERS)
        .map(|i| {
            ctd.spawn(
                &[],
                &p1,
                &format!("s{i}"),
                &["print", "up", "sleep", "600000"],
            )
        })
        .collect();
    for s in &mut sleepers {
        s.wait_for_line("up");
    }
    let (mut rss, mut pss, mut processes) = (0, 0, 0);
    for i in 0..SLEEPERS {
        let pids = processes_of(&format!("s{i}"));
        processes += pids.len();
        rss += pids.iter().filter_map(|p| rss_kib(*p)).sum::<u64>();
        pss += pids.iter().filter_map(|p| pss_kib(*p)).sum::<u64>();
    }
    let per = |kib: u64| kib as f64 / SLEEPERS as f64;
    for i in 0..SLEEPERS {
        let _ = ctd.ctr(&["task", "kill", "-s", "SIGKILL", &format!("s{i}")]);
    }
    for s in sleepers {
        s.finish();
    }

    println!("ctr run --rm, start to exit (p50 / max of {RUNS}):");
    println!("  module    ({module_kib} KiB)    {module_p50:>7.1} / {module_max:>7.1} ms");
    println!("  component ({component_kib} KiB)   {component_p50:>7.1} / {component_max:>7.1} ms");
    println!(
        "memory per sleeping container ({SLEEPERS} at once, {:.1} processes each): \
         RSS {:.0} KiB, PSS {:.0} KiB",
        processes as f64 / SLEEPERS as f64,
        per(rss),
        per(pss)
    );
    let report = json!({
        "module_start_to_exit_p50_ms": module_p50,
        "module_start_to_exit_max_ms": module_max,
        "component_start_to_exit_p50_ms": component_p50,
        "component_start_to_exit_max_ms": component_max,
        "rss_per_container_kib": per(rss),
        "pss_per_container_kib": per(pss),
        "processes_per_container": processes as f64 / SLEEPERS as f64,
    });
    wasmpod_tests::compare_bench(
        "shim",
        &report,
        &[
            "module_start_to_exit_p50_ms",
            "component_start_to_exit_p50_ms",
            "rss_per_container_kib",
            "pss_per_container_kib",
        ],
    );
    wasmpod_tests::save_bench("shim", &report);
}
