//! Pod network against the kernel: the same guests (a client, a byte-counting server and an echo
//! server, all components using `std::net`) measured twice in one run:
//! - in a wasmpod pod, talking over the pod's in-memory network;
//! - on plain wasmtime-wasi with its own sockets (`inherit_network`), talking over the host's
//!   kernel loopback.
//!
//! Throughput: the client sends 256 MiB (in 256 KiB writes) and waits for the server's count,
//! best of 5. Connection latency: connect, send one byte, half-close, read the echo to the end,
//! p50/p99 of 2,000. Both are timed inside the client guest, so both paths are measured alike.
//!
//! `cargo bench -p wasmpod-cli --bench network`; writes `target/wasmpod-bench/network.json`.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use wasmpod::{Node, NodeOptions, PodOptions, PodSpec, Stream};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::p2::bindings::Command;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

const MIB: usize = 256;
const ROUNDS: usize = 5;
const PINGS: usize = 2000;

/// The client's script: ROUNDS blasts then the pings.
fn client_args(count: &str, echo: &str) -> Vec<String> {
    let mut args = Vec::new();
    for _ in 0..ROUNDS {
        args.extend(["blast".into(), count.into(), MIB.to_string()]);
    }
    args.extend(["ping".into(), echo.into(), PINGS.to_string()]);
    args
}

#[derive(Debug, Default)]
struct Figures {
    mib_per_s: f64,
    ping_p50_us: f64,
    ping_p99_us: f64,
}

/// Reads the client's `blast ... in T us` and `ping p50 X us p99 Y us` lines.
fn figures(output: &str) -> Figures {
    let mut f = Figures::default();
    for line in output.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["blast", bytes, "bytes", "in", us, "us"] => {
                let rate = bytes.parse::<f64>().unwrap()
                    / (1 << 20) as f64
                    / (us.parse::<f64>().unwrap() / 1e6);
                f.mib_per_s = f.mib_per_s.max(rate);
            }
            ["ping", "p50", p50, "us", "p99", p99, "us"] => {
                f.ping_p50_us = p50.parse().unwrap();
                f.ping_p99_us = p99.parse().unwrap();
            }
            _ => {}
        }
    }
    assert!(
        f.mib_per_s > 0.0 && f.ping_p50_us > 0.0,
        "client output: {output}"
    );
    f
}

async fn pod_network(dir: &std::path::Path) -> Figures {
    let node = Node::new(
        NodeOptions::default()
            .state_dir(dir.join("state"))
            .cache_dir(Some(wasmpod_tests::shared_cache())),
    )
    .unwrap();
    let args = client_args("localhost:9000", "localhost:9001")
        .iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let yaml = wasmpod_tests::fill(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: bench }}
spec:
  restartPolicy: Never
  initContainers:
  - {{ name: count, image: "{{p2}}", restartPolicy: Always, args: [count-server, "0.0.0.0:9000"] }}
  - {{ name: echo, image: "{{p2}}", restartPolicy: Always, args: [echo-server, "0.0.0.0:9001"] }}
  containers:
  - {{ name: client, image: "{{p2}}", args: [{args}] }}
"#
    ));
    let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
    let spec = PodSpec::from_yaml(&yaml, dir).unwrap();
    let pod = node
        .create_pod(spec, PodOptions::default().output(tx))
        .await
        .unwrap();
    let collect = tokio::spawn(async move {
        let mut out = String::new();
        while let Some(line) = rx.recv().await {
            if line.container == "client" && line.stream == Stream::Stdout {
                out.push_str(&line.line);
                out.push('\n');
            }
        }
        out
    });
    let status = pod.wait().await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{status:#?}");
    pod.delete(Some(Duration::ZERO));
    pod.deleted().await;
    drop(pod);
    drop(node);
    figures(&collect.await.unwrap())
}

struct Host {
    ctx: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Host {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

async fn kernel_loopback() -> Figures {
    let engine = Engine::new(&Config::new()).unwrap();
    let component = Component::from_file(&engine, wasmpod_tests::guests::AGNHOST_P2).unwrap();
    let mut linker = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
    let pre = linker.instantiate_pre(&component).unwrap();
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let (count, echo) = (free(), free());
    let run = |args: Vec<String>, stdout: MemoryOutputPipe| {
        let pre = pre.clone();
        let engine = engine.clone();
        async move {
            let mut b = WasiCtxBuilder::new();
            b.arg("agnhost")
                .args(&args)
                .stdout(stdout)
                .inherit_network()
                .allow_tcp(true)
                .allow_ip_name_lookup(true);
            let mut store = Store::new(
                &engine,
                Host {
                    ctx: b.build(),
                    table: ResourceTable::new(),
                },
            );
            let instance = pre.instantiate_async(&mut store).await.unwrap();
            let command = Command::new(&mut store, &instance).unwrap();
            let _ = command.wasi_cli_run().call_run(&mut store).await;
        }
    };
    let servers = [
        tokio::spawn(run(
            vec!["count-server".into(), count.to_string()],
            MemoryOutputPipe::new(1 << 16),
        )),
        tokio::spawn(run(
            vec!["echo-server".into(), echo.to_string()],
            MemoryOutputPipe::new(1 << 16),
        )),
    ];
    let stdout = MemoryOutputPipe::new(1 << 20);
    run(
        client_args(&count.to_string(), &echo.to_string()),
        stdout.clone(),
    )
    .await;
    for s in servers {
        s.abort();
    }
    figures(&String::from_utf8_lossy(&stdout.contents()))
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let pod = pod_network(dir.path()).await;
    let kernel = kernel_loopback().await;
    println!(
        "{:<34} {:>14} {:>14} {:>8}",
        "measure", "pod network", "kernel", "ratio"
    );
    let rows = [
        (
            "throughput, MiB/s (best of 5)",
            pod.mib_per_s,
            kernel.mib_per_s,
        ),
        (
            "connection round trip p50, us",
            pod.ping_p50_us,
            kernel.ping_p50_us,
        ),
        (
            "connection round trip p99, us",
            pod.ping_p99_us,
            kernel.ping_p99_us,
        ),
    ];
    let mut results = HashMap::new();
    for (name, p, k) in rows {
        println!("{name:<34} {p:>14.1} {k:>14.1} {:>8.2}", p / k);
        results.insert(
            name,
            json!({ "pod_network": p, "kernel_loopback": k, "ratio": p / k }),
        );
    }
    let ratio = pod.mib_per_s / kernel.mib_per_s;
    let flat = json!({
        "pod_mib_per_s": pod.mib_per_s,
        "kernel_mib_per_s": kernel.mib_per_s,
        "throughput_ratio": ratio,
        "round_trip_p50_ratio": pod.ping_p50_us / kernel.ping_p50_us,
        "round_trip_p99_ratio": pod.ping_p99_us / kernel.ping_p99_us,
    });
    println!(
        "throughput ratio {ratio:.2} (target: at least 1.5 in every run): {}",
        wasmpod_tests::verdict(ratio >= 1.5)
    );
    wasmpod_tests::compare_bench(
        "network",
        &flat,
        &[
            "pod_mib_per_s",
            "kernel_mib_per_s",
            "throughput_ratio",
            "round_trip_p50_ratio",
            "round_trip_p99_ratio",
        ],
    );
    results.insert("flat", flat);
    wasmpod_tests::save_bench("network", &json!(results));
}
