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

/// MiB/s of the best of ROUNDS sends of MIB to `port` on loopback.
fn throughput(port: u16) -> f64 {
    let chunk = vec![7u8; 256 * 1024];
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
    MIB as f64 / best.as_secs_f64()
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

    let direct = throughput(host_port);
    let through = |env: &[(&str, &str)]| {
        let (mut child, local) = forward(env);
        let figure = throughput(local);
        child.kill().unwrap();
        let _ = child.wait();
        figure
    };
    let websocket = through(&[]);
    let spdy = through(&[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")]);
    let ratio = websocket / direct;
    println!(
        "portforward: {MIB} MiB to a pod: {direct:.0} MiB/s through its hostPort, {websocket:.0} MiB/s through kubectl port-forward ({ratio:.2}x; {spdy:.0} MiB/s when kubectl falls back to SPDY)"
    );
    let report = json!({
        "direct_mib_per_s": direct,
        "forwarded_mib_per_s": websocket,
        "forwarded_spdy_mib_per_s": spdy,
        "ratio": ratio,
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
