//! `wasmpod serve` driven by the real `kubectl`, as a user drives it: each test starts an agent
//! on loopback with its own state dir, and asserts on what kubectl prints and how it exits.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmpod_tests::{PodYaml, fill};

mod support;

use support::{Agent, LIMIT, row, status_of};

#[test]
fn kubectl_drives_a_pod_through_its_life() {
    let (_tmp, agent) = Agent::start();
    let version = agent.ok(&["version"]);
    assert!(
        version.contains("Server Version: v1.33.0-wasmpod"),
        "{version}"
    );

    let pod = PodYaml::new("web")
        .metadata("labels: {app: web}")
        .spec("terminationGracePeriodSeconds: 30")
        .init(r#"{ name: setup, image: "{p1}", args: [print, setup-done] }"#)
        .container(r#"{ name: main, image: "{term}", args: [print, started, print, second, on-term, "0", "300", sleep, "60000"] }"#)
        .build();
    assert_eq!(agent.create(&pod).trim(), "pod/web created");
    agent.ok(&["wait", "--for=condition=Ready", "pod/web", "--timeout=30s"]);

    let table = agent.ok(&["get", "pods"]);
    assert!(table.starts_with("NAME"), "{table}");
    assert_eq!(row(&table, "web")[1..4], ["1/1", "Running", "0"], "{table}");
    let wide = agent.ok(&["get", "pods", "-o", "wide"]);
    assert!(
        wide.contains("NOMINATED NODE") && wide.contains("edge-1"),
        "{wide}"
    );
    assert_eq!(
        agent
            .ok(&["get", "pods", "-l", "app=web", "-o", "name"])
            .trim(),
        "pod/web"
    );
    assert_eq!(
        agent
            .ok(&["get", "pods", "-l", "app=other", "-o", "name"])
            .trim(),
        ""
    );
    assert_eq!(
        agent
            .ok(&[
                "get",
                "pods",
                "--field-selector",
                "status.phase=Running",
                "-o",
                "name"
            ])
            .trim(),
        "pod/web"
    );
    let json = agent.pod("web");
    let uid = json["metadata"]["uid"].as_str().unwrap().to_owned();
    assert_eq!(json["status"]["phase"], "Running");
    assert_eq!(json["spec"]["nodeName"], "edge-1");
    assert!(
        agent
            .ok(&["get", "pod", "web", "-o", "yaml"])
            .contains("uid: ")
    );
    let all = agent.ok(&["get", "pods", "-A"]);
    assert!(
        all.contains("NAMESPACE") && all.contains("default"),
        "{all}"
    );

    // Logs, each container, the tail, with timestamps.
    assert_eq!(agent.ok(&["logs", "web", "-c", "setup"]), "setup-done\n");
    assert_eq!(
        agent.ok(&["logs", "web", "-c", "main"]),
        "started\nsecond\n"
    );
    assert_eq!(
        agent.ok(&["logs", "web", "-c", "main", "--tail=1"]),
        "second\n"
    );
    let stamped = agent.ok(&["logs", "web", "-c", "main", "--timestamps"]);
    let first = stamped.lines().next().unwrap();
    let (time, line) = first.split_once(' ').unwrap();
    assert_eq!(line, "started");
    assert!(
        time.starts_with("20") && time.contains('T') && time.ends_with('Z'),
        "{first}"
    );
    let previous = agent.fails(&["logs", "web", "-c", "main", "--previous"]);
    assert!(
        previous.contains(r#"previous terminated container "main" in pod "web" not found"#),
        "{previous}"
    );

    // exec: output and exit codes, as kubectl reports them.
    assert_eq!(
        agent.ok(&[
            "exec",
            "web",
            "-c",
            "main",
            "--",
            "agnhost",
            "print",
            "from-exec"
        ]),
        "from-exec\n"
    );
    let out = agent.kubectl(&["exec", "web", "-c", "main", "--", "agnhost", "exit", "3"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // describe and events.
    let described = agent.ok(&["describe", "pod", "web"]);
    for part in [
        "Name:         web",
        "Status:       Running",
        "Events:",
        "Started",
    ] {
        assert!(described.contains(part), "{part} missing in:\n{described}");
    }
    let events = agent.ok(&["get", "events"]);
    assert!(
        events.contains("pod/web") && events.contains("Started"),
        "{events}"
    );

    // A graceful delete: Terminating until the guest has ended, then gone.
    let start = Instant::now();
    agent.ok(&["delete", "pod", "web", "--grace-period=20", "--wait=false"]);
    let table = agent.ok(&["get", "pods"]);
    assert_eq!(status_of(&table, "web"), "Terminating", "{table}");
    agent.ok(&["wait", "--for=delete", "pod/web", "--timeout=30s"]);
    // The guest took 300 ms after TERM, far less than the grace period.
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let gone = agent.fails(&["get", "pod", "web"]);
    assert!(gone.contains(r#"pods "web" not found"#), "{gone}");
    assert!(!agent.ok(&["get", "events"]).contains("pod/web"));
    // Its files went with it.
    let logs = agent.dir.join("state").join("logs");
    let left = std::fs::read_dir(&logs).unwrap().filter(|e| {
        e.as_ref()
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(&uid)
    });
    assert_eq!(left.count(), 0, "the deleted pod's logs are removed");
}

#[test]
fn status_strings_watch_and_forced_delete() {
    let (_tmp, agent) = Agent::start();
    let watch = Command::new("timeout")
        .args(["20", "kubectl", "get", "pods", "-w"])
        .env("KUBECONFIG", &agent.kubeconfig)
        .env("HOME", &agent.dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    agent.create(
        &PodYaml::new("initializing")
            .init(r#"{ name: slow, image: "{p1}", args: [sleep, "60000"] }"#)
            .container(r#"{ name: main, image: "{p1}", args: [print, hi] }"#)
            .build(),
    );
    agent.create(
        &PodYaml::new("crashing")
            .container(r#"{ name: main, image: "{p1}", args: [exit, "1"] }"#)
            .build(),
    );
    agent.create(
        &PodYaml::new("done")
            .never()
            .container(r#"{ name: main, image: "{p1}", args: [print, bye] }"#)
            .build(),
    );
    // `logs -f` follows the container until it ends, then kubectl exits.
    agent.create(
        &PodYaml::new("talker")
            .never()
            .container(
                r#"{ name: main, image: "{p1}", args: [print, one, sleep, "700", print, two] }"#,
            )
            .build(),
    );
    agent.until(&["get", "pods"], LIMIT, |t| {
        t.lines()
            .any(|l| l.starts_with("talker") && l.contains("Running"))
    });
    assert_eq!(agent.ok(&["logs", "-f", "talker"]), "one\ntwo\n");
    let table = agent.until(&["get", "pods"], LIMIT, |t| {
        t.contains("Init:0/1") && t.contains("CrashLoopBackOff") && t.contains("Completed")
    });
    assert_eq!(
        row(&table, "initializing")[1..3],
        ["0/1", "Init:0/1"],
        "{table}"
    );
    assert_eq!(status_of(&table, "done"), "Completed");
    let crashing = row(&table, "crashing");
    assert_eq!(crashing[2], "CrashLoopBackOff", "{table}");
    assert!(crashing[3].contains("ago"), "restarts with when: {table}");

    // A forced delete removes the object at once, whatever the grace period.
    let forced = agent.kubectl(&[
        "delete",
        "pod",
        "initializing",
        "--force",
        "--grace-period=0",
    ]);
    assert!(forced.status.success());
    assert!(String::from_utf8_lossy(&forced.stdout).contains("force deleted"));
    agent.fails(&["get", "pod", "initializing"]);

    agent.ok(&["delete", "pod", "done", "crashing"]);
    let out = watch.wait_with_output().unwrap();
    let lines = String::from_utf8_lossy(&out.stdout);
    assert!(lines.starts_with("NAME"), "{lines}");
    for (pod, status) in [
        ("initializing", "Init:0/1"),
        ("done", "Completed"),
        ("crashing", "CrashLoopBackOff"),
    ] {
        assert!(
            lines
                .lines()
                .any(|l| l.starts_with(pod) && l.contains(status)),
            "{pod} {status} not watched in:\n{lines}"
        );
    }
}

#[test]
fn bad_requests_get_the_api_servers_statuses() {
    let (_tmp, agent) = Agent::start();
    agent.create(
        &PodYaml::new("steady")
            .container(r#"{ name: main, image: "{p1}", args: [sleep, "60000"] }"#)
            .build(),
    );
    agent.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/steady",
        "--timeout=30s",
    ]);

    let denied = agent.fails(&["--token", "not-the-token", "get", "pods"]);
    assert!(
        denied.contains("Unauthorized") || denied.contains("logged in"),
        "{denied}"
    );

    let invalid = PodYaml::new("bad")
        .container(r#"{ name: main, image: "{p1}", securityContext: { privileged: true } }"#)
        .build();
    let file = agent.file("bad.yaml", &invalid);
    let refused = agent.fails(&["create", "-f", &file]);
    assert!(refused.contains(r#"Pod "bad" is invalid"#), "{refused}");
    assert!(
        refused.contains("spec.containers[0].securityContext.privileged"),
        "{refused}"
    );

    let missing = PodYaml::new("nomodule")
        .container(r#"{ name: main, image: nowhere.wasm }"#)
        .build();
    let file = agent.file("missing.yaml", &missing);
    let refused = agent.fails(&["create", "-f", &file]);
    assert!(refused.contains("spec.containers[0].image"), "{refused}");

    let steady = PodYaml::new("steady")
        .container(r#"{ name: main, image: "{p1}" }"#)
        .build();
    let file = agent.file("again.yaml", &steady);
    let exists = agent.fails(&["create", "-f", &file]);
    assert!(
        exists.contains(r#"pods "steady" already exists"#),
        "{exists}"
    );

    let nothing = agent.fails(&["get", "pod", "nope"]);
    assert!(nothing.contains(r#"pods "nope" not found"#), "{nothing}");

    let malformed = agent.file(
        "malformed.json",
        "{\"apiVersion\": \"v1\", \"kind\": \"Pod\", ",
    );
    let bad = agent.fails(&[
        "create",
        "--raw",
        "/api/v1/namespaces/default/pods",
        "-f",
        &malformed,
    ]);
    assert!(
        bad.contains("BadRequest") || bad.contains("not valid JSON"),
        "{bad}"
    );

    // A stale resourceVersion is a conflict.
    let stale = agent.ok(&["get", "pod", "steady", "-o", "json"]);
    agent.ok(&["label", "pod", "steady", "tier=web"]);
    let file = agent.dir.join("stale.json");
    std::fs::write(&file, stale).unwrap();
    let conflict = agent.fails(&["replace", "-f", file.to_str().unwrap()]);
    assert!(
        conflict.contains("the object has been modified"),
        "{conflict}"
    );

    let host = PodYaml::new("host")
        .spec(&format!(
            "volumes: [ {{ name: h, hostPath: {{ path: {} }} }} ]",
            agent.dir.display()
        ))
        .container(r#"{ name: main, image: "{p1}" }"#)
        .build();
    let file = agent.file("host.yaml", &host);
    let forbidden = agent.fails(&["create", "-f", &file]);
    assert!(
        forbidden.contains("hostPath volumes are not allowed on this node"),
        "{forbidden}"
    );

    let unknown = PodYaml::new("classy")
        .spec("priorityClassName: nope")
        .container(r#"{ name: main, image: "{p1}" }"#)
        .build();
    let file = agent.file("classy.yaml", &unknown);
    let forbidden = agent.fails(&["create", "-f", &file]);
    assert!(
        forbidden.contains("no PriorityClass with name nope was found"),
        "{forbidden}"
    );

    // None of it disturbed the running pod.
    let pod = agent.pod("steady");
    assert_eq!(pod["status"]["phase"], "Running");
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(pod["metadata"]["labels"]["tier"], "web");
}

#[test]
fn config_maps_secrets_and_priority_classes() {
    let (_tmp, agent) = Agent::start();
    agent.ok(&[
        "create",
        "configmap",
        "app",
        "--from-literal=greeting=hello from a ConfigMap",
    ]);
    agent.ok(&[
        "create",
        "secret",
        "generic",
        "creds",
        "--from-literal=token=s3cret",
    ]);
    let cms = agent.ok(&["get", "configmaps"]);
    assert_eq!(row(&cms, "app")[1], "1", "{cms}");
    let secrets = agent.ok(&["get", "secrets"]);
    assert_eq!(row(&secrets, "creds")[1..3], ["Opaque", "1"], "{secrets}");
    agent.create(
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n",
    );
    let classes = agent.ok(&["get", "priorityclasses"]);
    assert_eq!(row(&classes, "high")[1..3], ["1000", "false"], "{classes}");

    let pod = PodYaml::new("configured")
        .never()
        .spec("priorityClassName: high")
        .spec("volumes: [{ name: cfg, configMap: { name: app } }]")
        .container(
            r#"{ name: main, image: "{p1}", args: [cat, /etc/app/greeting, env, TOKEN], volumeMounts: [{ name: cfg, mountPath: /etc/app }], env: [{ name: TOKEN, valueFrom: { secretKeyRef: { name: creds, key: token } } }] }"#,
        )
        .build();
    agent.create(&pod);
    agent.until(&["get", "pods"], LIMIT, |t| t.contains("Completed"));
    assert_eq!(
        agent.ok(&["logs", "configured"]),
        "hello from a ConfigMap\nTOKEN=s3cret\n"
    );
    assert_eq!(agent.pod("configured")["spec"]["priority"], 1000);

    let deleted = agent.ok(&["delete", "configmap", "app"]);
    assert!(deleted.contains(r#"configmap "app" deleted"#), "{deleted}");
    agent.fails(&["get", "configmap", "app"]);
}

/// RuntimeClasses: served under node.k8s.io, listed with their handler, and used at admission
/// as the API server's RuntimeClass admission uses them: an unknown class is refused, a built-in
/// name runs, a class's scheduling joins the pod's (a conflicting nodeSelector is refused), and
/// a handler the node does not run is refused.
#[test]
fn runtime_classes() {
    let (_tmp, agent) = Agent::start();
    let pod = |name: &str, class: &str, more: &str| {
        let mut pod = PodYaml::new(name)
            .never()
            .spec(&format!("runtimeClassName: {class}"));
        if !more.is_empty() {
            pod = pod.spec(more);
        }
        pod.container(r#"{ name: main, image: "{p1}", args: [print, ran] }"#)
            .build()
    };
    let file = agent.file("unknown.yaml", &pod("unknown", "edge", ""));
    let err = agent.fails(&["create", "-f", &file]);
    assert!(
        err.contains(r#"pods "unknown" is forbidden: pod rejected: RuntimeClass "edge" not found"#),
        "{err}"
    );
    agent.create(&pod("spin", "wasmtime-spin-v2", ""));
    agent.create(
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: edge}\nhandler: wasmtime\nscheduling:\n  nodeSelector: {kubernetes.io/os: linux}\n  tolerations: [{key: wasm, operator: Exists}]\n---\napiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: gvisor}\nhandler: runsc\n",
    );
    let classes = agent.ok(&["get", "runtimeclasses"]);
    assert_eq!(row(&classes, "edge")[1], "wasmtime", "{classes}");
    agent.create(&pod("edge", "edge", ""));
    agent.until(&["get", "pods"], LIMIT, |t| {
        status_of(t, "edge") == "Completed" && status_of(t, "spin") == "Completed"
    });
    let edge = agent.pod("edge");
    assert_eq!(edge["spec"]["nodeSelector"]["kubernetes.io/os"], "linux");
    assert_eq!(edge["spec"]["tolerations"][0]["key"], "wasm");
    let file = agent.file(
        "conflict.yaml",
        &pod(
            "conflict",
            "edge",
            "nodeSelector: {kubernetes.io/os: windows}",
        ),
    );
    let err = agent.fails(&["create", "-f", &file]);
    assert!(
        err.contains("conflict: runtimeClass.scheduling.nodeSelector[kubernetes.io/os] = linux; pod.spec.nodeSelector[kubernetes.io/os] = windows"),
        "{err}"
    );
    let file = agent.file("sandboxed.yaml", &pod("sandboxed", "gvisor", ""));
    let err = agent.fails(&["create", "-f", &file]);
    assert!(
        err.contains(r#"no runtime for "runsc" is configured"#),
        "{err}"
    );
    agent.ok(&["delete", "runtimeclass", "edge"]);
    let file = agent.file("again.yaml", &pod("again", "edge", ""));
    agent.fails(&["create", "-f", &file]);
}

/// Manifests of the corpus (`tests/manifests`) created with kubectl run as they do on a node of
/// their own: kubectl's generated pod, the documentation's init containers, runwasi's and
/// SpinKube's pods.
#[test]
fn corpus_manifests_through_kubectl() {
    let (_tmp, agent) = Agent::start();
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/manifests");
    for (file, name) in [
        ("kubectl-run.yaml", "demo"),
        ("docs-init-containers.yaml", "myapp-pod"),
        ("runwasi-wasi-demo.yaml", "wasi-demo"),
        ("spinkube-app.yaml", "hello-spin-5c8f9d-k2j4q"),
    ] {
        let text = std::fs::read_to_string(corpus.join(file)).unwrap();
        let path = agent.file(file, &text);
        agent.ok(&["create", "-f", &path]);
        agent.until(&["get", "pods"], LIMIT, |t| {
            matches!(status_of(t, name).as_str(), "Running" | "Completed")
        });
    }
    let ready = agent.until(
        &[
            "get",
            "pod",
            "hello-spin-5c8f9d-k2j4q",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ],
        LIMIT,
        |t| t == "True",
    );
    assert_eq!(ready, "True");
}

/// Registry images through kubectl: `kubectl run` of an image in a private registry is refused
/// by it (`ImagePullBackOff`); with a `kubectl create secret docker-registry` pull secret the
/// pod runs, its status naming the image's digest, its events the pull.
#[test]
fn registry_images_through_kubectl() {
    let registry = wasmpod_tests::registry::Registry::start(true);
    let wasm = std::fs::read(wasmpod_tests::guests::AGNHOST_P1).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let digest = runtime.block_on(registry.push_wasm("private:1.0", &wasm));
    let tmp = tempfile::tempdir().unwrap();
    wasmpod_tests::warm_shared_cache();
    let agent = Agent::start_in(tmp.path(), &["--insecure-registry", &registry.host]);
    let image = format!("{}/private:1.0", registry.host);
    agent.ok(&[
        "run",
        "anonymous",
        &format!("--image={image}"),
        "--restart=Never",
    ]);
    agent.until(&["get", "pods"], LIMIT, |t| {
        status_of(t, "anonymous") == "ImagePullBackOff"
    });
    agent.ok(&[
        "create",
        "secret",
        "docker-registry",
        "regcred",
        &format!("--docker-server={}", registry.host),
        "--docker-username=puller",
        "--docker-password=s3cret",
    ]);
    let pod = PodYaml::new("private")
        .never()
        .spec("imagePullSecrets: [ { name: regcred } ]")
        .container(&format!(
            "{{ name: main, image: \"{image}\", args: [print, pulled] }}"
        ))
        .build();
    agent.create(&pod);
    agent.until(&["get", "pods"], LIMIT, |t| {
        status_of(t, "private") == "Completed"
    });
    assert_eq!(agent.ok(&["logs", "private"]), "pulled\n");
    let id = agent.ok(&[
        "get",
        "pod",
        "private",
        "-o",
        "jsonpath={.status.containerStatuses[0].imageID}",
    ]);
    assert_eq!(id, format!("{}/private@{digest}", registry.host));
    let events = agent.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=private",
    ]);
    assert!(
        events.contains(&format!("Successfully pulled image \"{image}\"")),
        "{events}"
    );

    // `kubectl set image` to another registry image: the container restarts with it, pulled;
    // an ordinary image's entry point comes before the container's args.
    let v2 = runtime.block_on(registry.push_image(
        "private:2.0",
        &[("app.wasm", &wasm)],
        &["/app.wasm", "print", "v2"],
        &[],
    ));
    let running = PodYaml::new("app")
        .spec("imagePullSecrets: [ { name: regcred } ]")
        .container(&format!(
            "{{ name: main, image: \"{image}\", args: [print, started, sleep, \"600000\"] }}"
        ))
        .build();
    agent.create(&running);
    agent.until(&["get", "pods"], LIMIT, |t| {
        status_of(t, "app") == "Running"
    });
    let v2_image = format!("{}/private:2.0", registry.host);
    agent.ok(&["set", "image", "pod/app", &format!("main={v2_image}")]);
    let id = agent.until(
        &[
            "get",
            "pod",
            "app",
            "-o",
            "jsonpath={.status.containerStatuses[0].imageID} {.status.containerStatuses[0].restartCount}",
        ],
        LIMIT,
        |t| t.ends_with(" 1"),
    );
    assert_eq!(id, format!("{}/private@{v2} 1", registry.host));
    agent.until(&["logs", "app"], LIMIT, |t| t == "v2\nstarted\n");
}

#[test]
fn apply_client_side_and_server_side() {
    let (_tmp, agent) = Agent::start();
    let pod = PodYaml::new("applied")
        .container(r#"{ name: main, image: "{p1}", args: [sleep, "60000"] }"#)
        .build();
    let file = agent.file("applied.yaml", &pod);
    assert_eq!(
        agent.ok(&["apply", "-f", &file]).trim(),
        "pod/applied created"
    );
    assert_eq!(
        agent.ok(&["apply", "-f", &file]).trim(),
        "pod/applied unchanged"
    );
    let labelled = pod.replace("name: applied", "name: applied\n  labels: {tier: web}");
    let file = agent.file("applied.yaml", &labelled);
    assert_eq!(
        agent.ok(&["apply", "-f", &file]).trim(),
        "pod/applied configured"
    );
    assert_eq!(agent.pod("applied")["metadata"]["labels"]["tier"], "web");
    let applied = agent.ok(&["apply", "--server-side", "-f", &file]);
    assert_eq!(applied.trim(), "pod/applied serverside-applied");

    // Server-side apply creates what is not there.
    let other = PodYaml::new("ssa")
        .container(r#"{ name: main, image: "{p1}", args: [sleep, "60000"] }"#)
        .build();
    let file = agent.file("ssa.yaml", &other);
    assert_eq!(
        agent.ok(&["apply", "--server-side", "-f", &file]).trim(),
        "pod/ssa serverside-applied"
    );
    agent.ok(&["wait", "--for=condition=Ready", "pod/ssa", "--timeout=30s"]);

    // A new image restarts that container with it, whatever the restart policy.
    let reimaged = labelled.replace("{p1}", "{p2}");
    let file = agent.file("reimaged.yaml", &reimaged);
    assert_eq!(
        agent.ok(&["apply", "-f", &file]).trim(),
        "pod/applied configured"
    );
    let pod = agent.until(&["get", "pod", "applied", "-o", "json"], LIMIT, |t| {
        let pod: Value = serde_json::from_str(t).unwrap();
        let c = &pod["status"]["containerStatuses"][0];
        c["restartCount"] == 1 && c["state"]["running"].is_object()
    });
    let pod: Value = serde_json::from_str(&pod).unwrap();
    let image = pod["status"]["containerStatuses"][0]["image"]
        .as_str()
        .unwrap();
    assert_eq!(image, wasmpod_tests::guests::AGNHOST_P2);
    let described = agent.ok(&["describe", "pod", "applied"]);
    assert!(
        described.contains("definition changed, will be restarted"),
        "{described}"
    );

    // Other spec changes are refused with the API server's reason; a module that cannot be
    // loaded with its field.
    let file = agent.file(
        "changed.yaml",
        &reimaged.replace("sleep, \"60000\"", "sleep, \"1000\""),
    );
    let refused = agent.fails(&["apply", "-f", &file]);
    assert!(
        refused.contains("pod updates may not change fields"),
        "{refused}"
    );
    let file = agent.file("broken.yaml", &labelled.replace("{p1}", "nowhere.wasm"));
    let refused = agent.fails(&["apply", "-f", &file]);
    assert!(refused.contains("spec.containers[0].image"), "{refused}");
}

#[test]
fn the_node_is_described() {
    let (_tmp, agent) = Agent::start();
    let nodes = agent.ok(&["get", "nodes"]);
    assert_eq!(row(&nodes, "edge-1")[1], "Ready", "{nodes}");
    let described = agent.ok(&["describe", "node", "edge-1"]);
    for part in [
        "Allocatable:",
        "wasmpod.dev/containers:",
        "kubernetes.io/hostname=",
        "Container Runtime Version:  wasmpod://",
    ] {
        assert!(described.contains(part), "{part} missing in:\n{described}");
    }
    agent.fails(&["get", "node", "elsewhere"]);
}

#[test]
fn a_killed_agent_comes_back_with_nothing_lost() {
    let (tmp, agent) = Agent::start();
    let sleeper = |name: &str, never: bool| {
        let yaml = PodYaml::new(name).container(&format!(
            r#"{{ name: main, image: "{{term}}", args: [print, "{name} ran", sleep, "60000"] }}"#
        ));
        if never { yaml.never() } else { yaml }.build()
    };
    agent.create(&sleeper("always", false));
    agent.create(&sleeper("never", true));
    agent.create(
        &PodYaml::new("finished")
            .never()
            .container(r#"{ name: main, image: "{p1}", args: [print, done] }"#)
            .build(),
    );
    agent.create(
        &PodYaml::new("leaving")
            .spec("terminationGracePeriodSeconds: 30")
            .container(
                r#"{ name: main, image: "{term}", args: [print, started, on-term, "0", "3000", sleep, "60000"] }"#,
            )
            .build(),
    );
    agent.ok(&["create", "configmap", "kept", "--from-literal=a=b"]);
    for pod in ["always", "never", "leaving"] {
        agent.ok(&[
            "wait",
            "--for=condition=Ready",
            &format!("pod/{pod}"),
            "--timeout=30s",
        ]);
    }
    agent.until(&["get", "pods"], LIMIT, |t| t.contains("Completed"));
    let uid = agent.pod("always")["metadata"]["uid"].clone();
    agent.ok(&["delete", "pod", "leaving", "--wait=false"]);
    // A later delete may only shorten the grace period.
    agent.ok(&[
        "delete",
        "pod",
        "leaving",
        "--grace-period=60",
        "--wait=false",
    ]);
    assert_eq!(
        agent.pod("leaving")["metadata"]["deletionGracePeriodSeconds"],
        30
    );
    agent.ok(&[
        "delete",
        "pod",
        "leaving",
        "--grace-period=20",
        "--wait=false",
    ]);
    assert_eq!(
        agent.pod("leaving")["metadata"]["deletionGracePeriodSeconds"],
        20
    );
    agent.kill();

    let restarted = Instant::now();
    let agent = Agent::start_in(tmp.path(), &[]);
    // The pod being deleted terminates again from the beginning: its guest runs again, gets
    // TERM and its whole grace period (it takes 3 s after TERM), then the pod goes.
    agent.ok(&["wait", "--for=delete", "pod/leaving", "--timeout=30s"]);
    assert!(
        restarted.elapsed() >= Duration::from_secs(3),
        "{:?}",
        restarted.elapsed()
    );
    let table = agent.until(&["get", "pods"], LIMIT, |t| {
        t.lines()
            .any(|l| l.starts_with("always") && l.contains("Running"))
    });
    // The running pod restarted with its uid, counting the lost instance.
    assert_eq!(row(&table, "always")[1..3], ["1/1", "Running"], "{table}");
    assert!(row(&table, "always")[3].starts_with("1 ("), "{table}");
    let always = agent.pod("always");
    assert_eq!(always["metadata"]["uid"], uid);
    let last = &always["status"]["containerStatuses"][0]["lastState"]["terminated"];
    assert_eq!(last["reason"], "ContainerStatusUnknown", "{always}");
    assert_eq!(last["exitCode"], 137);
    assert_eq!(agent.ok(&["logs", "always", "--previous"]), "always ran\n");
    assert_eq!(agent.ok(&["logs", "always"]), "always ran\n");
    // Its events from before the restart are kept, and those of its run after it are stored
    // beside them (not refused as names already taken), until the pod goes.
    let events = [
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=always,reason=Started",
        "-o",
        "name",
    ];
    agent.until(&events, LIMIT, |t| t.lines().count() == 2);
    agent.ok(&["delete", "pod", "always", "--grace-period=0"]);
    agent.until(&events, LIMIT, |t| t.trim().is_empty());
    // A Never pod cannot run again: it failed, and says why.
    let never = agent.pod("never");
    assert_eq!(never["status"]["phase"], "Failed");
    assert_eq!(never["status"]["reason"], "NodeAgentRestarted");
    assert_eq!(status_of(&table, "finished"), "Completed");
    // A pod that ended before the restart keeps its logs, until it is deleted.
    assert_eq!(agent.ok(&["logs", "finished"]), "done\n");
    let finished_uid = agent.pod("finished")["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let logs = tmp.path().join("state").join("logs");
    let has_logs = |uid: &str| {
        std::fs::read_dir(&logs)
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().ends_with(uid))
    };
    assert!(has_logs(&finished_uid));
    agent.ok(&["delete", "pod", "finished"]);
    assert!(!has_logs(&finished_uid), "a deleted pod's logs are removed");
    assert_eq!(
        agent.ok(&["get", "configmap", "kept", "-o", "jsonpath={.data.a}"]),
        "b"
    );
}

/// What a service manager hears on its notify socket (a datagram a message).
struct Notifications(std::os::unix::net::UnixDatagram);

impl Notifications {
    /// The next message, if one comes within `limit`.
    fn next(&self, limit: Duration) -> Option<String> {
        self.0.set_read_timeout(Some(limit)).unwrap();
        let mut buf = [0u8; 4096];
        let n = self.0.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// Waits for a message with the line `line`, returning the messages before it.
    fn until(&self, line: &str, limit: Duration) -> Vec<String> {
        let start = Instant::now();
        let mut before = Vec::new();
        while let Some(left) = limit.checked_sub(start.elapsed()) {
            match self.next(left) {
                Some(m) if m.lines().any(|l| l == line) => return before,
                Some(m) => before.push(m),
                None => break,
            }
        }
        panic!("no {line} within {limit:?}; heard {before:?}");
    }
}

/// A TCP proxy on loopback to `to` that holds each connection for `delay` milliseconds (as it
/// is when the connection comes) before carrying it; returns its `HOST:PORT`.
fn slow_proxy(to: String, delay: std::sync::Arc<std::sync::atomic::AtomicU64>) -> String {
    use std::net::{Shutdown, TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let wait = delay.load(std::sync::atomic::Ordering::Relaxed);
            let to = to.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(wait));
                let Ok(server) = TcpStream::connect(&to) else {
                    return;
                };
                let (mut up_from, mut up_to) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut up_from, &mut up_to);
                    let _ = up_to.shutdown(Shutdown::Write);
                });
                let (mut down_from, mut down_to) = (server, client);
                let _ = std::io::copy(&mut down_from, &mut down_to);
                let _ = down_to.shutdown(Shutdown::Write);
            });
        }
    });
    addr
}

/// Under systemd (`Type=notify`, `deploy/systemd/wasmpod.service`): `READY=1` only once the API
/// answers and the stored pods run again after a `kill -9` (their image slow to come); watchdog pings at half of
/// `WATCHDOG_USEC`, none while the agent is stopped (SIGSTOP) and again once it goes on;
/// `STOPPING=1` at SIGTERM. The unit file passes `systemd-analyze verify`.
#[test]
fn systemd_hears_ready_watchdog_and_stopping() {
    let tmp = tempfile::tempdir().unwrap();
    let socket_path = tmp.path().join("notify.sock");
    let heard = Notifications(std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap());
    let socket = socket_path.to_str().unwrap();
    let env = [("NOTIFY_SOCKET", socket), ("WATCHDOG_USEC", "2000000")];
    // The pods' image comes from a registry through a proxy that can be made slow.
    let registry = wasmpod_tests::registry::Registry::start(false);
    let wasm = std::fs::read(wasmpod_tests::guests::AGNHOST_TERM_P1).unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(registry.push_wasm("sleeper:1.0", &wasm));
    let delay = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let proxy = slow_proxy(registry.host.clone(), delay.clone());
    let extra = ["--insecure-registry", proxy.as_str()];
    let agent = Agent::start_with(&[], tmp.path(), &extra, &env);
    heard.until("READY=1", LIMIT);
    agent.ok(&["get", "namespace", "default"]);
    let pods: Vec<String> = (0..3)
        .map(|i| {
            PodYaml::new(&format!("kept-{i}"))
                .container(&format!(
                    r#"{{ name: main, image: "{proxy}/sleeper:1.0", args: [print, up, sleep, "60000"] }}"#
                ))
                .build()
        })
        .collect();
    agent.create(&pods.join("---\n"));
    agent.ok(&[
        "wait",
        "--for=condition=Ready",
        "pods",
        "--all",
        "--timeout=60s",
    ]);
    // A write the API acknowledges makes the pods' running status durable with it.
    agent.ok(&["create", "configmap", "durable", "--from-literal=a=b"]);
    agent.kill();

    // Brought back without their image, which now takes two seconds to come: READY=1 waits.
    std::fs::remove_dir_all(tmp.path().join("image-store")).unwrap();
    delay.store(2000, std::sync::atomic::Ordering::Relaxed);
    let agent = Agent::start_with(&[], tmp.path(), &extra, &env);
    heard.until("READY=1", LIMIT);
    // Nothing has happened since READY=1 but a read: every pod runs again already, its instance
    // the restart lost counted.
    let list: Value = serde_json::from_str(&agent.ok(&["get", "pods", "-o", "json"])).unwrap();
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    for pod in items {
        let container = &pod["status"]["containerStatuses"][0];
        assert_eq!(container["restartCount"], 1, "{pod:#}");
        assert!(container["state"]["running"].is_object(), "{pod:#}");
        assert_eq!(
            container["lastState"]["terminated"]["reason"], "ContainerStatusUnknown",
            "{pod:#}"
        );
    }

    // Pings every second (half of 2 s), each less than the watchdog's 2 s after the last.
    let mut last = Instant::now();
    let mut pings = 0;
    while pings < 4 {
        heard.until("WATCHDOG=1", Duration::from_secs(2));
        assert!(
            last.elapsed() < Duration::from_secs(2),
            "{:?}",
            last.elapsed()
        );
        last = Instant::now();
        pings += 1;
    }
    let pid = agent.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    // What was sent before the stop is read; then three seconds of silence.
    while heard.next(Duration::from_millis(100)).is_some() {}
    let silent = heard.next(Duration::from_secs(3));
    assert!(
        Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(silent, None, "a stopped agent pinged");
    heard.until("WATCHDOG=1", Duration::from_secs(3));

    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    heard.until("STOPPING=1", LIMIT);
    let mut agent = agent;
    assert!(agent.child.wait().unwrap().success());

    // The unit file, with the binary at hand where it names /usr/local/bin/wasmpod.
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/systemd/wasmpod.service"),
    )
    .unwrap()
    .replace("/usr/local/bin/wasmpod", env!("CARGO_BIN_EXE_wasmpod"));
    let file = tmp.path().join("wasmpod.service");
    std::fs::write(&file, unit).unwrap();
    let verified = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&file)
        .output()
        .expect("systemd-analyze runs (Debian's systemd)");
    assert!(
        verified.status.success() && verified.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
}

#[test]
fn static_pods_follow_their_manifests() {
    wasmpod_tests::warm_shared_cache();
    let tmp = tempfile::tempdir().unwrap();
    let manifests = tmp.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    let agent = Agent::start_in(tmp.path(), &["--manifests", manifests.to_str().unwrap()]);
    let manifest = |version: &str| {
        fill(
            &PodYaml::new("web")
                .spec("terminationGracePeriodSeconds: 10")
                .container(&format!(
                    r#"{{ name: main, image: "{{term}}", args: [print, "{version}", on-term, "0", "10", sleep, "60000"] }}"#
                ))
                .build(),
        )
    };
    let file = manifests.join("web.yaml");
    std::fs::write(&file, manifest("v1")).unwrap();
    // The pod is named after the node, as the kubelet names static pods.
    agent.until(&["get", "pods"], LIMIT, |t| {
        t.lines()
            .any(|l| l.starts_with("web-edge-1") && l.contains("Running"))
    });
    assert_eq!(agent.ok(&["logs", "web-edge-1"]), "v1\n");
    let uid = agent.pod("web-edge-1")["metadata"]["uid"].clone();

    // The mirror cannot be deleted or changed through the API.
    let refused = agent.fails(&["delete", "pod", "web-edge-1"]);
    assert!(refused.contains("mirror of a static pod"), "{refused}");
    let refused = agent.fails(&["label", "pod", "web-edge-1", "a=b"]);
    assert!(refused.contains("mirror of a static pod"), "{refused}");

    // A changed manifest replaces the pod; a removed one deletes it.
    std::fs::write(&file, manifest("v2")).unwrap();
    agent.until(&["logs", "web-edge-1"], LIMIT, |t| t == "v2\n");
    assert_ne!(agent.pod("web-edge-1")["metadata"]["uid"], uid);
    std::fs::remove_file(&file).unwrap();
    agent.until(&["get", "pods", "-o", "name"], LIMIT, |t| {
        t.trim().is_empty()
    });
}

#[test]
fn kubectl_run_and_delete_all() {
    let (_tmp, agent) = Agent::start();
    agent.provide_agnhost();
    let created = agent.ok(&[
        "run",
        "demo",
        "--image=agnhost.wasm",
        "--restart=Never",
        "--",
        "print",
        "hi from kubectl run",
    ]);
    assert_eq!(created.trim(), "pod/demo created");
    agent.until(&["get", "pods"], LIMIT, |t| t.contains("Completed"));
    assert_eq!(agent.ok(&["logs", "demo"]), "hi from kubectl run\n");
    let deleted = agent.ok(&["delete", "pods", "--all"]);
    assert!(deleted.contains(r#"pod "demo" deleted"#), "{deleted}");
    assert_eq!(agent.ok(&["get", "pods", "-o", "name"]).trim(), "");
}

/// A state dir on a small file system of its own (a tmpfs), unmounted when dropped.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(at: PathBuf, size: &str) -> SmallDisk {
        std::fs::create_dir_all(&at).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .status()
            .unwrap();
        assert!(
            mounted.success(),
            "this test mounts a tmpfs: it runs as root"
        );
        SmallDisk(at)
    }

    /// Fills the file system: what is left is less than a page.
    fn fill(&self) {
        use std::io::Write;
        let mut filler = std::fs::File::create(self.0.join("filler")).unwrap();
        let block = vec![0u8; 64 << 10];
        while filler.write_all(&block).is_ok() {}
        while filler.write_all(&[0]).is_ok() {}
    }

    fn free(&self) {
        std::fs::remove_file(self.0.join("filler")).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// What was acknowledged survives a full disk and a `kill -9` on it: while the state dir's file
/// system is full, a write is refused with a `Status` and the agent goes on serving; killed
/// there, it starts again on the full disk with every object it had; once there is room again,
/// writes succeed.
#[test]
fn a_full_disk_loses_nothing_acknowledged() {
    wasmpod_tests::warm_shared_cache();
    let tmp = tempfile::tempdir().unwrap();
    let disk = SmallDisk::mount(tmp.path().join("state"), "16m");
    // The agent's own port, as a device has: the kubeconfig stays what it was.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let listen = ["--listen", &port];
    let agent = Agent::start_in(tmp.path(), &listen);
    agent.ok(&["create", "configmap", "kept", "--from-literal=a=b"]);
    agent.create(
        &PodYaml::new("sleeper")
            .container(r#"{ name: main, image: "{term}", args: [print, ran, sleep, "60000"] }"#)
            .build(),
    );
    agent.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/sleeper",
        "--timeout=30s",
    ]);

    disk.fill();
    let refused = agent.fails(&["create", "configmap", "late", "--from-literal=a=b"]);
    assert!(refused.contains("No space left"), "{refused}");
    assert_eq!(
        agent.ok(&["get", "configmap", "kept", "-o", "jsonpath={.data.a}"]),
        "b"
    );
    agent.fails(&["get", "configmap", "late"]);
    agent.kill();

    let agent = Agent::start_in(tmp.path(), &listen);
    assert_eq!(
        agent.ok(&["get", "configmap", "kept", "-o", "jsonpath={.data.a}"]),
        "b"
    );
    agent.until(&["get", "pods"], LIMIT, |t| {
        t.lines()
            .any(|l| l.starts_with("sleeper") && l.contains("Running"))
    });

    disk.free();
    agent.ok(&["create", "configmap", "late", "--from-literal=a=b"]);
    agent.ok(&["delete", "pod", "sleeper", "--grace-period=0", "--force"]);
}

/// A node under a 4 GiB address-space limit (as a 39-bit board or a container runtime's limit
/// gives it) runs compact and says so in its status, and runs 50 sleeping pods and the hello pod.
#[test]
fn a_small_address_space_runs_fifty_pods() {
    wasmpod_tests::warm_shared_cache();
    let tmp = tempfile::tempdir().unwrap();
    let manifests = tmp.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    for i in 0..50 {
        let pod = PodYaml::new(&format!("sleeper-{i}"))
            .container(r#"{ name: main, image: "{p1}", args: [print, up, sleep, "600000"] }"#)
            .build();
        std::fs::write(manifests.join(format!("{i}.yaml")), fill(&pod)).unwrap();
    }
    let agent = Agent::start_under(
        &["prlimit", "--as=4294967296"],
        tmp.path(),
        &["--manifests", manifests.to_str().unwrap()],
    );
    let node = |path: &str| agent.ok(&["get", "node", "edge-1", "-o", &format!("jsonpath={path}")]);
    assert_eq!(
        node(r"{.metadata.annotations.wasmpod\.dev/address-space}"),
        "compact"
    );
    let containers: u64 = node(r"{.status.allocatable.wasmpod\.dev/containers}")
        .parse()
        .unwrap();
    assert!((50..1000).contains(&containers), "{containers}");
    agent.until(&["get", "pods", "--no-headers"], LIMIT, |t| {
        t.lines().filter(|l| l.contains("Running")).count() == 50
    });
    agent.create(
        &PodYaml::new("hello")
            .never()
            .container(r#"{ name: main, image: "{p1}", args: [print, hello] }"#)
            .build(),
    );
    agent.until(&["get", "pod", "hello"], LIMIT, |t| t.contains("Completed"));
    assert_eq!(agent.ok(&["logs", "hello"]), "hello\n");
}

/// Pods come from the network, so an agent runs machine code (a `.cwasm` from `wasmpod
/// compile`) only from the directories it is given (`--precompiled-dir`): elsewhere such a pod
/// is refused with where machine code may come from.
#[test]
fn precompiled_images_run_only_from_named_dirs() {
    wasmpod_tests::warm_shared_cache();
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let artefact = bin.join("app.cwasm");
    let compiled = Command::new(env!("CARGO_BIN_EXE_wasmpod"))
        .arg("compile")
        .arg(fill("{p1}"))
        .arg("-o")
        .arg(&artefact)
        .status()
        .unwrap();
    assert!(compiled.success());
    let pod = |name: &str| {
        PodYaml::new(name)
            .never()
            .container(&format!(
                r#"{{ name: main, image: "{}", args: [print, hi] }}"#,
                artefact.display()
            ))
            .build()
    };

    let agent = Agent::start_in(tmp.path(), &[]);
    let file = agent.file("refused.yaml", &pod("refused"));
    let refused = agent.fails(&["create", "-f", &file]);
    assert!(
        refused.contains("is machine code (a precompiled artefact)")
            && refused.contains("--precompiled-dir"),
        "{refused}"
    );
    agent.kill();

    let agent = Agent::start_in(tmp.path(), &["--precompiled-dir", bin.to_str().unwrap()]);
    agent.create(&pod("allowed"));
    agent.until(&["get", "pod", "allowed"], LIMIT, |t| {
        t.contains("Completed")
    });
    assert_eq!(agent.ok(&["logs", "allowed"]), "hi\n");
}

/// The `kubectl top` row of `name`: (CPU in millicores, memory in MiB).
fn top_row(table: &str, name: &str) -> (u64, u64) {
    let cells = row(table, name);
    let milli = cells[cells.len() - 2]
        .trim_end_matches('m')
        .parse()
        .unwrap();
    let mib = cells[cells.len() - 1]
        .trim_end_matches("Mi")
        .parse()
        .unwrap();
    (milli, mib)
}

/// `kubectl top` reads `metrics.k8s.io` as metrics-server serves it, and the kubelet's
/// `/metrics/resource` and `/stats/summary` answer through the node proxy and on the agent
/// itself. A spinning container under `limits.cpu: 500m` shows about 500m (its limit holds it
/// there; on a loaded two-core machine it may get less), an idle one about 0, one that
/// allocated 8 MiB about 8 MiB above an idle one's memory.
#[test]
fn kubectl_top_and_the_kubelets_metrics() {
    wasmpod_tests::warm_shared_cache();
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start_in(tmp.path(), &["--metrics-resolution", "1s"]);
    agent.ok(&["create", "namespace", "tools"]);
    let spinner = PodYaml::new("spinner")
        .metadata("labels: {app: spin}")
        .container(
            r#"{ name: spin, image: "{p1}", args: [loop], resources: {limits: {cpu: 500m}} }"#,
        )
        .build();
    let idle = PodYaml::new("idle")
        .container(r#"{ name: idle, image: "{p1}", args: [sleep, "600000"] }"#)
        .container(r#"{ name: hog, image: "{p1}", args: [alloc, "8", sleep, "600000"] }"#)
        .build();
    agent.create(&spinner);
    agent.create(&idle);
    let file = agent.file("tools.yaml", &idle);
    agent.ok(&["create", "-n", "tools", "-f", &file]);
    let pods = agent.until(&["top", "pod", "-A"], LIMIT, |t| t.lines().count() == 4);
    assert!(pods.starts_with("NAMESPACE"), "{pods}");
    // Two windows of the spinner, so its rate covers a second of spinning.
    std::thread::sleep(Duration::from_secs(2));
    let pods = agent.ok(&["top", "pod", "--containers", "-l", "app=spin"]);
    let (spin, _) = top_row(&pods, "spinner");
    assert!(
        (200..=600).contains(&spin),
        "the spinner at {spin}m:\n{pods}"
    );
    let pods = agent.ok(&["top", "pod", "idle", "--containers"]);
    let cells = |c: &str| -> (u64, u64) {
        let line = pods
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(c))
            .unwrap();
        top_row(line, "idle")
    };
    let ((idle_cpu, idle_mem), (hog_cpu, hog_mem)) = (cells("idle"), cells("hog"));
    assert!(idle_cpu <= 5 && hog_cpu <= 5, "{pods}");
    assert!((8..=10).contains(&(hog_mem - idle_mem)), "{pods}");
    let nodes = agent.ok(&["top", "node"]);
    // NAME CPU(cores) CPU(%) MEMORY(bytes) MEMORY(%)
    let node = row(&nodes, "edge-1");
    let node_cpu: u64 = node[1].trim_end_matches('m').parse().unwrap();
    let node_mem: u64 = node[3].trim_end_matches("Mi").parse().unwrap();
    assert!(node_cpu >= spin / 2 && node_mem > hog_mem, "{nodes}");
    let missing = agent.fails(&["top", "pod", "nosuch"]);
    assert!(missing.contains("not found"), "{missing}");

    // The kubelet's resource metrics, read by a Prometheus parser.
    for path in [
        "/api/v1/nodes/edge-1/proxy/metrics/resource",
        "/metrics/resource",
    ] {
        let text = agent.ok(&["get", "--raw", path]);
        let lines = text.lines().map(|l| Ok(l.to_owned()));
        let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
        let sample = |metric: &str, labels: &[(&str, &str)]| -> f64 {
            let found = scrape.samples.iter().find(|s| {
                s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
            });
            match found.map(|s| &s.value) {
                Some(prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v)) => *v,
                other => panic!("{metric} {labels:?}: {other:?} in\n{text}"),
            }
        };
        let spin_cpu = sample(
            "container_cpu_usage_seconds_total",
            &[
                ("container", "spin"),
                ("pod", "spinner"),
                ("namespace", "default"),
            ],
        );
        assert!(spin_cpu > 0.5, "{text}");
        let hog = [
            ("container", "hog"),
            ("pod", "idle"),
            ("namespace", "tools"),
        ];
        let hog_bytes = sample("container_memory_working_set_bytes", &hog);
        assert!(hog_bytes > 8.0 * 1024.0 * 1024.0, "{text}");
        let started = sample("container_start_time_seconds", &hog);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        assert!((now.as_secs_f64() - started) < 600.0, "{text}");
        let pod_cpu = sample("pod_cpu_usage_seconds_total", &[("pod", "spinner")]);
        assert!(pod_cpu >= spin_cpu, "{text}");
        let pod_bytes = sample(
            "pod_memory_working_set_bytes",
            &[("pod", "idle"), ("namespace", "tools")],
        );
        assert!(pod_bytes > hog_bytes, "{text}");
        // The node's is the process's CPU time; a pod's counts the time its polls took, which
        // on a busy machine includes time the OS gave the thread to others.
        assert!(
            sample("node_cpu_usage_seconds_total", &[]) >= pod_cpu / 2.0,
            "{text}"
        );
        assert!(
            sample("node_memory_working_set_bytes", &[]) > pod_bytes,
            "{text}"
        );
        assert_eq!(sample("scrape_error", &[]), 0.0, "{text}");
        let types: Vec<_> = scrape.docs.keys().collect();
        assert_eq!(types.len(), 8, "{types:?}");
    }

    // The Summary API.
    let summary: Value = serde_json::from_str(&agent.ok(&[
        "get",
        "--raw",
        "/api/v1/nodes/edge-1/proxy/stats/summary",
    ]))
    .unwrap();
    assert_eq!(summary["node"]["nodeName"], "edge-1");
    assert!(
        summary["node"]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    let pods = summary["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 3, "{summary}");
    let spinner = pods
        .iter()
        .find(|p| p["podRef"]["name"] == "spinner")
        .unwrap();
    let spin = &spinner["containers"][0];
    assert_eq!(spin["name"], "spin");
    let cores = spin["cpu"]["usageNanoCores"].as_u64().unwrap();
    assert!((200_000_000..=600_000_000).contains(&cores), "{spin}");
    assert!(
        spin["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() > 500_000_000,
        "{spin}"
    );
    assert!(
        spin["startTime"].is_string() && spinner["startTime"].is_string(),
        "{spinner}"
    );
    agent.fails(&[
        "get",
        "--raw",
        "/api/v1/nodes/elsewhere/proxy/stats/summary",
    ]);
    // Only with the token.
    let refused = agent.fails(&["--token", "wrong", "get", "--raw", "/metrics/resource"]);
    assert!(refused.contains("Unauthorized"), "{refused}");
}

/// `kubectl run -i --rm` pipes its input to the new pod's stdin (`stdinOnce`: the input's end
/// is the container's), shows all it printed, deletes the pod and exits with the container's
/// code; `kubectl exec -i` gives the command its own stdin; `kubectl attach -i` shows the
/// container's output from its start and writes to a stdin that stays open for the next
/// attacher.
#[test]
fn run_exec_and_attach_with_stdin() {
    let (_tmp, agent) = Agent::start();
    agent.provide_agnhost();
    let run = |name: &str, extra: &[&str], input: &[u8]| {
        let mut args = vec![
            "run",
            name,
            "-i",
            "--rm",
            "--restart=Never",
            "--image=agnhost.wasm",
            "--",
            "print",
            "hello",
            "stdin",
        ];
        args.extend(extra);
        agent.kubectl_with_input(&args, input)
    };
    let out = run("interactive", &[], b"first\nsecond\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello\nread: first\nread: second\nstdin ended after 2 lines\npod \"interactive\" deleted\n"
    );
    let out = run("failing", &["exit", "3"], b"x\n");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("stdin ended after 1 lines"));
    assert_eq!(agent.ok(&["get", "pods", "-o", "name"]).trim(), "");

    agent.create(
        &PodYaml::new("shell")
            .container(r#"{ name: c, image: "{p1}", args: [print, started, stdin], stdin: true }"#)
            .container(r#"{ name: plain, image: "{p1}", args: [sleep, "600000"] }"#)
            .build(),
    );
    agent.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/shell",
        "--timeout=30s",
    ]);
    let out = agent.kubectl_with_input(
        &[
            "exec", "-i", "shell", "-c", "plain", "--", "agnhost", "stdin",
        ],
        b"to exec\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "read: to exec\nstdin ended after 1 lines\n"
    );
    // Attach sessions do not end by themselves: each is read until what it wrote came back
    // (bounded: a session that never echoes ends at the timeout and fails below).
    for (input, seen) in [("one\n", "read: one"), ("two\n", "read: two")] {
        let mut child = Command::new("timeout")
            .args(["30", "kubectl", "attach", "-i", "shell", "-c", "c"])
            .env("KUBECONFIG", &agent.kubeconfig)
            .env("HOME", &agent.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let mut lines = Vec::new();
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            if line == seen {
                break;
            }
            lines.push(line);
        }
        // TERM, which `timeout` passes on to kubectl and then dies of itself.
        let term = Command::new("kill").arg(child.id().to_string()).status();
        assert!(term.unwrap().success());
        let ended = child.wait_with_output().unwrap();
        assert!(
            ended.status.code().is_none(),
            "the session ended ({}) before {seen:?} came back: {lines:?}; kubectl said: {}\nthe agent's log:\n{}",
            ended.status,
            String::from_utf8_lossy(&ended.stderr),
            agent.log()
        );
        // From the instance's start: what it printed before this session too.
        assert_eq!(
            lines.first().map(String::as_str),
            Some("started"),
            "{lines:?}"
        );
    }
    let log = agent.ok(&["logs", "shell", "-c", "c"]);
    assert_eq!(log, "started\nread: one\nread: two\n");
    // Nothing is written to a container without stdin: true.
    let refused = String::from_utf8_lossy(
        &agent
            .kubectl_with_input(&["attach", "-i", "shell", "-c", "plain"], b"x\n")
            .stderr,
    )
    .into_owned();
    assert!(refused.contains("does not have stdin: true"), "{refused}");
}

/// An attach the API refuses (not a WebSocket: 400) takes nothing from the container: a
/// `stdinOnce` container's stdin stays open for the session that comes next.
#[test]
fn a_refused_attach_leaves_a_stdin_once_container_its_stdin() {
    let (_tmp, agent) = Agent::start();
    agent.provide_agnhost();
    agent.create(
        r#"apiVersion: v1
kind: Pod
metadata: { name: once }
spec:
  restartPolicy: Never
  containers:
  - { name: c, image: "{p1}", args: [print, started, stdin], stdin: true, stdinOnce: true }
"#,
    );
    agent.ok(&["wait", "--for=condition=Ready", "pod/once", "--timeout=30s"]);
    // A GET without the upgrade (no body for the refusal to race with).
    let refused = agent.kubectl(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/pods/once/attach?container=c&stdin=true&stdout=true",
    ]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("WebSocket"),
        "{said}"
    );
    // The next session writes to the stdin and ends it (stdinOnce): the container reads both.
    let out = agent.kubectl_with_input(&["attach", "-i", "once", "-c", "c"], b"one\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = agent.until(
        &["logs", "once", "-c", "c"],
        Duration::from_secs(30),
        |log| log.contains("stdin ended"),
    );
    assert_eq!(log, "started\nread: one\nstdin ended after 1 lines\n");
}

/// `kubectl port-forward` of `ports` (`0:PORT`: kubectl picks the local port), with `env`; the
/// process and the local ports, in the order asked.
fn port_forward(
    agent: &Agent,
    pod: &str,
    ports: &[&str],
    env: &[(&str, &str)],
) -> (Child, Vec<u16>) {
    let mut child = Command::new("kubectl")
        .args(["port-forward", "--address", "127.0.0.1", pod])
        .args(ports)
        .env("KUBECONFIG", &agent.kubeconfig)
        .env("HOME", &agent.dir)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let local = ports
        .iter()
        .map(|_| {
            // "Forwarding from 127.0.0.1:41234 -> 7000"
            let line = lines
                .next()
                .expect("kubectl port-forward printed nothing")
                .unwrap();
            let from = line.split_whitespace().nth(2).unwrap();
            from.rsplit(':').next().unwrap().parse().unwrap()
        })
        .collect();
    std::thread::spawn(move || lines.for_each(drop));
    (child, local)
}

/// Sends `text` to `port` on loopback, half-closes, and reads the answer to its end.
fn echo(port: u16, text: &[u8]) -> Vec<u8> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.write_all(text).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    answer
}

/// `kubectl port-forward` reaches what listens in the pod: a component's `wasi:sockets` echo
/// server and an HTTP handler container, one connection after another and several at once,
/// over the WebSocket tunnel kubectl speaks first and over SPDY when told to fall back; a port
/// nothing listens on is reported as kubectl reports the kubelet's refusal.
#[test]
fn port_forward_reaches_the_pods_listeners() {
    let (_tmp, agent) = Agent::start();
    agent.create(
        &PodYaml::new("listeners")
            .container(r#"{ name: echo, image: "{p2}", args: [echo-server, "0.0.0.0:7000"] }"#)
            .container(r#"{ name: web, image: "{http}", ports: [{containerPort: 8080}] }"#)
            .build(),
    );
    agent.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/listeners",
        "--timeout=30s",
    ]);
    let (mut kubectl, local) = port_forward(&agent, "pod/listeners", &["0:7000", "0:8080"], &[]);
    let (echo_port, web_port) = (local[0], local[1]);
    assert_eq!(echo(echo_port, b"first"), b"first");
    assert_eq!(echo(echo_port, b"second"), b"second");
    // 3 MB each way, through frames of 32 KiB.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    assert!(echo(echo_port, &big) == big, "the echo of 3 MB differs");
    // Two at once: the echo server answers them in turn, the handler together.
    let together: Vec<_> = [(echo_port, "one"), (echo_port, "two")]
        .into_iter()
        .map(|(port, text)| std::thread::spawn(move || (text, echo(port, text.as_bytes()))))
        .chain((0..2).map(|_| {
            std::thread::spawn(move || {
                let answer = echo(
                    web_port,
                    b"GET / HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n",
                );
                ("http", answer)
            })
        }))
        .collect();
    for t in together {
        let (text, answer) = t.join().unwrap();
        let answer = String::from_utf8_lossy(&answer);
        match text {
            "http" => assert!(answer.starts_with("HTTP/1.1 200"), "{answer}"),
            text => assert_eq!(answer, text),
        }
    }
    kubectl.kill().unwrap();
    kubectl.wait().unwrap();

    // The SPDY upgrade kubectl falls back to.
    let (mut kubectl, local) = port_forward(
        &agent,
        "pod/listeners",
        &["0:7000"],
        &[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")],
    );
    assert_eq!(echo(local[0], b"over spdy"), b"over spdy");
    kubectl.kill().unwrap();
    kubectl.wait().unwrap();

    // A port nothing listens on: the connection closes, kubectl says why and gives up.
    let (kubectl, local) = port_forward(&agent, "pod/listeners", &["0:7999"], &[]);
    assert_eq!(echo(local[0], b"anyone?"), b"");
    let out = kubectl.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error forwarding port 7999 to pod listeners")
            && stderr.contains("connection refused"),
        "{stderr}"
    );
}

/// Service-account tokens: `kubectl create token` (the TokenRequest API) gives a token the agent
/// takes for its service account, which may read its namespace but for Secrets and nothing
/// else; a pod exported from a cluster with its `kube-api-access-*` volume runs as it is and
/// finds there a token bound to it, the agent's CA and its namespace; a bound token dies with
/// its pod.
#[test]
fn service_account_tokens_and_kube_api_access() {
    let (_tmp, agent) = Agent::start();
    let token = agent.ok(&["create", "token", "default", "--duration=10m"]);
    let token = token.trim();
    let with = |token: &str, args: &[&str]| {
        let mut all = vec!["--token", token];
        all.extend(args);
        agent.kubectl(&all)
    };
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
    let read = with(token, &["get", "pods"]);
    assert!(read.status.success(), "{}", stderr(&read));
    for (args, refused) in [
        (
            &["get", "secrets"][..],
            r#"cannot list resource "secrets" in API group "" in the namespace "default""#,
        ),
        (
            &["run", "x", "--image=x.wasm"][..],
            r#"cannot create resource "pods""#,
        ),
        (
            &["get", "pods", "-n", "kube-system"][..],
            r#"in the namespace "kube-system""#,
        ),
        (
            &["get", "nodes"][..],
            r#"cannot list resource "nodes" in API group "" at the cluster scope"#,
        ),
    ] {
        let out = with(token, args);
        assert!(
            !out.status.success() && stderr(&out).contains(refused),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains(r#"User "system:serviceaccount:default:default""#));
    }
    // For another audience: not a token for the API.
    let vault = agent.ok(&["create", "token", "default", "--audience=vault"]);
    assert!(stderr(&with(vault.trim(), &["get", "pods"])).contains("Unauthorized"));
    let short = agent.fails(&["create", "token", "default", "--duration=1m"]);
    assert!(
        short.contains("may not specify a duration less than 10 minutes"),
        "{short}"
    );
    let missing = agent.fails(&["create", "token", "nobody"]);
    assert!(
        missing.contains(r#"serviceaccounts "nobody" not found"#),
        "{missing}"
    );

    // The volume every pod of a cluster has, as `kubectl get pod -o yaml` shows it.
    let dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    agent.create(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{ name: reader }}
spec:
  serviceAccountName: default
  containers:
  - name: c
    image: "{{p1}}"
    args: [cat, {dir}/token, cat, {dir}/namespace, cat, {dir}/ca.crt, sleep, "600000"]
    volumeMounts: [ {{ name: kube-api-access-x1y2z, mountPath: {dir}, readOnly: true }} ]
  volumes:
  - name: kube-api-access-x1y2z
    projected:
      defaultMode: 420
      sources:
      - serviceAccountToken: {{ expirationSeconds: 3607, path: token }}
      - configMap: {{ name: kube-root-ca.crt, items: [ {{ key: ca.crt, path: ca.crt }} ] }}
      - downwardAPI: {{ items: [ {{ path: namespace, fieldRef: {{ apiVersion: v1, fieldPath: metadata.namespace }} }} ] }}
"#
    ));
    let log = agent.until(&["logs", "reader"], LIMIT, |l| {
        l.contains("END CERTIFICATE")
    });
    let mut lines = log.lines();
    let pod_token = lines.next().unwrap().to_owned();
    assert_eq!(lines.next(), Some("default"), "{log}");
    assert_eq!(lines.next(), Some("-----BEGIN CERTIFICATE-----"), "{log}");
    let read = with(&pod_token, &["get", "pod", "reader", "-o", "name"]);
    assert_eq!(
        String::from_utf8_lossy(&read.stdout).trim(),
        "pod/reader",
        "{}",
        stderr(&read)
    );
    let bound = agent.ok(&[
        "create",
        "token",
        "default",
        "--bound-object-kind=Pod",
        "--bound-object-name=reader",
    ]);
    assert!(with(bound.trim(), &["get", "pods"]).status.success());
    agent.ok(&["delete", "pod", "reader", "--grace-period=0", "--force"]);
    agent.until(&["get", "pods", "-o", "name"], LIMIT, |t| {
        t.trim().is_empty()
    });
    // Bound to the pod: gone with it. The unbound token lives on.
    for gone in [pod_token.as_str(), bound.trim()] {
        assert!(stderr(&with(gone, &["get", "pods"])).contains("Unauthorized"));
    }
    assert!(with(token, &["get", "pods"]).status.success());
    // A deleted service account's tokens die with it, and stay dead when the account is made
    // again (by the service account controller, for `default`): the token names the uid.
    let uid = |name: &str| agent.ok(&["get", "sa", name, "-o", "jsonpath={.metadata.uid}"]);
    let before = uid("default");
    agent.ok(&["delete", "serviceaccount", "default"]);
    assert!(stderr(&with(token, &["get", "pods"])).contains("Unauthorized"));
    let after = agent.until(&["get", "sa", "-o", "name"], LIMIT, |t| {
        t.contains("serviceaccount/default")
    });
    assert!(!after.is_empty());
    assert_ne!(uid("default"), before);
    assert!(stderr(&with(token, &["get", "pods"])).contains("Unauthorized"));
    agent.ok(&["create", "sa", "builder"]);
    let builder = agent.ok(&["create", "token", "builder"]);
    assert!(with(builder.trim(), &["get", "pods"]).status.success());
    agent.ok(&["delete", "sa", "builder"]);
    agent.ok(&["create", "sa", "builder"]);
    assert!(stderr(&with(builder.trim(), &["get", "pods"])).contains("Unauthorized"));
    let fresh = agent.ok(&["create", "token", "default"]);
    assert!(with(fresh.trim(), &["get", "pods"]).status.success());
}

/// A projected token for another audience is for that audience alone, for the time asked: the
/// API refuses it. A pod naming a service account that does not exist is refused; one whose
/// account is deleted while it runs is not lost at the agent's restart.
#[test]
fn projected_tokens_mean_only_what_they_say() {
    use base64::Engine as _;
    let (tmp, agent) = Agent::start();
    let refused = agent.fails(&[
        "run",
        "nobody",
        "--image=x.wasm",
        "--overrides",
        r#"{"spec": {"serviceAccountName": "ghost"}}"#,
    ]);
    assert!(
        refused.contains("error looking up service account default/ghost")
            && refused.contains(r#"serviceaccount "ghost" not found"#),
        "{refused}"
    );
    agent.create(
        r#"apiVersion: v1
kind: Pod
metadata: { name: vault-client }
spec:
  containers:
  - name: c
    image: "{p1}"
    args: [cat, /vault/token, cat, /api/token, sleep, "600000"]
    volumeMounts: [ { name: vault, mountPath: /vault }, { name: api, mountPath: /api } ]
  volumes:
  - name: vault
    projected:
      sources: [ { serviceAccountToken: { audience: vault, expirationSeconds: 600, path: token } } ]
  - name: api
    projected:
      sources: [ { serviceAccountToken: { path: token } } ]
"#,
    );
    let log = agent.until(&["logs", "vault-client"], LIMIT, |l| l.lines().count() >= 2);
    let tokens: Vec<&str> = log.lines().collect();
    let claims = |token: &str| -> Value {
        let body = token.split('.').nth(1).unwrap();
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(body)
            .unwrap();
        serde_json::from_slice(&json).unwrap()
    };
    let (vault, api) = (claims(tokens[0]), claims(tokens[1]));
    assert_eq!(vault["aud"], serde_json::json!(["vault"]), "{vault}");
    assert_eq!(
        vault["exp"].as_i64().unwrap() - vault["iat"].as_i64().unwrap(),
        600
    );
    assert_eq!(
        api["aud"],
        serde_json::json!(["https://kubernetes.default.svc.cluster.local"])
    );
    assert_eq!(
        api["exp"].as_i64().unwrap() - api["iat"].as_i64().unwrap(),
        3600
    );
    assert_ne!(vault["kubernetes.io"]["serviceaccount"]["uid"], "");
    let as_vault = agent.kubectl(&["--token", tokens[0], "get", "pods"]);
    assert!(
        String::from_utf8_lossy(&as_vault.stderr).contains("Unauthorized"),
        "{as_vault:?}"
    );
    let as_api = agent.kubectl(&["--token", tokens[1], "get", "pods"]);
    assert!(as_api.status.success(), "{as_api:?}");

    // A pod whose account is deleted while it runs still runs again after the agent restarts
    // (its token, for an account that is gone, is refused by the API).
    agent.ok(&["create", "sa", "worker"]);
    agent.create(
        r#"apiVersion: v1
kind: Pod
metadata: { name: worker }
spec:
  serviceAccountName: worker
  containers:
  - { name: c, image: "{p1}", args: [cat, /t/token, sleep, "600000"], volumeMounts: [ { name: t, mountPath: /t } ] }
  volumes:
  - { name: t, projected: { sources: [ { serviceAccountToken: { path: token } } ] } }
"#,
    );
    agent.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/worker",
        "--timeout=30s",
    ]);
    agent.ok(&["delete", "sa", "worker"]);
    agent.kill();
    let agent = Agent::start_in(tmp.path(), &[]);
    // Its container runs again, counting the instance the kill lost.
    let state = "jsonpath={.status.containerStatuses[0].restartCount} \
                 {.status.containerStatuses[0].ready}";
    agent.until(&["get", "pod", "worker", "-o", state], LIMIT, |t| {
        t == "1 true"
    });
    let token = agent.until(&["logs", "worker"], LIMIT, |l| !l.trim().is_empty());
    let out = agent.kubectl(&["--token", token.trim(), "get", "pods"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Unauthorized"),
        "{out:?}"
    );
}

/// Pods reach the node's API as a cluster's pods do: the `kubernetes` Service's address and
/// port in their environment, a connection from the pod network to 10.96.0.1:443 reaching the
/// agent, whose certificate names that address and `kubernetes.default.svc` under the CA a
/// pod's `kube-api-access` volume holds — what in-cluster configuration needs.
/// The pod the client tests drive: `server` answers HTTP on 8080, `shell` is there to exec in.
fn client_pod(agent: &Agent) {
    agent.create(
        &PodYaml::new("web")
            .container(
                r#"{ name: server, image: "{p2}", args: [http-server, "0.0.0.0:8080", "200"] }"#,
            )
            .container(r#"{ name: shell, image: "{p1}", args: [sleep, "600000"] }"#)
            .build(),
    );
    agent.ok(&["wait", "--for=condition=Ready", "pod/web", "--timeout=30s"]);
}

/// The script `name` of `tests/clients/`.
fn client_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/clients")
        .join(name)
}

/// Runs a client program (`command`, bounded to two minutes) against the agent, with `env`:
/// the JSON object it printed of what each call gave.
fn run_client(
    agent: &Agent,
    command: &[&std::ffi::OsStr],
    env: &[(&str, &std::ffi::OsStr)],
) -> Value {
    let out = Command::new("timeout")
        .arg("120")
        .args(command)
        .env("KUBECONFIG", &agent.kubeconfig)
        .env("HOME", &agent.dir)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        agent.log()
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The Python interpreter of the venv with the official client (`tools/test-deps.sh` makes it).
fn python() -> PathBuf {
    let venv = std::env::var_os("WASMPOD_TEST_VENV").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/wasmpod-test-venv"),
        PathBuf::from,
    );
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: tools/test-deps.sh makes the venv with the Kubernetes client",
        python.display()
    );
    python
}

/// The official Python client (`kubernetes` 37.0.2), as a user's script drives the agent: exec
/// with stdin sent as text frames and closed with v5's close of channel 0, exec without stdin,
/// port-forward over the WebSocket channel protocol (a port served, a port refused on its error
/// channel), logs (tail with timestamps, follow), the dynamic client through discovery, and a
/// missing pod as a Status.
#[test]
fn the_python_client_execs_and_forwards_ports() {
    let (_tmp, agent) = Agent::start();
    client_pod(&agent);
    let script = client_script("python_client.py");
    let seen = run_client(&agent, &[python().as_os_str(), script.as_os_str()], &[]);
    assert_eq!(seen["exec_protocol"], "v5.channel.k8s.io", "{seen:#}");
    assert_eq!(
        seen["exec_stdout"], "read: first\nread: second\nstdin ended after 2 lines\n",
        "{seen:#}"
    );
    assert_eq!(seen["exec_returncode"], 0, "{seen:#}");
    assert_eq!(seen["exec_once"], "once\n", "{seen:#}");
    assert_eq!(seen["forward"], "HTTP/1.1 200 X", "{seen:#}");
    let refused = seen["refused"].as_str().unwrap_or_default();
    assert!(
        refused.starts_with("error forwarding port 9999 to pod web, uid ")
            && refused.contains("refused"),
        "{seen:#}"
    );
    assert_eq!(seen["missing"]["status"], 404, "{seen:#}");
    assert_eq!(seen["missing"]["reason"], "NotFound", "{seen:#}");
    // Logs: the last line (the request through the port) after its RFC 3339 time; a followed
    // log from its start. The dynamic client finds ConfigMaps through discovery.
    let tail = seen["log_tail"].as_str().unwrap_or_default();
    let (time, line) = tail.split_once(' ').unwrap_or_default();
    assert!(time.ends_with('Z') && time.contains('T'), "{seen:#}");
    assert!(line.starts_with("request GET /python"), "{seen:#}");
    assert_eq!(
        seen["log_follow_first"], "listening 0.0.0.0:8080\n",
        "{seen:#}"
    );
    assert_eq!(seen["dynamic_get"], "b", "{seen:#}");
    assert_eq!(
        seen["dynamic_list"],
        serde_json::json!(["from-python"]),
        "{seen:#}"
    );
    // The server saw the request that came through the forwarded port.
    assert!(
        agent
            .ok(&["logs", "web", "-c", "server"])
            .contains("request GET /python HTTP/1.1"),
        "{}",
        agent.ok(&["logs", "web", "-c", "server"])
    );
}

/// The official JavaScript client (`@kubernetes/client-node` 1.4.0; 2.0 needs Node 22, whose
/// zstd its HTTP client takes) under Node: a typed list, a watch from the list's
/// resourceVersion, exec with stdin (binary frames, closed by v5), port-forward over the
/// WebSocket channel protocol, and a missing pod as a Status.
#[test]
fn the_javascript_client_lists_watches_execs_and_forwards() {
    let node_dir = std::env::var_os("WASMPOD_TEST_NODE").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/wasmpod-test-node"),
        PathBuf::from,
    );
    let client = node_dir.join("node_modules/@kubernetes/client-node/dist/index.js");
    assert!(
        client.exists(),
        "{} is missing: tools/test-deps.sh installs the JavaScript client",
        client.display()
    );
    let (_tmp, agent) = Agent::start();
    client_pod(&agent);
    let script = client_script("js_client.mjs");
    let seen = run_client(
        &agent,
        &["node".as_ref(), script.as_os_str()],
        &[("WASMPOD_K8S_JS", client.as_os_str())],
    );
    assert_eq!(seen["pods"], serde_json::json!(["web"]), "{seen:#}");
    assert_eq!(seen["watch"], "ADDED from-js", "{seen:#}");
    assert_eq!(seen["exec_status"], "Success", "{seen:#}");
    assert_eq!(
        seen["exec_stdout"], "read: first\nread: second\nstdin ended after 2 lines\n",
        "{seen:#}"
    );
    assert_eq!(seen["forward"], "HTTP/1.1 200 X", "{seen:#}");
    assert_eq!(seen["missing"]["code"], 404, "{seen:#}");
    assert_eq!(seen["missing"]["reason"], "NotFound", "{seen:#}");
    assert!(
        agent
            .ok(&["logs", "web", "-c", "server"])
            .contains("request GET /javascript HTTP/1.1")
    );
}

/// kube-rs (`kube` 5, what a Rust program reaches for), as a controller drives the agent: a
/// typed list, `kube::runtime::watcher` with a reflector's store following a pod created after
/// it started, exec with stdin, port-forward over the WebSocket channel protocol, and a missing
/// pod as the API's `Status`.
#[test]
fn kube_rs_lists_reflects_execs_and_forwards() {
    use futures_util::TryStreamExt;
    use kube::api::{Api, AttachParams, PostParams};
    use kube::config::{KubeConfigOptions, Kubeconfig};
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use wasmpod::k8s_openapi::api::core::v1::Pod;

    let (_tmp, agent) = Agent::start();
    client_pod(&agent);
    let second: Pod = typed(&fill(
        &PodYaml::new("second")
            .container(r#"{ name: c, image: "{p1}", args: [sleep, "600000"] }"#)
            .build(),
    ));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let kubeconfig = Kubeconfig::read_from(&agent.kubeconfig).unwrap();
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let limit = Duration::from_secs(30);

        let listed = pods.list(&Default::default()).await.unwrap();
        let names: Vec<_> = listed
            .items
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["web"]);

        // A reflector's store follows the watcher: the pod created after it started arrives.
        let (store, writer) = reflector::store::<Pod>();
        let follow = reflector(writer, watcher(pods.clone(), watcher::Config::default()))
            .applied_objects()
            .try_for_each(|_| async { Ok(()) });
        let follow = tokio::spawn(follow);
        tokio::time::timeout(limit, store.wait_until_ready())
            .await
            .unwrap()
            .unwrap();
        pods.create(&PostParams::default(), &second).await.unwrap();
        let start = Instant::now();
        while store.state().len() < 2 {
            assert!(
                start.elapsed() < limit,
                "the reflector never saw the second pod"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        follow.abort();

        // exec with stdin: what it read, and its end as a Status.
        let params = AttachParams::default()
            .container("shell")
            .stdin(true)
            .stderr(false);
        let mut attached = pods
            .exec("web", ["agnhost", "stdin"], &params)
            .await
            .unwrap();
        let mut stdin = attached.stdin().unwrap();
        stdin.write_all(b"first\nsecond\n").await.unwrap();
        stdin.shutdown().await.unwrap();
        drop(stdin);
        let mut stdout = String::new();
        let mut out = attached.stdout().unwrap();
        tokio::time::timeout(limit, out.read_to_string(&mut stdout))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            stdout,
            "read: first\nread: second\nstdin ended after 2 lines\n"
        );
        let status = attached.take_status().unwrap().await.unwrap();
        assert_eq!(status.status.as_deref(), Some("Success"), "{status:?}");

        // port-forward
        let mut forward = pods.portforward("web", &[8080]).await.unwrap();
        let mut stream = forward.take_stream(8080).unwrap();
        stream
            .write_all(b"GET /rust HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tokio::time::timeout(limit, stream.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "the forwarded connection ended: {answer:?}");
            answer.extend_from_slice(&buf[..n]);
        }
        assert!(answer.starts_with(b"HTTP/1.1 200 X\r\n"), "{answer:?}");
        drop(stream);
        forward.abort();

        match pods.get("nowhere").await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 404);
                assert_eq!(status.reason, "NotFound");
            }
            other => panic!("a missing pod: {other:?}"),
        }
    });
    assert!(
        agent
            .ok(&["logs", "web", "-c", "server"])
            .contains("request GET /rust HTTP/1.1")
    );
}

/// A typed object from YAML text, read as wasmpod reads it.
fn typed<T: wasmpod::k8s_openapi::serde::de::DeserializeOwned>(yaml: &str) -> T {
    let doc = wasmpod::read_documents(yaml.as_bytes()).unwrap().remove(0);
    serde_json::from_value(doc).unwrap()
}

#[test]
fn pods_reach_the_api_as_the_kubernetes_service() {
    let (_tmp, agent) = Agent::start();
    agent.create(
        &PodYaml::new("incluster")
            .container(
                r#"{ name: c, image: "{p2}", args: [env, KUBERNETES_SERVICE_HOST, env, KUBERNETES_SERVICE_PORT, connect, "10.96.0.1:443", "not TLS", sleep, "600000"] }"#,
            )
            .build(),
    );
    let log = agent.until(&["logs", "incluster"], LIMIT, |l| l.contains("reply"));
    assert!(
        log.starts_with("KUBERNETES_SERVICE_HOST=10.96.0.1\nKUBERNETES_SERVICE_PORT=443\n"),
        "{log}"
    );
    // The agent's TLS server answered (an alert for what is not TLS), on its own address.
    let kubeconfig = std::fs::read_to_string(&agent.kubeconfig).unwrap();
    let server = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://"))
        .unwrap();
    assert!(log.contains(&format!("from {server}")), "{log}");

    // What an in-cluster client does over that connection, done here with curl pinned to the
    // agent's address: the certificate is checked for the Service's address and name.
    let ca = agent.dir.join("ca.crt");
    let data = agent.ok(&[
        "config",
        "view",
        "--raw",
        "-o",
        "jsonpath={.clusters[0].cluster.certificate-authority-data}",
    ]);
    let pem = Command::new("base64")
        .arg("-d")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().unwrap().write_all(data.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    std::fs::write(&ca, pem.stdout).unwrap();
    let token = agent.ok(&["create", "token", "default"]);
    for host in ["10.96.0.1", "kubernetes.default.svc"] {
        let out = Command::new("curl")
            .args(["-sS", "--fail", "--cacert"])
            .arg(&ca)
            .arg("--connect-to")
            .arg(format!("{host}:443:{server}"))
            .arg("-H")
            .arg(format!("Authorization: Bearer {}", token.trim()))
            .arg(format!("https://{host}/api/v1/namespaces/default/pods"))
            .output()
            .unwrap();
        let body = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && body.contains("\"incluster\""),
            "{host}: {body}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
