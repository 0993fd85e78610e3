//! Probe cost: one exported-function probe call (fresh instance + call, through
//! `PodHandle::exec`) for a preview1 module and a component, p50/p99, next to a bare wasmtime
//! embedding doing the same (a pre-linked module, a WASI context with the probe directory
//! preopened, instantiate, call the export) in the same run; and the CPU that N containers
//! (default 1,000; `BENCH_PODS`) each probed once a second cost the node.
//!
//! `cargo bench -p wasmpod-cli --bench probes`; writes `target/wasmpod-bench/probes.json` and
//! prints the figures beside the `probes` entry of `docs/bench-baseline.json`, with the targets'
//! verdicts.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use wasmpod::{PodOptions, PodSpec};

fn pct(s: &[Duration], p: f64) -> Duration {
    s[((s.len() - 1) as f64 * p).round() as usize]
}

fn pod(name: &str, image: &str, probe_dir: &Path, readiness: bool) -> String {
    let probe = if readiness {
        "\n    readinessProbe: { exec: { command: [readiness] }, periodSeconds: 1 }"
    } else {
        ""
    };
    wasmpod_tests::fill(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: {name} }}
spec:
  volumes: [ {{ name: v, hostPath: {{ path: "{}" }} }} ]
  containers:
  - name: c
    image: "{image}"
    args: [sleep, "100000000"]
    volumeMounts: [ {{ name: v, mountPath: /probe }} ]{probe}
"#,
        probe_dir.display()
    ))
}

