//! Tiered compilation as pods see it (docs/design.md, "One process, one engine"): a module the
//! node never compiled runs at once on baseline code in containers that end (a Job's, an init
//! container), while a container that lives as long as its pod (`restartPolicy: Always`, a
//! sidecar) waits for the optimized code it would otherwise keep. The `Pulled` events say which.

use std::time::Duration;

use wasmpod::{PodHandle, Reason};
use wasmpod_tests::{PodYaml, RUNNING_LIMIT, TestNode};

/// The message of `container`'s `Pulled` event.
async fn pulled(pod: &PodHandle, container: &str) -> String {
    let mut events = pod.events();
    let find = async {
        while let Some(e) = events.next().await {
            if e.container.as_deref() == Some(container) && e.reason == Reason::Pulled {
                return e.message;
            }
        }
        panic!("the pod ended without a Pulled event for {container}");
    };
    tokio::time::timeout(RUNNING_LIMIT, find)
        .await
        .unwrap_or_else(|_| panic!("no Pulled event for {container} within {RUNNING_LIMIT:?}"))
}

/// A node without an on-disk compile cache: each of its modules is compiled anew.
fn uncached() -> TestNode {
    TestNode::with(|o| o.cache_dir(None))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_that_end_start_on_baseline_code_and_long_lived_ones_wait_for_optimized_code() {
    let baseline = cfg!(target_arch = "x86_64");
    // A Job's container: at once, on baseline code (Winch generates x86-64 only).
    let node = uncached();
    let job = PodYaml::new("job")
        .never()
        .container(r#"{ name: once, image: "{p1}", args: [print, done] }"#)
        .build();
    let job = node.start(&job).await;
    let message = pulled(&job, "once").await;
    assert!(message.starts_with("Successfully compiled"), "{message}");
    assert_eq!(message.contains("baseline code"), baseline, "{message}");
    let status = tokio::time::timeout(RUNNING_LIMIT, job.wait())
        .await
        .unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));

    // A server's container: its module compiled by Cranelift first, as without tiers.
    let node = uncached();
    let server = PodYaml::new("server")
        .container(r#"{ name: serve, image: "{p1}", args: [sleep, "600000"] }"#)
        .build();
    let server = node.start(&server).await;
    let message = pulled(&server, "serve").await;
    assert!(
        message.starts_with("Successfully compiled") && !message.contains("baseline"),
        "{message}"
    );

    // In one pod: the init container on baseline code, the sidecar and the regular container
    // after it on the optimized code (the same module, already loaded), which they wait for:
    // the optimizing compile writes its artefact to the compile cache before it hands over the
    // image, so a node with a cache of its own has the artefact there once `main` runs.
    let cache = tempfile::tempdir().unwrap();
    let node = TestNode::with(|o| o.cache_dir(Some(cache.path().join("cache"))));
    let pod = PodYaml::new("both")
        .init(r#"{ name: init, image: "{p1}", args: [print, ready] }"#)
        .init(r#"{ name: side, image: "{p1}", args: [sleep, "600000"], restartPolicy: Always }"#)
        .container(r#"{ name: main, image: "{p1}", args: [sleep, "600000"] }"#)
        .build();
    let pod = node.start(&pod).await;
    let init = pulled(&pod, "init").await;
    assert_eq!(init.contains("baseline code"), baseline, "{init}");
    for container in ["side", "main"] {
        let message = pulled(&pod, container).await;
        assert!(message.contains("already loaded"), "{container}: {message}");
    }
    let start = std::time::Instant::now();
    while !pod
        .status()
        .container_statuses
        .iter()
        .flatten()
        .any(|c| c.name == "main" && c.state.as_ref().and_then(|s| s.running.as_ref()).is_some())
    {
        assert!(start.elapsed() < RUNNING_LIMIT, "main never ran");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let optimized = std::fs::read_dir(cache.path().join("cache"))
        .unwrap()
        .flatten()
        .any(|f| f.path().extension().is_some_and(|e| e == "cwasm"));
    assert!(optimized, "main ran before the optimized code was compiled");
    for pod in [&server, &pod] {
        pod.delete(None);
    }
}
