//! `wasmpod run`: output, exit codes, the event stream and status file, published ports, node
//! flags, stdin, and bad input found at run time.

use super::*;

#[test]
fn run_prints_output_and_writes_events_and_status() {
    let dir = Dir::new();
    let pod = dir.write("pod.yaml", HELLO);
    let (ev, st) = (dir.path("events.jsonl"), dir.path("status.json"));
    let out = dir.run(
        &pod,
        &[
            "--events",
            ev.to_str().unwrap(),
            "--status",
            st.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.lines().any(|l| l == "[p1] hello from p1"),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l == "[p2] hello from p2"),
        "{stdout}"
    );
    assert!(text(&out.stderr).lines().any(|l| l == "[p1] to stderr"));

    let events = events(&ev);
    let keys = [
        "time",
        "pod",
        "container",
        "role",
        "type",
        "reason",
        "message",
        "exitCode",
        "restartCount",
        "phase",
    ];
    for e in &events {
        let obj = e.as_object().unwrap();
        assert_eq!(obj.keys().count(), keys.len(), "{e}");
        assert!(keys.iter().all(|k| obj.contains_key(*k)), "{e}");
        let time = e["time"].as_str().unwrap();
        assert!(
            time.ends_with('Z') && time.len() == "2026-11-21T10:00:00.123456Z".len(),
            "{time}"
        );
    }
    let reasons: Vec<(&str, &str)> = events
        .iter()
        .map(|e| {
            (
                e["container"].as_str().unwrap_or("-"),
                e["reason"].as_str().unwrap(),
            )
        })
        .collect();
    for c in ["p1", "p2"] {
        let pos = |r| {
            reasons
                .iter()
                .position(|x| *x == (c, r))
                .unwrap_or_else(|| panic!("{c} {r}: {reasons:?}"))
        };
        assert!(
            pos("Pulled") < pos("Created")
                && pos("Created") < pos("Started")
                && pos("Started") < pos("Exited")
        );
    }
    let exited = events.iter().find(|e| e["reason"] == "Exited").unwrap();
    assert_eq!(
        (
            exited["exitCode"].as_i64(),
            exited["message"].as_str(),
            exited["role"].as_str()
        ),
        (Some(0), Some("Completed"), Some("regular"))
    );
    let phases: Vec<&str> = events
        .iter()
        .filter(|e| e["reason"] == "PhaseChanged")
        .map(|e| e["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases.first(), Some(&"Pending"));
    assert_eq!(phases.last(), Some(&"Succeeded"));
    assert_eq!(events.last().unwrap()["reason"], "Deleted");
    assert!(events.last().unwrap()["container"].is_null());

    let status: Value = serde_json::from_str(&std::fs::read_to_string(&st).unwrap()).unwrap();
    assert_eq!(status["phase"], "Succeeded");
    let cs = status["containerStatuses"].as_array().unwrap();
    assert_eq!(cs.len(), 2);
    assert_eq!(cs[0]["state"]["terminated"]["reason"], "Completed");
    assert_eq!(cs[0]["restartCount"], 0);
    let types: Vec<&str> = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    for t in [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
    ] {
        assert!(types.contains(&t), "{types:?}");
    }
}

/// `wasmpod run` of a registry image: pulled from a private registry on loopback, spoken to
/// over HTTP as `--insecure-registry` allows, with the credentials of `--registry-config`.
#[test]
fn run_pulls_a_registry_image() {
    let registry = wasmpod_tests::registry::Registry::start(true);
    let wasm = std::fs::read(wasmpod_tests::guests::AGNHOST_P1).unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(registry.push_wasm("hello:1.0", &wasm));
    let dir = Dir::new();
    let pod = PodYaml::new("pulled")
        .never()
        .container(&format!(
            r#"{{ name: c, image: "{}/hello:1.0", args: [print, from-a-registry] }}"#,
            registry.host
        ))
        .build();
    let pod = dir.write("pod.yaml", &pod);
    let config = dir.write(
        "docker.json",
        &serde_json::json!({"auths": {registry.host.as_str(): {"username": "puller", "password": "s3cret"}}})
            .to_string(),
    );
    let out = dir.run(
        &pod,
        &[
            "--insecure-registry",
            &registry.host,
            "--registry-config",
            config.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "[c] from-a-registry\n");
}

/// A pod of local `.wasm` files makes no registry client and reads no credentials: a registry
/// config that is not JSON does not stop it (a pull would fail on it, naming the file).
#[test]
fn a_local_pod_reads_no_registry_config() {
    let dir = Dir::new();
    let pod = dir.write(
        "pod.yaml",
        &PodYaml::new("local")
            .never()
            .container(r#"{ name: c, image: "{p1}", args: [print, local] }"#)
            .build(),
    );
    let config = dir.write("docker.json", "{ not json");
    let out = dir.run(&pod, &["--registry-config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "[c] local\n");
}

/// `--log-format json`: wasmpod's own diagnostics are one JSON object a line (time, level,
/// target, message), and the containers' output is printed as ever.
#[test]
fn diagnostics_as_json_lines() {
    let dir = Dir::new();
    let pod = dir.write(
        "pod.yaml",
        &PodYaml::new("json")
            .never()
            .container(r#"{ name: c, image: "{p1}", args: [print, plain] }"#)
            .build(),
    );
    let out = dir
        .run_command(&pod, &["--log-format", "json"])
        .env("WASMPOD_LOG", "debug")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "[c] plain\n");
    let stderr = text(&out.stderr);
    assert!(stderr.lines().count() > 0, "no diagnostics at debug level");
    for line in stderr.lines() {
        let object: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        for field in ["timestamp", "level", "target", "message"] {
            assert!(object[field].is_string(), "{field} missing: {line}");
        }
    }
}

/// A pod exported from a cluster (`kubectl get pod -o yaml`) runs as it is: the
/// `kube-api-access-*` volume the API server injected is mounted with the namespace but without
/// the token and CA the cluster kept, and a `FailedMount` warning says so.
#[cfg(unix)]
#[test]
fn an_exported_pod_runs_without_its_clusters_token_and_ca() {
    use std::io::BufRead;
    let dir = Dir::new();
    let exported = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/manifests/exported-from-cluster.yaml"
    ))
    .unwrap();
    // The pod alone: the token Secret and the CA's ConfigMap stay in the cluster.
    let pod = dir.write("pod.yaml", exported.split("\n---\n").next().unwrap());
    let mut child = dir
        .run_command(&pod, &["--events", "-"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let (mut namespace, mut warning) = (false, None);
    // Bounded as a whole: the pod prints a line a second (its readiness probe's requests).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut seen = Vec::new();
    while !(namespace && warning.is_some()) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = rx.recv_timeout(left).unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("the exported pod printed no namespace and FailedMount warning: {seen:#?}")
        });
        seen.push(line.clone());
        namespace |= line == "[web] default";
        if let Ok(event) = serde_json::from_str::<Value>(&line)
            && event["reason"] == "FailedMount"
        {
            warning = Some(event);
        }
    }
    sigterm(&child);
    child.wait().unwrap();
    let warning = warning.unwrap();
    assert_eq!(warning["type"], "Warning");
    let message = warning["message"].as_str().unwrap();
    for part in [
        "kube-api-access-8xq2d",
        "token",
        "ca.crt",
        "kube-root-ca.crt",
    ] {
        assert!(message.contains(part), "{message}");
    }
}

#[test]
fn failed_pod_exits_1() {
    let dir = Dir::new();
    let pod = dir.write(
        "pod.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: { name: fails }
spec:
  restartPolicy: Never
  containers:
  - { name: c, image: "{p1}", args: [exit, "7"] }
"#,
    );
    let st = dir.path("status.json");
    let out = dir.run(&pod, &["--status", st.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let status: Value = serde_json::from_str(&std::fs::read_to_string(&st).unwrap()).unwrap();
    assert_eq!(status["phase"], "Failed");
    assert_eq!(
        status["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        7
    );
}

#[test]
fn events_to_stdout_and_relative_images() {
    let dir = Dir::new();
    std::fs::copy(wasmpod_tests::guests::AGNHOST_P1, dir.path("guest.wasm")).unwrap();
    let pod = dir.write(
        "pod.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: { name: rel }
spec:
  restartPolicy: Never
  containers:
  - { name: c, image: guest.wasm, args: [print, hi] }
"#,
    );
    let out = dir.run(&pod, &["--events", "-"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let json_lines = stdout.lines().filter(|l| l.starts_with('{')).count();
    assert!(json_lines >= 6, "{stdout}");
    assert!(stdout.lines().any(|l| l == "[c] hi"), "{stdout}");
    // events and output share stdout, line by line, never within a line
    for line in stdout.lines() {
        assert!(
            line == "[c] hi" || serde_json::from_str::<Value>(line).is_ok(),
            "mixed line: {line}"
        );
    }
}

/// `--publish` carries host connections into the pod; a taken host port or a malformed value is
/// bad input (exit 2) that names the option.
#[cfg(unix)]
#[test]
fn publish_reaches_the_pod_and_a_taken_port_is_an_error() {
    use std::io::{Read, Write};
    let dir = Dir::new();
    let pod = dir.write(
        "pod.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: { name: web }
spec:
  containers:
  - { name: server, image: "{p2}", args: [echo-server, "0.0.0.0:8080"] }
"#,
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = dir.run(&pod, &["--publish", &format!("{port}:8080")]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "--publish {port}:8080: cannot listen on 127.0.0.1:{port}"
        )),
        "{err}"
    );
    let out = dir.run(&pod, &["--publish", "80"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--publish"),
        "{}",
        text(&out.stderr)
    );

    drop(taken);
    let publish = format!("127.0.0.1:{port}:8080");
    let (mut child, line) = dir.spawn(&pod, &["--publish", &publish, "--egress", "deny"]);
    assert_eq!(line.trim(), "[server] listening 0.0.0.0:8080");
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"through the host").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert_eq!(reply, "through the host");
    sigterm(&child);
    assert_eq!(child.wait().unwrap().code(), Some(1));
}

/// A node whose address space is small runs compact, and runs the hello pod; a container that
/// cannot be created even there (its module declares a 2.5 GiB memory, the process may map 1 GiB)
/// is a `StartError`, not a trap, and `wasmpod run` says why on stderr.
#[cfg(unix)]
#[test]
fn a_container_that_cannot_be_created_is_reported() {
    let dir = Dir::new();
    let run = |pod: &Path, status: &Path| {
        Command::new("timeout")
            .args(["60", "prlimit", "--as=1073741824"])
            .arg(env!("CARGO_BIN_EXE_wasmpod"))
            .arg("run")
            .arg("--state-dir")
            .arg(dir.path("state"))
            .arg("--cache-dir")
            .arg(wasmpod_tests::shared_cache())
            .arg("--status")
            .arg(status)
            .arg(pod)
            .output()
            .unwrap()
    };
    let hello = dir.write(
        "hello.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: { name: hello }
spec:
  restartPolicy: Never
  containers:
  - { name: c, image: "{p1}", args: [print, hello] }
"#,
    );
    let out = run(&hello, &dir.path("hello.json"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "[c] hello\n");

    std::fs::write(
        dir.path("big.wasm"),
        wat::parse_str(r#"(module (memory 40000) (func (export "_start")))"#).unwrap(),
    )
    .unwrap();
    let big = dir.write(
        "big.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: { name: cramped }
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: big.wasm
    resources: { limits: { memory: 3Gi } }
"#,
    );
    let st = dir.path("status.json");
    let out = run(&big, &st);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let status: Value = serde_json::from_str(&std::fs::read_to_string(&st).unwrap()).unwrap();
    let terminated = &status["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(terminated["reason"], "StartError", "{status}");
    assert_eq!(terminated["exitCode"], 128, "{status}");
    assert!(
        stderr.contains("ended StartError (exit code 128): cannot create the container's instance"),
        "{stderr}"
    );
}

/// A pod whose requests are more than the whole node has would wait Pending forever: `run`
/// says why and exits 2 at once, without starting it.
#[test]
fn a_pod_that_can_never_fit_is_bad_input() {
    let dir = Dir::new();
    let pod = dir.pod(
        &PodYaml::new("huge")
            .container(r#"{ name: c, image: "{p1}", args: [print, never], resources: { requests: { memory: 100Ti } } }"#),
    );
    let out = dir.run(&pod, &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("pod.yaml: 0/1 nodes are available: 1 Insufficient memory.")
            && stderr.contains("can never be scheduled"),
        "{stderr}"
    );
    assert_eq!(text(&out.stdout), "", "nothing ran");
}

/// Output paths that cannot be written are bad input found before the pod starts: nothing runs
/// and nothing is left behind.
#[test]
fn unwritable_outputs_are_refused_before_the_pod_starts() {
    let dir = Dir::new();
    let pod = dir.pod(
        &PodYaml::new("out")
            .never()
            .spec("volumes: [ { name: v, emptyDir: {} } ]")
            .container(r#"{ name: c, image: "{p1}", args: [print, ran], volumeMounts: [ { name: v, mountPath: /v } ] }"#),
    );
    let nowhere = dir.path("no/such/dir/file.json");
    for option in ["--events", "--status"] {
        let out = dir.run(&pod, &[option, nowhere.to_str().unwrap()]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{option}: {}",
            text(&out.stderr)
        );
        assert!(text(&out.stderr).contains("cannot create"), "{option}");
        assert_eq!(text(&out.stdout), "", "{option}: nothing ran");
        assert_eq!(dir.pods_started(), 0, "{option}");
        let volumes = std::fs::read_dir(dir.path("state").join("pods"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(volumes, 0, "{option}: no volume left behind");
    }
}

/// `run` ends when its pod does even if nobody reads its stdout (container output and the event
/// stream both going there): the lines it could not print are in the log.
#[cfg(unix)]
#[test]
fn run_does_not_hang_when_nobody_reads_its_stdout() {
    let dir = Dir::new();
    let pod = dir.pod(&PodYaml::new("flood").never().container(&container_yaml(
        "c",
        "{p1}",
        r#"[flood, "200000", print, done]"#,
    )));
    let mut child = dir
        .run_command(&pod, &["--events", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Hold the pipe open, unread.
    let _stdout = child.stdout.take();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("wasmpod run hangs on a stdout nobody reads");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    let log = std::fs::read_to_string(dir.log_dir("c").join("0.log")).unwrap();
    assert!(log.ends_with(" stdout F done\n"), "the log has every line");
}

/// Numbers at the edge of their types (grace periods, deadlines, backoff options) are held, not
/// overflowed: the pod runs and is deleted, and `run` reports it and exits.
#[test]
fn huge_numbers_do_not_break_run() {
    let dir = Dir::new();
    let pod = dir.write(
        "pod.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: { name: huge }
spec:
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 9223372036854775807
  activeDeadlineSeconds: 2147483647
  containers:
  - name: c
    image: "{p1}"
    args: [print, fine]
    livenessProbe: { exec: { command: [liveness] }, terminationGracePeriodSeconds: 9223372036854775807 }
"#,
    );
    let huge = "9000000000000000000s";
    let out = dir.run(
        &pod,
        &[
            "--events",
            "-",
            "--backoff-initial",
            huge,
            "--backoff-max",
            huge,
            "--backoff-reset",
            huge,
        ],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("[c] fine"), "{stdout}");
    assert!(stdout.contains(r#""reason":"Deleted""#), "{stdout}");
}

/// `--container-log-max-size` and `--container-log-max-files` bound a container's log files.
#[test]
fn log_rotation_options() {
    let dir = Dir::new();
    let pod = dir.pod(&PodYaml::new("rotated").never().container(&container_yaml(
        "c",
        "{p1}",
        r#"[flood, "5000", print, done]"#,
    )));
    let options = [
        "--container-log-max-size",
        "64Ki",
        "--container-log-max-files",
        "2",
    ];
    let out = dir.run(&pod, &options);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let files: Vec<_> = std::fs::read_dir(dir.log_dir("c"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    for f in &files {
        assert!(std::fs::metadata(f).unwrap().len() <= 64 * 1024, "{f:?}");
    }
    let bad = dir.run(&pod, &["--container-log-max-size", "lots"]);
    assert_eq!(bad.status.code(), Some(2));
}

/// The pod `kubectl run demo --image=... --restart=Never --dry-run=client -o yaml` prints runs
/// as it is (server-set fields and `status` accepted, `dnsPolicy: ClusterFirst` honoured).
#[test]
fn a_pod_made_by_kubectl_run_runs() {
    let dir = Dir::new();
    let pod = dir.write(
        "demo.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  creationTimestamp: null
  labels:
    run: demo
  name: demo
spec:
  containers:
  - image: "{p1}"
    name: demo
    resources: {}
  dnsPolicy: ClusterFirst
  restartPolicy: Never
status: {}
"#,
    );
    let validate = dir.wasmpod().arg("validate").arg(&pod).output().unwrap();
    assert_eq!(
        text(&validate.stdout),
        "valid\n",
        "{}",
        text(&validate.stderr)
    );
    let out = dir.run(&pod, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A wasm pod as runwasi's and SpinKube's docs write one (runtime class, pull policy, a
/// restricted security context) runs as it is.
#[test]
fn a_pod_for_a_wasm_runtime_class_runs() {
    let dir = Dir::new();
    let pod = dir.write(
        "wasi-demo.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: wasi-demo
  labels: { app: wasi-demo }
spec:
  runtimeClassName: wasmtime-spin-v2
  restartPolicy: Never
  securityContext: { runAsNonRoot: true, seccompProfile: { type: RuntimeDefault } }
  containers:
  - name: demo
    image: "{p1}"
    imagePullPolicy: IfNotPresent
    args: [print, hello]
    securityContext:
      allowPrivilegeEscalation: false
      capabilities: { drop: [ALL] }
      readOnlyRootFilesystem: true
      runAsNonRoot: true
"#,
    );
    let out = dir.run(&pod, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "[demo] hello\n");
}

/// `--node-labels` give the node labels a pod's `nodeSelector` needs; without them the pod can
/// never be scheduled, which `run` says at once (exit 2).
#[test]
fn node_labels_and_node_selectors() {
    let dir = Dir::new();
    let pod = dir.pod(
        &PodYaml::new("picky")
            .never()
            .spec("nodeSelector: { disk: ssd }")
            .container(&container_yaml("c", "{p1}", "[print, ran]")),
    );
    let out = dir.run(&pod, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("didn't match Pod's node affinity/selector"),
        "{}",
        text(&out.stderr)
    );
    let out = dir.run(&pod, &["--node-labels", "disk=ssd,zone=a"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "[c] ran\n");
}

/// `--register-with-taints` taints the node: a pod that does not tolerate the taint can never
/// run here (exit 2); one that does runs.
#[test]
fn taints_from_the_command_line() {
    let dir = Dir::new();
    let pod = |name: &str, spec: &str| {
        dir.write(
            &format!("{name}.yaml"),
            &PodYaml::new(name)
                .never()
                .spec(spec)
                .container(&container_yaml("c", "{p1}", "[print, ran]"))
                .build(),
        )
    };
    let taint = ["--register-with-taints", "dedicated=wasm:NoSchedule"];
    let out = dir.run(&pod("plain", "dnsPolicy: ClusterFirst"), &taint);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("node(s) had untolerated taint {dedicated: wasm}"),
        "{}",
        text(&out.stderr)
    );
    let tolerant = pod(
        "tolerant",
        "tolerations: [ { key: dedicated, value: wasm, effect: NoSchedule } ]",
    );
    let out = dir.run(&tolerant, &taint);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let bad = dir.run(
        &tolerant,
        &["--register-with-taints", "dedicated=wasm:Sometimes"],
    );
    assert_eq!(bad.status.code(), Some(2));
}

/// `wasmpod run`'s stdin goes to the pod's one container with `stdin: true`, which reads its
/// end as end of file; two containers asking for it are refused, naming the field.
#[test]
fn run_connects_its_stdin_to_the_stdin_container() {
    use std::io::Write as _;
    let dir = Dir::new();
    let pod = dir.pod(
        &PodYaml::new("interactive")
            .never()
            .container(r#"{ name: quiet, image: "{p1}", args: [stdin] }"#)
            .container(r#"{ name: c, image: "{p2}", args: [stdin], stdin: true }"#),
    );
    let mut child = dir.run_piped(&pod);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"first line\nsecond line\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for line in [
        "[c] read: first line",
        "[c] read: second line",
        "[c] stdin ended after 2 lines",
        // The container without `stdin: true` read an empty stdin.
        "[quiet] stdin ended after 0 lines",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "{line:?} missing:\n{stdout}"
        );
    }

    let two = dir.write(
        "two.yaml",
        &PodYaml::new("two")
            .container(r#"{ name: a, image: "{p1}", stdin: true }"#)
            .container(r#"{ name: b, image: "{p1}", stdin: true }"#)
            .build(),
    );
    let out = dir.run(&two, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains(
            "spec.containers[1].stdin: wasmpod run connects its stdin to one container, and spec.containers[0].stdin asks for it too"
        ),
        "{}",
        text(&out.stderr)
    );
}

/// wasmpod's own messages on stderr (here its debug log of each event) never continue a
/// container's unfinished stderr line: the line is ended first, and what the container writes
/// next starts a line of its own with its prefix.
#[test]
fn wasmpods_messages_end_a_containers_open_stderr_line() {
    let dir = Dir::new();
    // The deadline's events come while the guest's line is open.
    let pod = dir.pod(
        &PodYaml::new("progress")
            .never()
            .spec("activeDeadlineSeconds: 1")
            .spec("terminationGracePeriodSeconds: 0")
            .container(
                r#"{ name: c, image: "{p1}", args: [eprompt, "working... ", sleep, "5000"] }"#,
            ),
    );
    let out = dir
        .run_command(&pod, &[])
        .env("WASMPOD_LOG", "wasmpod=debug")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    let prompt = lines.iter().position(|l| l.starts_with("[c] working..."));
    let prompt = prompt.unwrap_or_else(|| panic!("no prompt line: {stderr}"));
    assert_eq!(lines[prompt], "[c] working... ", "{stderr}");
    // The event's message is a line of wasmpod's own after it.
    assert!(
        lines[prompt + 1..]
            .iter()
            .any(|l| l.contains("DEBUG") && l.contains("deadline")),
        "{stderr}"
    );
}

/// A prompt the guest flushes without ending its line shows on `wasmpod run`'s stdout before
/// the guest reads its answer, and the answer's output continues that line (the WASI
/// testsuite's `cli-stdout-flush` asks the same of `wasmtime run`).
#[test]
fn a_flushed_prompt_shows_before_the_guest_reads_stdin() {
    use std::io::{Read as _, Write as _};
    let dir = Dir::new();
    let pod =
        dir.pod(&PodYaml::new("prompt").never().container(
            r#"{ name: c, image: "{p2}", args: [prompt, "name? ", stdin], stdin: true }"#,
        ));
    let mut child = dir.run_piped(&pod);
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0; 256];
        while let Ok(n @ 1..) = stdout.read(&mut buf) {
            if tx.send(buf[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    // Nothing is written to stdin until the prompt shows: a prompt held back until its line
    // ends would time out here.
    while !seen.ends_with(b"[c] name? ") {
        let bytes = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no prompt; stdout so far: {:?}", text(&seen)));
        seen.extend(bytes);
    }
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"bob\n").unwrap();
    drop(stdin);
    seen.extend(rx.iter().flatten());
    assert!(child.wait().unwrap().success());
    assert_eq!(
        text(&seen),
        "[c] name? read: bob\n[c] stdin ended after 1 lines\n"
    );
}

/// Guests live in the `wasmpod` process, so a memory cgroup's limit over it (a systemd unit's
/// `MemoryMax`, a container's limit) is all the node has: its allocatable memory, and the most
/// its guests may hold. Under a 256 MiB limit the hello pod runs; a pod requesting 512 MiB is
/// refused as one that can never be scheduled, naming the 256 MiB; a container allowed 1 GiB
/// that grows to 400 MiB a megabyte at a time is evicted as the guests cross the node's
/// threshold (where what is left in the cgroup beside the process falls under 25.6 MiB, a
/// tenth of it: before the cap), and one that grows its memory by 300 MiB at once (to touch it
/// all) ends
/// `OOMKilled`, its growth refused: past the cgroup's limit, the kernel would end the process
/// with every pod in it.
#[cfg(target_os = "linux")]
#[test]
fn a_memory_cgroup_limit_is_the_nodes_allocatable_memory() {
    let dir = Dir::new();
    let cgroup =
        wasmpod_tests::limit_memory(&format!("wasmpod-cli-{}", std::process::id()), 256 << 20);
    let run = |pod: &Path| {
        // The shell joins the cgroup, then becomes `wasmpod run`.
        let run = dir.run_command(pod, &[]);
        Command::new("sh")
            .arg("-c")
            .arg("echo $$ > \"$0/cgroup.procs\" && shift && exec \"$@\"")
            .arg(&cgroup)
            .arg("--")
            .arg(run.get_program())
            .args(run.get_args())
            .envs(run.get_envs().filter_map(|(k, v)| Some((k, v?))))
            .output()
            .unwrap()
    };
    let pod = |name: &str, args: &str, resources: &str| {
        let yaml = PodYaml::new(name)
            .never()
            .container(&format!(
                r#"{{ name: c, image: "{{p1}}", args: {args}, resources: {resources} }}"#
            ))
            .build();
        dir.write(&format!("{name}.yaml"), &yaml)
    };
    let out = run(&pod(
        "fits",
        "[print, hello]",
        "{ requests: { memory: 64Mi } }",
    ));
    let fits = (out.status.code(), text(&out.stdout), text(&out.stderr));
    let out = run(&pod(
        "too-big",
        "[print, hello]",
        "{ requests: { memory: 512Mi } }",
    ));
    let refused = (out.status.code(), text(&out.stderr));
    let out = run(&pod(
        "hog",
        r#"[alloc, "400", print, unreachable]"#,
        "{ requests: { memory: 64Mi }, limits: { memory: 1Gi } }",
    ));
    let hog = (out.status, text(&out.stdout), text(&out.stderr));
    std::fs::write(
        dir.path("leap.wasm"),
        wat::parse_str(
            r#"(module (memory 1)
                 (func (export "_start") (local $p i32)
                   (if (i32.lt_s (memory.grow (i32.const 4800)) (i32.const 0)) (then unreachable))
                   (block $done (loop $touch
                     (br_if $done (i32.ge_u (local.get $p) (i32.const 314572800)))
                     (i32.store8 (local.get $p) (i32.const 1))
                     (local.set $p (i32.add (local.get $p) (i32.const 4096)))
                     (br $touch)))))"#,
        )
        .unwrap(),
    )
    .unwrap();
    let leap = dir.write(
        "leap.yaml",
        &PodYaml::new("leap")
            .never()
            .container(
                "{ name: c, image: leap.wasm, resources: { requests: { memory: 64Mi }, limits: { memory: 1Gi } } }",
            )
            .build(),
    );
    let out = run(&leap);
    let leap = (out.status, text(&out.stderr));
    let _ = std::fs::remove_dir(&cgroup);
    assert_eq!(hog.0.code(), Some(1), "{:?} {}", hog.0, hog.2);
    assert!(!hog.1.contains("unreachable"), "{}", hog.1);
    assert!(
        hog.2.contains("The node was low on resource: memory"),
        "{}",
        hog.2
    );
    assert_eq!(leap.0.code(), Some(1), "{:?} {}", leap.0, leap.1);
    assert!(
        leap.1.contains("ended OOMKilled (exit code 137)"),
        "{}",
        leap.1
    );
    assert_eq!(
        (fits.0, fits.1.as_str()),
        (Some(0), "[c] hello\n"),
        "{}",
        fits.2
    );
    assert_ne!(refused.0, Some(0));
    assert!(
        refused
            .1
            .contains("requests 536870912 bytes and the node has 268435456 allocatable"),
        "{}",
        refused.1
    );
}

/// `hostNetwork: true` is bad input for a node that does not allow it (exit 2, the option
/// named), and runs with `--allow-host-network`.
#[test]
fn a_host_network_pod_runs_only_where_allowed() {
    let dir = Dir::new();
    let pod = dir.pod(
        &PodYaml::new("host")
            .never()
            .spec("hostNetwork: true")
            .container(r#"{ name: c, image: "{p2}", args: [print, hi] }"#),
    );
    let out = dir.run(&pod, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("spec.hostNetwork") && stderr.contains("--allow-host-network"),
        "{stderr}"
    );
    let out = dir.run(&pod, &["--allow-host-network"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("hi"), "{}", text(&out.stdout));
}
