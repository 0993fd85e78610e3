//! The criterion suite: the operations that set wasmpod's speed, each against its floor.
//!
//! - `pod/create_to_exit`: a one-container pod whose preview1 guest prints a line and exits,
//!   created and waited for in process (warm compile cache, module already loaded);
//! - `bare/instantiate_and_run`: the least a wasmtime embedding does for the same module
//!   (`InstancePre`, a WASI context with argv and captured stdout, instantiate, `_start`);
//! - `probe/exported_function`: one exported-function probe call (fresh instance + call) on a
//!   running container, through `PodHandle::exec`.
//!
//! `cargo bench -p wasmpod-cli --bench suite`; criterion keeps its reports under
//! `target/criterion`. The other bench binaries (`startup`, `pods`, `termination`, `probes`,
//! `network`, `cpu`) measure whole processes, percentiles and many pods.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use wasmpod::{Node, NodeOptions, PodOptions, PodSpec};

#[path = "support/bare.rs"]
mod bare;
use bare::Embedding;

fn spec(dir: &std::path::Path, args: &str, probe: bool) -> PodSpec {
    let probe = if probe {
        format!(
            r#"
    volumeMounts: [ {{ name: v, mountPath: /probe }} ]
  volumes: [ {{ name: v, hostPath: {{ path: "{}" }} }} ]"#,
            dir.display()
        )
    } else {
        String::new()
    };
    let yaml = wasmpod_tests::fill(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: bench }}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: "{{p1}}"
    args: {args}{probe}
"#
    ));
    PodSpec::from_yaml(&yaml, dir).unwrap()
}

fn benches(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("readiness"), "").unwrap();
    let node = Node::new(
        NodeOptions::default()
            .state_dir(dir.path().join("state"))
            .cache_dir(Some(wasmpod_tests::shared_cache())),
    )
    .unwrap();

    let hello = spec(dir.path(), "[print, hello]", false);
    runtime.block_on(node.load_images(&hello)).unwrap();
    // As the startup bench: pods of the module's optimized code, with its image's twin in the
    // instance pool (made 50 ms after a pod of that image ended), as on a node that runs the
    // image often; not criterion's warm-up, which would give the twin only by chance.
    runtime.block_on(async {
        for i in 0..20 {
            if i == 10 {
                node.optimized().await;
            }
            let pod = node
                .create_pod(hello.clone(), PodOptions::default())
                .await
                .unwrap();
            pod.wait().await;
            pod.delete(None);
            pod.deleted().await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    });
    // Timed: create → every container stopped. Not timed: deleting the pod, which a new pod of
    // the same name waits for (at most one pod of a name at a time).
    c.bench_function("pod/create_to_exit", |b| {
        b.to_async(&runtime).iter_custom(|iters| {
            let (node, hello) = (&node, &hello);
            async move {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    let t0 = std::time::Instant::now();
                    let pod = node
                        .create_pod(hello.clone(), PodOptions::default())
                        .await
                        .unwrap();
                    pod.wait().await;
                    timed += t0.elapsed();
                    pod.delete(None);
                    pod.deleted().await;
                }
                timed
            }
        })
    });

    let bare = Embedding::new();
    c.bench_function("bare/instantiate_and_run", |b| {
        b.to_async(&runtime).iter(|| bare.run())
    });

    let probed = spec(dir.path(), r#"[sleep, "100000000"]"#, true);
    let pod = runtime
        .block_on(node.create_pod(probed, PodOptions::default()))
        .unwrap();
    runtime.block_on(pod.wait_until(|s| {
        s.container_statuses
            .iter()
            .flatten()
            .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
    }));
    c.bench_function("probe/exported_function", |b| {
        b.to_async(&runtime)
            .iter(|| async { pod.exec("c", &["readiness"]).await.unwrap() })
    });
    pod.delete(Some(Duration::ZERO));
    runtime.block_on(pod.deleted());
}

#[allow(
    missing_docs,
    reason = "criterion's macro makes an undocumented public function"
)]
mod group {
    use super::*;
    criterion_group! {
    name = suite;
    config = Criterion::default().sample_size(50).measurement_time(Duration::from_secs(3));
    targets = benches
    }
}
criterion_main!(group::suite);
