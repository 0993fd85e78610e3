//! The fleet source (`wasmpod serve --source`) against a real `docker-registry` on loopback:
//! - a new revision pushed → its new pod `Running` (seen by `kubectl get` every 50 ms, so a
//!   kubectl's cost is in it), for a 1 s interval, five revisions: the target is at most the
//!   interval + 2 s;
//! - what polling costs beside 100 idle pods (the revision's own): the CPU of a `wasmpod serve`
//!   process over 30 s polling every 200 ms (150 polls, each finding the same revision),
//!   against the same agent restarted on its state with a one-hour interval, gives the CPU of
//!   one poll, and so what a one-minute interval costs; and the process's resident memory in
//!   both.
//!
//! `cargo bench -p wasmpod-cli --bench source`; writes `target/wasmpod-bench/source.json`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use wasmpod_tests::registry::Registry;

const IDLE_PODS: usize = 100;

/// A `wasmpod serve` process and its kubeconfig.
struct Serve {
    child: Child,
    kubeconfig: PathBuf,
}

impl Serve {
    fn start(state: &Path, registry: &Registry, interval: &str) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_wasmpod"))
            .args(["serve", "--listen", "127.0.0.1:0", "--state-dir"])
            .arg(state)
            .arg("--cache-dir")
            .arg(wasmpod_tests::shared_cache())
            .args([
                "--insecure-registry",
                &registry.host,
                "--source-interval",
                interval,
            ])
            .arg("--source")
            .arg(format!("oci://{}/fleet:stable", registry.host))
            .env("WASMPOD_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let kubeconfig = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("KUBECONFIG=").map(PathBuf::from))
            .expect("wasmpod serve printed its kubeconfig");
        Serve { child, kubeconfig }
    }

    fn kubectl(&self, home: &Path, args: &[&str]) -> String {
        let out = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", home)
            .output()
            .expect("kubectl runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The process's CPU time (user and system).
    fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        // SAFETY: sysconf has no preconditions.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        Duration::from_secs_f64(ticks as f64 / per_second as f64)
    }

    fn rss(&self) -> u64 {
        wasmpod_tests::proc_kib(&format!("/proc/{}/status", self.child.id()), "VmRSS:").unwrap_or(0)
            * 1024
    }

    fn until_running(&self, home: &Path, name: &str, limit: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let phase = self.kubectl(
                home,
                &["get", "pod", name, "-o", "jsonpath={.status.phase}"],
            );
            if phase == "Running" {
                return start.elapsed();
            }
            assert!(start.elapsed() < limit, "{name} did not run");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: c\n    \
         image: {}\n    args: [sleep, \"100000000\"]\n",
        wasmpod_tests::guests::AGNHOST_P1
    )
}

/// The revision of the 100 idle pods and `extra` more.
fn revision(extra: &[String]) -> Vec<(String, String)> {
    (0..IDLE_PODS)
        .map(|i| format!("idle-{i}"))
        .chain(extra.iter().cloned())
        .map(|name| (format!("pods/{name}.yaml"), pod(&name)))
        .collect()
}

fn push(
    runtime: &tokio::runtime::Runtime,
    registry: &Registry,
    files: &[(String, String)],
    n: usize,
) {
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    runtime.block_on(registry.push_flux("fleet:stable", &files, &format!("r{n}")));
}

fn main() {
    wasmpod_tests::warm_shared_cache();
    let registry = Registry::start(false);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (home, state) = (tmp.path(), tmp.path().join("state"));
    push(&runtime, &registry, &revision(&[]), 0);

    // Pushed → running, interval 1 s.
    let serve = Serve::start(&state, &registry, "1s");
    let last_idle = format!("idle-{}", IDLE_PODS - 1);
    serve.until_running(home, &last_idle, Duration::from_secs(120));
    let mut latencies = Vec::new();
    let mut extra = Vec::new();
    for n in 1..=5 {
        extra.push(format!("new-{n}"));
        push(&runtime, &registry, &revision(&extra), n);
        latencies.push(serve.until_running(home, &format!("new-{n}"), Duration::from_secs(60)));
    }
    latencies.sort();
    let (median, max) = (latencies[2], latencies[4]);
    drop(serve);

    // Polling's cost: 30 s polling every 200 ms, then 30 s with an hour's interval.
    const WINDOW: Duration = Duration::from_secs(30);
    let cpu_over = |every: &str| {
        let serve = Serve::start(&state, &registry, every);
        serve.until_running(home, &last_idle, Duration::from_secs(120));
        std::thread::sleep(Duration::from_secs(2));
        let (cpu, wall) = (serve.cpu(), Instant::now());
        std::thread::sleep(WINDOW);
        let share = (serve.cpu() - cpu).as_secs_f64() / wall.elapsed().as_secs_f64();
        (share, serve.rss())
    };
    let (polling, rss_polling) = cpu_over("200ms");
    let (quiet, rss_quiet) = cpu_over("1h");
    let polls = WINDOW.as_secs_f64() / 0.2;
    let per_poll = (polling - quiet).max(0.0) * WINDOW.as_secs_f64() / polls;
    let per_minute = per_poll / 60.0;

    println!(
        "source: a pushed revision's new pod Running after {median:.2?} (median of 5), {max:.2?} at most, with a 1 s interval (target: at most 3 s)"
    );
    println!(
        "source: beside {IDLE_PODS} idle pods `wasmpod serve` uses {:.3} % of a core polling every 200 ms and {:.3} % with an hour's interval: {:.2} ms of CPU a poll, {:.4} % of a core at the default minute",
        polling * 100.0,
        quiet * 100.0,
        per_poll * 1000.0,
        per_minute * 100.0
    );
    println!(
        "source: resident memory {:.1} MiB polling, {:.1} MiB not",
        rss_polling as f64 / 1048576.0,
        rss_quiet as f64 / 1048576.0
    );
    let report = json!({
        "pushed_to_running_median_seconds": median.as_secs_f64(),
        "pushed_to_running_max_seconds": max.as_secs_f64(),
        "cpu_percent_polling_200ms": polling * 100.0,
        "cpu_percent_quiet": quiet * 100.0,
        "cpu_ms_per_poll": per_poll * 1000.0,
        "cpu_percent_at_one_minute": per_minute * 100.0,
        "rss_bytes_polling": rss_polling,
        "rss_bytes_quiet": rss_quiet,
    });
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/wasmpod-bench");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("source.json"), report.to_string()).unwrap();
}
