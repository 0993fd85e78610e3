//! `kubectl port-forward` throughput against a direct connection to a published port: the same
//! byte-counting server (a component, `count-server`) in one pod, reached through its
//! `hostPort` and through `kubectl port-forward` (the real kubectl, the WebSocket tunnel it
//! speaks, TLS to the agent and SPDY inside), from a host client that sends 256 MiB in 256 KiB
//! writes and waits for the server's count. Best of 3 each.
//!
//! `cargo bench -p wasmpod-cli --bench portforward`; writes `target/wasmpod-bench/portforward.json`
//! and compares with the `portforward` entry of `docs/bench-baseline.json`.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use wasmpod::NodeOptions;
use wasmpod_agent::{Agent, AgentOptions};

const MIB: usize = 256;
const ROUNDS: usize = 3;

/// MiB/s of the best of ROUNDS sends of MIB to `port` on loopback, and the CPU seconds the
/// process `cpu_of` (if any) spent per MiB over all the rounds.
fn throughput(port: u16, cpu_of: Option<u32>) -> (f64, f64) {
    let chunk = vec![7u8; 256 * 1024];
    let cpu_before = cpu_of.map_or(0.0, cpu_seconds);
    let best = (0..ROUNDS)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            let start = Instant::now();
            for _ in 0..MIB * 4 {
                s.write_all(&chunk).unwrap();
            }
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut ack = [0; 8];
            s.read_exact(&mut ack).unwrap();
            assert_eq!(u64::from_le_bytes(ack), (MIB as u64) << 20);
            start.elapsed()
        })
        .min()
        .unwrap();
    let cpu = cpu_of.map_or(0.0, cpu_seconds) - cpu_before;
    (MIB as f64 / best.as_secs_f64(), cpu / (MIB * ROUNDS) as f64)
}

/// The user and system CPU seconds process `pid` (all its threads) has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command's `(name)`: state is the 3rd field, utime the 14th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // SAFETY: sysconf only reads a configuration value.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

fn main() {
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
    let host_port = wasmpod_tests::free_port();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "counter"},
        "spec": {"containers": [{
            "name": "count", "image": wasmpod_tests::guests::AGNHOST_P2,
            "args": ["count-server", "0.0.0.0:7000"],
            "ports": [{"containerPort": 7000, "hostPort": host_port}],
        }]},
    });
    let file = tmp.path().join("pod.json");
    std::fs::write(&file, pod.to_string()).unwrap();
    let kubectl = |args: &[&str]| {
        Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", agent.kubeconfig())
            .env("HOME", tmp.path())
            .output()
            .unwrap()
    };
    assert!(
        kubectl(&["create", "-f", file.to_str().unwrap()])
            .status
            .success()
    );
    assert!(
        kubectl(&[
            "wait",
            "--for=condition=Ready",
            "pod/counter",
            "--timeout=60s"
        ])
        .status
        .success()
    );
    // kubectl port-forward of 0:7000: the process and its local port.
    let forward = |env: &[(&str, &str)]| {
        let mut child = Command::new("kubectl")
            .args([
                "port-forward",
                "--address",
                "127.0.0.1",
                "pod/counter",
                "0:7000",
            ])
            .env("KUBECONFIG", agent.kubeconfig())
            .env("HOME", tmp.path())
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = lines.next().unwrap().unwrap();
        let local: u16 = line
            .split_whitespace()
            .nth(2)
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        std::thread::spawn(move || lines.for_each(drop));
        (child, local)
    };
    // The server listens once the pod is Ready; the published port carries the first try.
    std::thread::sleep(Duration::from_millis(200));

    let (direct, _) = throughput(host_port, None);
    let through = |env: &[(&str, &str)]| {
        let (mut child, local) = forward(env);
        let figures = throughput(local, Some(child.id()));
        child.kill().unwrap();
        let _ = child.wait();
        figures
    };
    let (websocket, kubectl_cpu) = through(&[]);
    let (spdy, kubectl_spdy_cpu) = through(&[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")]);
    let ratio = websocket / direct;
    // The most kubectl alone could move, in the protocol it spends less on, with every core of
    // the machine to itself: the agent's side costing nothing.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let kubectl_ceiling = cores / kubectl_cpu.min(kubectl_spdy_cpu);
    println!(
        "portforward: {MIB} MiB to a pod: {direct:.0} MiB/s through its hostPort, {websocket:.0} MiB/s through kubectl port-forward ({ratio:.2}x; {spdy:.0} MiB/s when kubectl falls back to SPDY)"
    );
    println!(
        "portforward: kubectl used {:.2} ms of CPU a MiB ({:.2} with SPDY): with all {cores} cores to itself it would move at most {kubectl_ceiling:.0} MiB/s ({:.2}x the hostPort)",
        kubectl_cpu * 1e3,
        kubectl_spdy_cpu * 1e3,
        kubectl_ceiling / direct,
    );
    let report = json!({
        "direct_mib_per_s": direct,
        "forwarded_mib_per_s": websocket,
        "forwarded_spdy_mib_per_s": spdy,
        "ratio": ratio,
        "kubectl_cpu_ms_per_mib": kubectl_cpu * 1e3,
        "kubectl_spdy_cpu_ms_per_mib": kubectl_spdy_cpu * 1e3,
        "kubectl_ceiling_ratio": kubectl_ceiling / direct,
    });
    wasmpod_tests::compare_bench(
        "portforward",
        &report,
        &[
            "direct_mib_per_s",
            "forwarded_mib_per_s",
            "forwarded_spdy_mib_per_s",
            "ratio",
        ],
    );
    wasmpod_tests::save_bench("portforward", &report);
    runtime.block_on(agent.stop());
}
