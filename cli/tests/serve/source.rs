//! `wasmpod serve --source`: a device fed its pods from a registry, as a fleet runs it. A real
//! `docker-registry` on loopback (demanding credentials, which the agent reads from the same
//! docker config file as its image pulls), artifacts pushed in the format `flux push artifact`
//! makes, signed as `cosign sign --key` signs them, and the agent driven and inspected through
//! `kubectl`.

use std::time::Duration;

use serde_json::Value;
use wasmpod_tests::cosign::Signer;
use wasmpod_tests::registry::Registry;

use super::support::{Agent, LIMIT, status_of};

/// A pod that prints its `GREETING` (from the ConfigMap `greeting`) and `text`, then sleeps;
/// told to stop, it takes 1.5 s to (its grace period is 30 s).
fn pod(name: &str, text: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  \
         - name: main\n    image: term.wasm\n    \
         args: [env, GREETING, print, {text}, on-term, \"0\", \"1500\", sleep, \"600000\"]\n    \
         env:\n    - name: GREETING\n      valueFrom: {{configMapKeyRef: {{name: greeting, key: text}}}}\n"
    )
}

fn config_map(text: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: greeting\ndata:\n  text: {text}\n")
}

/// Pushes a revision of `files` to `fleet:stable`, signed with `key`.
fn publish(
    runtime: &tokio::runtime::Runtime,
    registry: &Registry,
    files: &[(&str, &str)],
    revision: &str,
    key: &Signer,
) {
    runtime.block_on(async {
        let digest = registry.push_flux("fleet:stable", files, revision).await;
        registry.sign(key, "fleet", &digest).await;
    });
}

/// The node's `SourceApplied` condition: status, reason and message.
fn source_condition(agent: &Agent) -> (String, String, String) {
    let node: Value =
        serde_json::from_str(&agent.ok(&["get", "node", "edge-1", "-o", "json"])).unwrap();
    let c = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "SourceApplied")
        .cloned()
        .unwrap_or_default();
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
    (text("status"), text("reason"), text("message"))
}