#[tokio::main]
async fn main() {
    // A node on a temporary state dir with the shared compile cache.
    let wasmpod_tests::TestNode { node, dir } = wasmpod_tests::TestNode::new();
    let probe_dir = dir.path().join("probe");
    std::fs::create_dir(&probe_dir).unwrap();
    std::fs::write(probe_dir.join("readiness"), "").unwrap();
    let mut results = serde_json::Map::new();
    println!("{:<44} {:>12} {:>12}", "measure", "p50", "p99");
    let mut ratios = Vec::new();
    let mut row = |name: String, mut samples: Vec<Duration>| {
        samples.sort();
        let (p50, p99) = (pct(&samples, 0.5), pct(&samples, 0.99));
        println!("{name:<44} {p50:>12?} {p99:>12?}");
        results.insert(name, json!({ "n": samples.len(), "p50_us": p50.as_secs_f64() * 1e6, "p99_us": p99.as_secs_f64() * 1e6 }));
        p50
    };
    for (kind, image) in [("preview1 module", "{p1}"), ("component", "{probed}")] {
        let spec = PodSpec::from_yaml(&pod("one", image, &probe_dir, false), dir.path()).unwrap();
        let handle = node.create_pod(spec, PodOptions::default()).await.unwrap();
        handle
            .wait_until(|s| s.container_statuses.iter().flatten().all(|c| c.ready))
            .await;
        let mut samples = Vec::new();
        for i in 0..1100 {
            let t0 = Instant::now();
            handle.exec("c", &["readiness"]).await.unwrap();
            if i >= 100 {
                samples.push(t0.elapsed());
            }
        }
        let probe = row(format!("exported-function probe, {kind}"), samples);
        handle.delete(Some(Duration::ZERO));
        handle.deleted().await;
        let bare = if kind == "component" {
            bare::component(&probe_dir, 1100).await
        } else {
            bare::module(&probe_dir, 1100).await
        };
        let bare = row(format!("bare wasmtime instantiate + call, {kind}"), bare);
        let ratio = probe.as_secs_f64() / bare.as_secs_f64();
        println!("probe / bare, {kind}, p50: {ratio:.2}");
        ratios.push((format!("probe_over_bare_p50, {kind}"), json!(ratio)));
    }
    results.extend(ratios);

    let n: usize = std::env::var("BENCH_PODS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let mut pods = Vec::new();
    for i in 0..n {
        // One pod of a name at a time: each has its own.
        let yaml = pod(&format!("probed-{i}"), "{p1}", &probe_dir, true);
        let spec = PodSpec::from_yaml(&yaml, dir.path()).unwrap();
        pods.push(node.create_pod(spec, PodOptions::default()).await.unwrap());
    }
    for pod in &pods {
        pod.wait_until(|s| s.container_statuses.iter().flatten().all(|c| c.ready))
            .await;
    }
    let window = Duration::from_secs(10);
    {
        let before = wasmpod_tests::cpu_time();
        tokio::time::sleep(window).await;
        let used = wasmpod_tests::cpu_time() - before;
        let cores = used.as_secs_f64() / window.as_secs_f64();
        println!(
            "{n} containers probed once a second: {:.1}% of one core ({:.0} µs CPU per probe)",
            cores * 100.0,
            used.as_secs_f64() * 1e6 / (n as f64 * window.as_secs_f64())
        );
        results.insert(
            "probed_once_a_second".into(),
            json!({ "containers": n, "cpu_cores": cores }),
        );
    }
    for pod in &pods {
        pod.delete(Some(Duration::ZERO));
    }
    for pod in &pods {
        pod.deleted().await;
    }
    let results = serde_json::Value::Object(results);
    wasmpod_tests::save_bench("probes", &results);
    wasmpod_tests::compare_bench(
        "probes",
        &results,
        &[
            "/exported-function probe, preview1 module/p50_us",
            "/exported-function probe, component/p50_us",
            "probe_over_bare_p50, preview1 module",
            "probe_over_bare_p50, component",
            "/probed_once_a_second/cpu_cores",
        ],
    );
    for kind in ["preview1 module", "component"] {
        if let Some(ratio) = results[format!("probe_over_bare_p50, {kind}")].as_f64() {
            println!(
                "probe / bare p50, {kind}: {ratio:.2}; target ≤ {TARGET_OVER_BARE}: {}",
                wasmpod_tests::verdict(ratio <= TARGET_OVER_BARE)
            );
        }
    }
    if let Some(cores) = results
        .pointer("/probed_once_a_second/cpu_cores")
        .and_then(|v| v.as_f64())
    {
        println!(
            "containers probed once a second: {:.1} % of a core; target ≤ {:.0} % (at 1,000): {}",
            cores * 100.0,
            TARGET_CORES * 100.0,
            wasmpod_tests::verdict(cores <= TARGET_CORES)
        );
    }
}

/// Targets: a probe's p50 within this many times the bare embedding's, and 1,000 containers
/// probed once a second within this share of a core.
const TARGET_OVER_BARE: f64 = 2.0;
const TARGET_CORES: f64 = 0.10;

/// The least a wasmtime embedding does to call a probe export: what `PodHandle::exec` is
/// measured against.
mod bare {
    use std::path::Path;
    use std::time::{Duration, Instant};

    use wasmtime::component::{Component, Linker as ComponentLinker, ResourceTable};
    use wasmtime::{Config, Engine, Linker, Module, Store};
    use wasmtime_wasi::p1::WasiP1Ctx;
    use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

    fn engine() -> Engine {
        let mut config = Config::new();
        config.epoch_interruption(true);
        Engine::new(&config).unwrap()
    }

    fn wasi(probe_dir: &Path) -> WasiCtxBuilder {
        let mut wasi = WasiCtxBuilder::new();
        wasi.args(&["c"])
            .preopened_dir(probe_dir, "/probe", FsPerms::ReadWrite)
            .unwrap();
        wasi
    }

    /// Instantiates the preview1 `agnhost` and calls `wasmpod_probe_readiness`, `n` times.
    pub(crate) async fn module(probe_dir: &Path, n: usize) -> Vec<Duration> {
        let engine = engine();
        let module = Module::from_file(&engine, wasmpod_tests::guests::AGNHOST_P1).unwrap();
        let mut linker = Linker::<WasiP1Ctx>::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |s| s).unwrap();
        let pre = linker.instantiate_pre(&module).unwrap();
        let mut samples = Vec::new();
        for i in 0..n {
            let t0 = Instant::now();
            let mut store = Store::new(&engine, wasi(probe_dir).build_p1());
            store.set_epoch_deadline(u64::MAX / 2);
            let instance = pre.instantiate_async(&mut store).await.unwrap();
            let probe = instance
                .get_typed_func::<(), i32>(&mut store, "wasmpod_probe_readiness")
                .unwrap();
            assert_eq!(probe.call_async(&mut store, ()).await.unwrap(), 0);
            if i >= 100 {
                samples.push(t0.elapsed());
            }
        }
        samples
    }

    struct P2 {
        wasi: WasiCtx,
        table: ResourceTable,
    }

    impl WasiView for P2 {
        fn ctx(&mut self) -> WasiCtxView<'_> {
            WasiCtxView {
                ctx: &mut self.wasi,
                table: &mut self.table,
            }
        }
    }

    /// Instantiates the `probed` component and calls `wasmpod:pod/probes.readiness`, `n` times.
    pub(crate) async fn component(probe_dir: &Path, n: usize) -> Vec<Duration> {
        let engine = engine();
        let component = Component::from_file(&engine, wasmpod_tests::guests::PROBED_P2).unwrap();
        let mut linker = ComponentLinker::<P2>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
        // The guest imports wasmpod's termination interface, which a probe does not call.
        let mut term = linker.instance("wasmpod:pod/termination@0.1.0").unwrap();
        for name in ["requested", "subscribe"] {
            term.func_new(name, |_, _, _, _| {
                Err(wasmtime::format_err!("not called by a probe"))
            })
            .unwrap();
        }
        let pre = linker.instantiate_pre(&component).unwrap();
        let index = pre
            .component()
            .get_export_index(None, "wasmpod:pod/probes@0.1.0")
            .unwrap();
        let index = pre
            .component()
            .get_export_index(Some(&index), "readiness")
            .unwrap();
        let mut samples = Vec::new();
        for i in 0..n {
            let t0 = Instant::now();
            let state = P2 {
                wasi: wasi(probe_dir).build(),
                table: ResourceTable::new(),
            };
            let mut store = Store::new(&engine, state);
            store.set_epoch_deadline(u64::MAX / 2);
            let instance = pre.instantiate_async(&mut store).await.unwrap();
            let probe = instance
                .get_typed_func::<(), (Result<(), String>,)>(&mut store, index)
                .unwrap();
            let (result,) = probe.call_async(&mut store, ()).await.unwrap();
            assert_eq!(result, Ok(()));
            if i >= 100 {
                samples.push(t0.elapsed());
            }
        }
        samples
    }
}
