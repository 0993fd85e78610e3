//! A corpus of real manifests (`tests/manifests/`): what `kubectl run` generates, a pod exported
//! from a cluster, the Kubernetes documentation's own examples from the reference documents,
//! and the runwasi and SpinKube pods, their images pointed at the test guests. Each validates
//! and runs; each manifest of `tests/manifests/refused/` is refused at the field its first lines
//! name, with a reason a user can act on.

use std::path::Path;
use std::time::Duration;

use wasmpod::k8s_openapi::api::core::v1::PodStatus;
use wasmpod_tests::{TestNode, read, read_classes, wait_for};

const LIMIT: Duration = Duration::from_secs(30);

/// The `.yaml` files of a corpus directory, sorted: (file name, text).
fn corpus(dir: &str) -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "yaml"))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                read(&e.path()),
            )
        })
        .collect();
    files.sort();
    assert!(files.len() >= 7, "corpus {} is short", dir.display());
    files
}

/// Every container has run (it is running or has terminated, or it ended and waits to be
/// restarted: a container that prints and exits under `Always` is seen running only if the
/// status is read within the microseconds it runs), the init containers first.
fn all_started(s: &PodStatus) -> bool {
    s.phase.as_deref() == Some("Succeeded")
        || s.container_statuses.as_ref().is_some_and(|list| {
            !list.is_empty()
                && list.iter().all(|c| {
                    c.state
                        .as_ref()
                        .is_some_and(|st| st.running.is_some() || st.terminated.is_some())
                        || c.last_state
                            .as_ref()
                            .is_some_and(|st| st.terminated.is_some())
                })
        })
}

#[tokio::test]
async fn real_manifests_validate_and_run() {
    let files = corpus("manifests");
    // The node an exported pod names, with the topology keys of the documentation's example,
    // and the documentation's PriorityClass (a cluster object, given to the node).
    let classes = files
        .iter()
        .find(|(name, _)| name == "docs-priority-class.yaml")
        .map(|(_, text)| read_classes(text).unwrap())
        .unwrap();
    let node = TestNode::with(|o| {
        o.node_name("kind-worker")
            .labels([("zone", "a"), ("node", "kind-worker")])
            .priority_classes(classes)
    });
    for (name, text) in &files {
        let pod = node.start(text).await;
        let status = wait_for(&pod, LIMIT, all_started).await;
        assert_ne!(
            status.phase.as_deref(),
            Some("Failed"),
            "{name}: {status:#?}"
        );
        // A pod with a readiness probe (served by the guest) becomes Ready.
        if text.contains("readinessProbe") {
            wait_for(&pod, LIMIT, |s| {
                s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
            .await;
        }
        pod.delete(Some(Duration::ZERO));
        tokio::time::timeout(LIMIT, pod.deleted()).await.unwrap();
    }
}

#[test]
fn refused_manifests_name_the_field_and_why() {
    let node = TestNode::new();
    for (name, text) in corpus("manifests/refused") {
        let field = text
            .lines()
            .find_map(|l| l.strip_prefix("# refused: "))
            .unwrap_or_else(|| panic!("{name} names no refused field"));
        let err = node.invalid(&text);
        let line = err
            .lines()
            .find(|l| l.contains(&format!(" {field}: ")))
            .unwrap_or_else(|| panic!("{name}: no error at {field}:\n{err}"));
        let why = line
            .split_once("not supported by wasmpod: ")
            .map(|(_, why)| why)
            .unwrap_or_else(|| panic!("{name}: {line}"));
        assert!(why.len() > 20, "{name}: a reason, not a verdict: {line}");
    }
}