/// Waits until the `SourceApplied` condition has `reason` and its message contains `text`.
fn until_condition(agent: &Agent, reason: &str, text: &str) -> String {
    let start = std::time::Instant::now();
    loop {
        let (_, r, message) = source_condition(agent);
        if r == reason && message.contains(text) {
            return message;
        }
        assert!(
            start.elapsed() < LIMIT,
            "no {reason} condition with {text:?}; last: {r}: {message}\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn uid(agent: &Agent, name: &str) -> String {
    agent.ok(&["get", "pod", name, "-o", "jsonpath={.metadata.uid}"])
}

/// The whole path of a device under a fleet source: revision 1 (two pods and a ConfigMap)
/// applied; revision 2 (one pod changed, one removed) applied, the removed pod deleted
/// gracefully and a pod made through kubectl left alone; the registry stopped and the agent
/// killed (`kill -9`) and started again: revision 2's pods run again without the registry; a
/// revision signed with another key, and one with an invalid pod, refused whole (the node says
/// why, as a condition and an event) while revision 2 runs on.
#[test]
fn a_device_follows_its_fleet_source() {
    wasmpod_tests::warm_shared_cache();
    let mut registry = Registry::start(true);
    let (signer, stranger) = (Signer::new(), Signer::new());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::copy(wasmpod_tests::guests::AGNHOST_P1, dir.join("agnhost.wasm")).unwrap();
    std::fs::copy(
        wasmpod_tests::guests::AGNHOST_TERM_P1,
        dir.join("term.wasm"),
    )
    .unwrap();
    std::fs::write(dir.join("cosign.pub"), signer.public_pem()).unwrap();
    std::fs::write(
        dir.join("docker.json"),
        format!(
            r#"{{"auths": {{"{}": {{"auth": "cHVsbGVyOnMzY3JldA=="}}}}}}"#,
            registry.host
        ),
    )
    .unwrap();
    let (web1, worker) = (pod("web", "v1"), pod("worker", "working"));
    let config = config_map("hello");
    publish(
        &runtime,
        &registry,
        &[
            ("apps/config.yaml", &config),
            ("apps/web.yaml", &web1),
            ("apps/worker.yaml", &worker),
        ],
        "main@sha1:1111",
        &signer,
    );
    let source = format!("oci://{}/fleet:stable", registry.host);
    let flags = [
        "--source",
        &source,
        "--source-interval",
        "300ms",
        "--verify-key",
        &dir.join("cosign.pub").display().to_string(),
        "--insecure-registry",
        &registry.host,
        "--registry-config",
        &dir.join("docker.json").display().to_string(),
    ]
    .map(str::to_owned);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let agent = Agent::start_in(dir, &flags);

    // Revision 1.
    agent.until(&["get", "pods"], LIMIT, |t| {
        t.contains("web")
            && t.contains("worker")
            && status_of(t, "web") == "Running"
            && status_of(t, "worker") == "Running"
    });
    agent.until(&["logs", "web"], LIMIT, |t| t == "GREETING=hello\nv1\n");
    until_condition(&agent, "RevisionApplied", "main@sha1:1111");
    let labels = agent.ok(&[
        "get",
        "configmap",
        "greeting",
        "-o",
        "jsonpath={.metadata.labels}",
    ]);
    assert!(
        labels.contains(r#""app.kubernetes.io/managed-by":"wasmpod-source""#),
        "{labels}"
    );
    agent.ok(&[
        "run",
        "mine",
        "--image=agnhost.wasm",
        "--",
        "sleep",
        "600000",
    ]);
    let web_uid = uid(&agent, "web");

    // Revision 2: web changed, worker gone.
    let web2 = pod("web", "v2");
    publish(
        &runtime,
        &registry,
        &[("apps/config.yaml", &config), ("apps/web.yaml", &web2)],
        "main@sha1:2222",
        &signer,
    );
    // The worker is deleted gracefully: it is seen terminating, with its own grace period,
    // before it is gone.
    agent.until(
        &[
            "get",
            "pod",
            "worker",
            "-o",
            "jsonpath={.metadata.deletionGracePeriodSeconds}",
        ],
        LIMIT,
        |t| t == "30",
    );
    agent.until(&["get", "pods"], LIMIT, |t| !t.contains("worker"));
    agent.until(&["logs", "web"], LIMIT, |t| t == "GREETING=hello\nv2\n");
    assert_ne!(uid(&agent, "web"), web_uid, "the changed pod is a new pod");
    until_condition(&agent, "RevisionApplied", "main@sha1:2222");
    let pods = agent.ok(&["get", "pods"]);
    assert_eq!(status_of(&pods, "mine"), "Running", "{pods}");
    let events = agent.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.kind=Node",
    ]);
    assert!(
        events.contains("RevisionAccepted") && events.contains("main@sha1:2222"),
        "{events}"
    );

    // Offline: the registry stops, the agent is killed and started again.
    registry.stop();
    agent.kill();
    let agent = Agent::start_in(dir, &flags);
    agent.until(&["get", "pods"], LIMIT, |t| {
        t.contains("web") && status_of(t, "web") == "Running" && !t.contains("worker")
    });
    agent.until(&["logs", "web"], LIMIT, |t| t.contains("v2"));
    let message = until_condition(&agent, "SourceUnreachable", "cannot reach the source");
    assert!(message.contains("main@sha1:2222"), "{message}");

    // Back online: a revision signed with another key is refused whole.
    registry.restart();
    let web3 = pod("web", "v3");
    publish(
        &runtime,
        &registry,
        &[("apps/config.yaml", &config), ("apps/web.yaml", &web3)],
        "main@sha1:3333",
        &stranger,
    );
    let message = until_condition(&agent, "RevisionRefused", "not signed with the key");
    assert!(
        message.contains("the node runs main@sha1:2222"),
        "{message}"
    );

    // One invalid pod among valid objects: refused whole, naming the file and the field.
    let bad =
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\nspec:\n  containers:\n  - name: main\n";
    let extra = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n";
    publish(
        &runtime,
        &registry,
        &[
            ("apps/config.yaml", &config),
            ("apps/web.yaml", &web3),
            ("apps/bad.yaml", bad),
            ("apps/extra.yaml", extra),
        ],
        "main@sha1:4444",
        &signer,
    );
    let message = until_condition(&agent, "RevisionRefused", "apps/bad.yaml");
    assert!(message.contains("spec.containers[0].image"), "{message}");
    let events = agent.ok(&[
        "get",
        "events",
        "--field-selector",
        "reason=RevisionRefused",
    ]);
    assert!(events.contains("apps/bad.yaml"), "{events}");
    let configmaps = agent.ok(&["get", "configmaps"]);
    assert!(!configmaps.contains("extra"), "{configmaps}");
    assert_eq!(agent.ok(&["logs", "web"]).lines().last(), Some("v2"));
    let pods = agent.ok(&["get", "pods"]);
    assert!(!pods.contains("bad"), "{pods}");

    // The tag back on revision 2 (the same digest): the node says it runs it, as it does.
    publish(
        &runtime,
        &registry,
        &[("apps/config.yaml", &config), ("apps/web.yaml", &web2)],
        "main@sha1:2222",
        &signer,
    );
    until_condition(&agent, "RevisionApplied", "main@sha1:2222");
    assert_eq!(agent.ok(&["logs", "web"]).lines().last(), Some("v2"));
}

/// A `--source` that names no artifact is refused at start, naming the option.
#[test]
fn a_bad_source_is_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    for source in [
        "oci://",
        "oci://Registry/UPPER CASE:tag",
        "https://registry/fleet:1",
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_wasmpod"))
            .args(["serve", "--listen", "127.0.0.1:0", "--source", source])
            .arg("--state-dir")
            .arg(tmp.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{source}: {stderr}");
        assert!(
            stderr.contains("--source") && stderr.contains("oci://REGISTRY/REPOSITORY:TAG"),
            "{source}: {stderr}"
        );
    }
}
