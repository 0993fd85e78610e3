//! kubectl's everyday verbs against the agent: a pod through its life, statuses, watches and
//! deletion, the API server's errors, ConfigMaps, Secrets, PriorityClasses and RuntimeClasses,
//! the manifest corpus, registry images, apply (client and server side), the Node.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmpod_tests::PodYaml;

use super::support::{Agent, LIMIT, row, status_of};

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

    // As the root CA publisher does: every namespace, a new one too, has `kube-root-ca.crt`
    // with the CA the kubeconfig trusts, made again when deleted.
    let ca = |ns: &str| {
        agent.ok(&[
            "get",
            "configmap",
            "kube-root-ca.crt",
            "-n",
            ns,
            "-o",
            "jsonpath={.data.ca\\.crt}",
        ])
    };
    let trusted = agent.ok(&[
        "config",
        "view",
        "--raw",
        "-o",
        "jsonpath={.clusters[0].cluster.certificate-authority-data}",
    ]);
    use base64::Engine as _;
    let trusted = base64::engine::general_purpose::STANDARD
        .decode(trusted.trim())
        .unwrap();
    assert_eq!(ca("default").as_bytes(), trusted);
    agent.ok(&["create", "namespace", "fresh"]);
    assert_eq!(ca("fresh").as_bytes(), trusted);
    agent.ok(&["delete", "configmap", "kube-root-ca.crt", "-n", "fresh"]);
    assert_eq!(ca("fresh").as_bytes(), trusted);
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

/// The node's labels and a RuntimeClass's overhead, as `containerd-shim-wasmpod-v1 install`
/// leaves them on a cluster: a pod of a class whose `scheduling.nodeSelector` the node does not
/// match stays Pending until `kubectl label node` gives the node the label, then runs with the
/// class's overhead in its spec, counted with its requests (the RuntimeClass admission); a pod
/// naming another overhead is refused; the labels, and the Node's identity, outlive a restart of
/// the agent, and only the node's labels and annotations may be patched.
#[test]
fn node_labels_and_runtime_class_overhead() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start_in(tmp.path(), &[]);
    let node = agent.ok(&["get", "nodes", "-o", "name"]).trim().to_owned();
    agent.create(
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: wasmpod}\nhandler: wasmpod\noverhead:\n  podFixed: {memory: 32Mi, cpu: 10m}\nscheduling:\n  nodeSelector: {wasmpod.dev/installed: \"true\"}\n",
    );
    let pod = |name: &str, more: &str| {
        let mut pod = PodYaml::new(name).never().spec("runtimeClassName: wasmpod");
        if !more.is_empty() {
            pod = pod.spec(more);
        }
        pod.container(r#"{ name: main, image: "{p1}", args: [print, ran] }"#)
            .build()
    };
    agent.create(&pod("early", ""));
    agent.until(&["get", "pod", "early", "-o", "json"], LIMIT, |o| {
        o.contains("didn't match Pod's node affinity/selector")
    });
    assert_eq!(status_of(&agent.ok(&["get", "pods"]), "early"), "Pending");

    let labelled = agent.ok(&["label", &node[..], "wasmpod.dev/installed=true"]);
    assert_eq!(labelled.trim(), format!("{node} labeled"));
    agent.until(&["get", "pods"], LIMIT, |t| {
        status_of(t, "early") == "Completed"
    });
    let early = agent.pod("early");
    assert_eq!(
        early["spec"]["overhead"],
        serde_json::json!({"memory": "32Mi", "cpu": "10m"})
    );
    assert_eq!(
        early["spec"]["nodeSelector"]["wasmpod.dev/installed"],
        "true"
    );

    // The overhead is counted: a pod whose requests fit the node alone does not fit with it.
    let allocatable = agent.ok(&[
        "get",
        &node[..],
        "-o",
        "jsonpath={.status.allocatable.memory}",
    ]);
    let kib: u64 = allocatable.trim().trim_end_matches("Ki").parse().unwrap();
    let request = format!("{}Ki", kib - 16 * 1024);
    let big = PodYaml::new("big")
        .never()
        .spec("runtimeClassName: wasmpod")
        .container(&format!(
            r#"{{ name: main, image: "{{p1}}", args: [print, ran], resources: {{requests: {{memory: {request}}}}} }}"#
        ))
        .build();
    agent.create(&big);
    agent.until(&["get", "pod", "big", "-o", "json"], LIMIT, |o| {
        o.contains("Insufficient memory")
    });
    let file = agent.file("own.yaml", &pod("own", "overhead: {memory: 1Mi}"));
    let err = agent.fails(&["create", "-f", &file]);
    assert!(
        err.contains("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"),
        "{err}"
    );
    let file = agent.file(
        "unclassed.yaml",
        &PodYaml::new("unclassed")
            .spec("overhead: {memory: 1Mi}")
            .container(r#"{ name: main, image: "{p1}" }"#)
            .build(),
    );
    let err = agent.fails(&["create", "-f", &file]);
    assert!(
        err.contains(
            "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
        ),
        "{err}"
    );

    // Only labels and annotations change; a bad label names its field.
    let err = agent.fails(&[
        "patch",
        &node[..],
        "-p",
        r#"{"spec":{"unschedulable":true}}"#,
    ]);
    assert!(
        err.contains("only its labels and annotations may be changed"),
        "{err}"
    );
    let err = agent.fails(&[
        "patch",
        &node[..],
        "-p",
        r#"{"metadata":{"labels":{"a":"-b"}}}"#,
    ]);
    assert!(err.contains("metadata.labels.a"), "{err}");
    agent.ok(&["annotate", &node[..], "example.com/owner=edge-team"]);

    // After a restart: the labels and annotations are as they were left, and the Node is the
    // same object (its uid and creation time).
    let identity = |agent: &Agent| {
        agent.ok(&[
            "get",
            &node[..],
            "-o",
            "jsonpath={.metadata.uid} {.metadata.creationTimestamp}",
        ])
    };
    let before = identity(&agent);
    agent.kill();
    let agent = Agent::start_in(tmp.path(), &[]);
    assert_eq!(identity(&agent), before);
    let labels = agent.ok(&["get", &node[..], "--show-labels"]);
    assert!(labels.contains("wasmpod.dev/installed=true"), "{labels}");
    let owner = agent.ok(&[
        "get",
        &node[..],
        "-o",
        r"jsonpath={.metadata.annotations.example\.com/owner}",
    ]);
    assert_eq!(owner, "edge-team");
    agent.ok(&["label", &node[..], "wasmpod.dev/installed-"]);
    let labels = agent.ok(&["get", &node[..], "--show-labels"]);
    assert!(!labels.contains("wasmpod.dev/installed"), "{labels}");
    assert!(labels.contains("kubernetes.io/hostname="), "{labels}");
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
