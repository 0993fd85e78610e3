//! `wasmpod run` and `wasmpod validate` as a user runs them: output, exit codes, the event
//! stream, the status file, the compile cache, signals, and every kind of bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmpod_tests::{PodYaml, container_yaml, fill};

struct Dir {
    tmp: tempfile::TempDir,
}

impl Dir {
    fn new() -> Dir {
        wasmpod_tests::warm_shared_cache();
        Dir {
            tmp: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, fill(text)).unwrap();
        path
    }

    /// The log directory of container `c` of the one pod that ran.
    fn log_dir(&self, container: &str) -> PathBuf {
        let logs = self.path("state").join("logs");
        let pod = std::fs::read_dir(logs)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        pod.join(container)
    }

    fn wasmpod(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_wasmpod"));
        cmd.env("XDG_CACHE_HOME", self.path("xdg-cache"))
            .env("XDG_STATE_HOME", self.path("xdg-state"));
        cmd
    }

    /// `wasmpod run` on `pod` with the test's state dir, the shared compile cache and `extra`.
    fn run_command(&self, pod: &Path, extra: &[&str]) -> Command {
        let mut cmd = self.wasmpod();
        cmd.arg("run")
            .arg("--state-dir")
            .arg(self.path("state"))
            .arg("--cache-dir")
            .arg(wasmpod_tests::shared_cache())
            .args(extra)
            .arg(pod);
        cmd
    }

    fn run(&self, pod: &Path, extra: &[&str]) -> Output {
        self.run_command(pod, extra).output().unwrap()
    }

    /// Starts `wasmpod run` on `pod` and returns it once the first line of output arrived.
    #[cfg(unix)]
    fn spawn(&self, pod: &Path, extra: &[&str]) -> (std::process::Child, String) {
        let mut child = self
            .run_command(pod, extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        (child, line)
    }

    /// Pods that wrote output under the state dir (a pod that never started leaves no log).
    fn pods_started(&self) -> usize {
        std::fs::read_dir(self.path("state").join("logs"))
            .map(|d| d.count())
            .unwrap_or(0)
    }
}

#[cfg(unix)]
fn sigterm(child: &std::process::Child) {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

const HELLO: &str = r#"
apiVersion: v1
kind: Pod
metadata: { name: hello }
spec:
  restartPolicy: Never
  containers:
  - { name: p1, image: "{p1}", args: [print, "hello from p1", eprint, "to stderr"] }
  - { name: p2, image: "{p2}", args: [print, "hello from p2"] }
"#;

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

/// The second run of a module takes it from the compile cache; the `Pulled` event says which.
#[test]
fn compile_cache_is_reused() {
    let dir = Dir::new();
    let pod = dir.write("pod.yaml", HELLO);
    let cache = dir.path("cache");
    let pulled = |n: &str| {
        let ev = dir.path(n);
        let out = dir
            .wasmpod()
            .args([
                "run",
                "--cache-dir",
                cache.to_str().unwrap(),
                "--state-dir",
                dir.path("state").to_str().unwrap(),
            ])
            .args(["--events", ev.to_str().unwrap()])
            .arg(&pod)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        events(&ev)
            .into_iter()
            .filter(|e| e["reason"] == "Pulled")
            .map(|e| e["message"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let cold = pulled("cold.jsonl");
    assert!(
        cold.iter().all(|m| m.starts_with("Successfully compiled")),
        "{cold:?}"
    );
    let warm = pulled("warm.jsonl");
    assert!(
        warm.iter().all(|m| m.contains("from the compile cache")),
        "{warm:?}"
    );

    // a corrupt cache entry is recompiled, not trusted
    for entry in std::fs::read_dir(&cache).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n / 2] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
    }
    let corrupt = pulled("corrupt.jsonl");
    assert!(
        corrupt
            .iter()
            .all(|m| m.starts_with("Successfully compiled")),
        "{corrupt:?}"
    );
}

/// `wasmpod compile` makes a `.cwasm` a node runs as it is (a wasip1 module and a wasip2
/// component); an artefact made for another node is refused with what differs and how to make
/// one for this node, never loaded: another address-space mode, another wasmpod version, a file
/// that is not an artefact; a target this build has no code generator for is an error that says
/// which build has.
#[test]
fn compiled_artefacts_run_and_foreign_ones_are_refused() {
    let dir = Dir::new();
    let compile = |input: &str, output: &str, extra: &[&str]| {
        dir.wasmpod()
            .arg("compile")
            .args(extra)
            .arg(fill(input))
            .arg("-o")
            .arg(dir.path(output))
            .output()
            .unwrap()
    };
    let run = |image: &str| {
        let pod = dir.write(
            "pod.yaml",
            &format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{ name: pre }}\nspec:\n  restartPolicy: Never\n  \
                 containers:\n  - {{ name: c, image: {image}, args: [print, hi] }}\n"
            ),
        );
        let events = dir.path("events.jsonl");
        let out = dir
            .wasmpod()
            .args(["run", "--state-dir", dir.path("state").to_str().unwrap()])
            .args(["--events", events.to_str().unwrap()])
            .arg(&pod)
            .output()
            .unwrap();
        (out, events)
    };
    for (guest, artefact) in [("{p1}", "p1.cwasm"), ("{p2}", "p2.cwasm")] {
        let out = compile(guest, artefact, &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let (out, events) = run(artefact);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "[c] hi\n");
        let pulled: Vec<Value> = events_of(&events, "Pulled");
        assert!(
            pulled[0]["message"]
                .as_str()
                .unwrap()
                .starts_with("Loaded precompiled module"),
            "{pulled:?}"
        );
    }

    // Made for a node with little address space: bounds checks this node's code does not have.
    let out = compile("{p1}", "compact.cwasm", &["--compact"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (out, _) = run("compact.cwasm");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("was precompiled for another node")
            && stderr.contains("memory reservation")
            && stderr.contains("wasmpod compile --target x86_64-unknown-linux-gnu --reserved"),
        "{stderr}"
    );

    // Another wasmpod's artefact (its version string changed, as another release writes it).
    let mut bytes = std::fs::read(dir.path("p1.cwasm")).unwrap();
    let version = format!("wasmpod {} on", env!("CARGO_PKG_VERSION"));
    let at = bytes
        .windows(version.len())
        .position(|w| w == version.as_bytes())
        .expect("the artefact names its wasmpod");
    bytes[at + 8] = b'9';
    std::fs::write(dir.path("other.cwasm"), bytes).unwrap();
    let (out, _) = run("other.cwasm");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("was precompiled for another node") && stderr.contains("version"),
        "{stderr}"
    );

    // An ELF file that is no artefact.
    std::fs::copy("/bin/true", dir.path("true.cwasm")).unwrap();
    let (out, _) = run("true.cwasm");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("true.cwasm"), "{stderr}");

    #[cfg(not(feature = "cross"))]
    {
        let out = compile(
            "{p1}",
            "arm.cwasm",
            &["--target", "aarch64-unknown-linux-gnu"],
        );
        assert_eq!(out.status.code(), Some(2));
        assert!(
            text(&out.stderr).contains("build it with `--features cross`"),
            "{}",
            text(&out.stderr)
        );
    }
}

fn events_of(path: &Path, reason: &str) -> Vec<Value> {
    events(path)
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
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

/// Ctrl-C (SIGTERM here) deletes the pod gracefully: containers that do not handle TERM stop at
/// once, and wasmpod exits with the pod's final phase.
#[cfg(unix)]
#[test]
fn sigterm_deletes_the_pod() {
    let dir = Dir::new();
    let pod = dir.write(
        "pod.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: { name: forever }
spec:
  containers:
  - { name: c, image: "{p1}", args: [print, started, sleep, "100000"] }
"#,
    );
    let ev = dir.path("events.jsonl");
    let (mut child, line) = dir.spawn(&pod, &["--events", ev.to_str().unwrap()]);
    assert_eq!(line.trim(), "[c] started");
    let sent = Instant::now();
    sigterm(&child);
    let status = child.wait().unwrap();
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(status.code(), Some(1));
    let events = events(&ev);
    let reasons: Vec<&str> = events
        .iter()
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    let pos = |r| reasons.iter().position(|x| *x == r).unwrap();
    assert!(
        pos("Terminating") < pos("Killing")
            && pos("Killing") < pos("Exited")
            && pos("Exited") < pos("Deleted")
    );
    assert_eq!(events[pos("Exited")]["exitCode"], 143);
}

/// SIGTERM acts while nobody reads stdout: with `--events -` to a pipe that is never read (and
/// so full), the pod is deleted and wasmpod exits at once, without the output it could not
/// write (the log files have it).
#[cfg(unix)]
#[test]
fn sigterm_acts_while_stdout_is_not_read() {
    let dir = Dir::new();
    let pod = dir.write(
        "pod.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: { name: loud }
spec:
  containers:
  - { name: c, image: "{p1}", args: [print, started, flood, "20000", sleep, "100000"] }
"#,
    );
    let mut child = dir
        .run_command(&pod, &["--events", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The pipe (64 KiB) fills with the flood and stays full: nothing reads it.
    let log = dir.path("state").join("logs");
    let start = Instant::now();
    while !std::fs::read_dir(&log).is_ok_and(|mut d| d.next().is_some())
        || !std::fs::read_to_string(dir.log_dir("c").join("0.log"))
            .unwrap_or_default()
            .contains("flood line 19999")
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the pod never flooded"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let sent = Instant::now();
    sigterm(&child);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "SIGTERM did nothing while stdout was not read"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = sent.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "exited {took:?} after SIGTERM"
    );
    assert_eq!(status.code(), Some(1));
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

/// A second Ctrl-C (SIGTERM) forces the deletion: a guest that ignores TERM is killed at once
/// instead of at the end of its grace period.
#[cfg(unix)]
#[test]
fn second_signal_forces() {
    let dir = Dir::new();
    let pod = dir.write(
        "pod.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: { name: stubborn }
spec:
  terminationGracePeriodSeconds: 60
  containers:
  - { name: c, image: "{term}", args: [print, started, sleep, "100000"] }
"#,
    );
    let st = dir.path("status.json");
    let (mut child, line) = dir.spawn(&pod, &["--status", st.to_str().unwrap()]);
    assert_eq!(line.trim(), "[c] started");
    let kill = || sigterm(&child);
    let sent = Instant::now();
    kill();
    std::thread::sleep(Duration::from_millis(200));
    // (`run` creates the status file before the pod starts, and writes it at the end.)
    assert_eq!(
        std::fs::metadata(&st).unwrap().len(),
        0,
        "still in its grace period after the first signal"
    );
    kill();
    let status = child.wait().unwrap();
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(status.code(), Some(1));
    let status: Value = serde_json::from_str(&std::fs::read_to_string(&st).unwrap()).unwrap();
    assert_eq!(
        status["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        137
    );
}

#[test]
fn validate_accepts_a_good_pod() {
    let dir = Dir::new();
    let pod = dir.write("pod.yaml", HELLO);
    let out = dir.wasmpod().arg("validate").arg(&pod).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout).trim(), "valid");
}

/// Bad input: exit code 2, a message naming the file and the field, nothing started.
fn rejects(yaml: &str, expect: &[&str]) {
    let dir = Dir::new();
    std::fs::write(dir.path("not.wasm"), b"\0asn this is not wasm").unwrap();
    let component = wat::parse_str("(component)").unwrap();
    std::fs::write(dir.path("norun.wasm"), component).unwrap();
    let pod = dir.write("pod.yaml", yaml);
    for cmd in ["validate", "run"] {
        if cmd == "validate"
            && expect
                .iter()
                .any(|e| e.contains("cannot run") || e.contains("not a WebAssembly"))
        {
            continue; // validation does not load modules
        }
        let out = if cmd == "run" {
            dir.run(&pod, &[])
        } else {
            dir.wasmpod().arg("validate").arg(&pod).output().unwrap()
        };
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {stderr}");
        assert!(
            stderr.contains(&pod.display().to_string()),
            "{cmd}: names the file: {stderr}"
        );
        for e in expect {
            assert!(stderr.contains(e), "{cmd}: expected {e:?} in: {stderr}");
        }
        assert_eq!(dir.pods_started(), 0, "{cmd}: nothing started");
    }
}

#[test]
fn rejects_text_that_is_not_yaml() {
    rejects(
        "apiVersion: v1\nkind: Pod\n  metadata: [unclosed\n",
        &["not valid YAML"],
    );
}

#[test]
fn rejects_yaml_that_is_not_a_pod() {
    rejects(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: { name: x }\n",
        &["not a Pod", "Deployment"],
    );
    rejects("- just\n- a list\n", &["not a Kubernetes object"]);
}

#[test]
fn rejects_missing_containers() {
    rejects(
        "apiVersion: v1\nkind: Pod\nmetadata: { name: x }\nspec: {}\n",
        &["spec.containers: required value"],
    );
}

#[test]
fn rejects_duplicate_container_names() {
    rejects(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: dup }
spec:
  initContainers: [ { name: a, image: "{p1}" } ]
  containers: [ { name: a, image: "{p1}" }, { name: b, image: "{p1}" }, { name: b, image: "{p1}" } ]
"#,
        &[
            "spec.containers[0].name: duplicate value \"a\"",
            "spec.containers[2].name: duplicate value \"b\"",
        ],
    );
}

#[test]
fn rejects_invalid_names() {
    rejects(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: Bad_Name }
spec:
  volumes: [ { name: "V!", emptyDir: {} } ]
  containers: [ { name: "-x", image: "{p1}" } ]
"#,
        &[
            "metadata.name: invalid value \"Bad_Name\"",
            "spec.volumes[0].name: invalid value",
            "spec.containers[0].name: invalid value \"-x\"",
        ],
    );
}

#[test]
fn rejects_unsupported_and_unknown_fields_all_at_once() {
    rejects(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: fields }
spec:
  hostNetwork: true
  containers:
  - name: a
    image: "{p1}"
    securityContext: { privileged: true }
    imagee: typo
  - { name: b, image: "{p1}", stdin: true, tty: true }
"#,
        &[
            "spec.hostNetwork: not supported by wasmpod",
            "spec.containers[0].securityContext.privileged: not supported by wasmpod: a wasm guest cannot be given",
            "spec.containers[0].imagee: unknown field",
            "spec.containers[1].tty: not supported by wasmpod",
        ],
    );
}

#[test]
fn rejects_a_missing_wasm_file() {
    rejects(
        "apiVersion: v1\nkind: Pod\nmetadata: { name: m }\nspec:\n  containers: [ { name: a, image: nowhere.wasm } ]\n",
        &["spec.containers[0].image", "nowhere.wasm does not exist"],
    );
}

#[test]
fn rejects_a_file_that_is_not_wasm() {
    rejects(
        "apiVersion: v1\nkind: Pod\nmetadata: { name: m }\nspec:\n  containers: [ { name: a, image: not.wasm } ]\n",
        &[
            "spec.containers[0].image",
            "not a WebAssembly module or component",
        ],
    );
}

#[test]
fn rejects_a_module_with_an_unknown_import() {
    rejects(
        "apiVersion: v1\nkind: Pod\nmetadata: { name: m }\nspec:\n  containers: [ { name: a, image: \"{missing-import}\" } ]\n",
        &[
            "spec.containers[0].image",
            "cannot run in wasmpod",
            "nosuch::frobnicate",
        ],
    );
}

#[test]
fn rejects_a_component_without_wasi_cli_run() {
    rejects(
        "apiVersion: v1\nkind: Pod\nmetadata: { name: m }\nspec:\n  containers: [ { name: a, image: norun.wasm } ]\n",
        &[
            "spec.containers[0].image",
            "cannot run in wasmpod",
            "wasi:cli/run",
        ],
    );
}

/// `--config FILE` supplies ConfigMaps and Secrets; without it the reference is an error, and a
/// config file holding something else is an error naming that file.
#[test]
fn config_files() {
    let dir = Dir::new();
    let pod = dir.write(
        "pod.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: { name: cfg }
spec:
  restartPolicy: Never
  volumes: [ { name: c, configMap: { name: settings } } ]
  containers:
  - { name: app, image: "{p1}", args: [cat, /etc/app/mode, env, TOKEN], volumeMounts: [ { name: c, mountPath: /etc/app } ], env: [ { name: TOKEN, valueFrom: { secretKeyRef: { name: api, key: token } } } ] }
"#,
    );
    let config = dir.write(
        "config.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: settings }\ndata: { mode: fast }\n---\napiVersion: v1\nkind: Secret\nmetadata: { name: api }\nstringData: { token: abc }\n",
    );
    let out = dir.wasmpod().arg("validate").arg(&pod).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains(r#"spec.volumes[0].configMap.name: not found: no configmap "settings""#),
        "{err}"
    );
    let out = dir
        .wasmpod()
        .args(["validate", "--config"])
        .arg(&config)
        .arg(&pod)
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout).trim(), "valid", "{}", text(&out.stderr));
    let out = dir.run(&pod, &["--config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "[app] fast\n[app] TOKEN=abc\n");

    let wrong = dir.write(
        "wrong.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: { name: d }\n",
    );
    let out = dir.run(&pod, &["--config", wrong.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "{}: document 1: expected a v1 ConfigMap or Secret",
            wrong.display()
        )),
        "{err}"
    );
}

/// PriorityClasses come with the pod file or `--config` files; a pod naming an unknown class is
/// refused (exit 2), as is an invalid class.
#[test]
fn priority_classes_from_the_pod_file_and_config() {
    let dir = Dir::new();
    let pod = |class: &str| {
        format!(
            r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{ name: important }}
value: 1000
---
apiVersion: v1
kind: Pod
metadata: {{ name: prio }}
spec:
  restartPolicy: Never
  priorityClassName: {class}
  containers:
  - {{ name: c, image: "{{p1}}", args: [print, hello] }}
"#
        )
    };
    let good = dir.write("good.yaml", &pod("important"));
    let out = dir.run(&good, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "[c] hello\n");
    let validate = dir.wasmpod().arg("validate").arg(&good).output().unwrap();
    assert_eq!(text(&validate.stdout), "valid\n");

    let classes = dir.write(
        "classes.yaml",
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: other}\nvalue: 7\n",
    );
    let other = dir.write("other.yaml", &pod("other"));
    let out = dir.run(&other, &["--config", classes.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let out = dir.run(&other, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr)
            .contains("spec.priorityClassName: no PriorityClass with name other was found"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(dir.pods_started(), 2, "nothing started for the refused pod");

    let bad = dir.write(
        "bad.yaml",
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: other}\nvalue: 2000000000\n",
    );
    let out = dir.run(&other, &["--config", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("bad.yaml") && stderr.contains("document 1.value"),
        "{stderr}"
    );
}

/// A pod whose requests are more than the whole node has would wait Pending forever: `run`
/// says why and exits 2 at once, without starting it.
#[test]
fn a_pod_that_can_never_fit_is_bad_input() {
    let dir = Dir::new();
    let pod = dir.write(
        "pod.yaml",
        &PodYaml::new("huge")
            .container(r#"{ name: c, image: "{p1}", args: [print, never], resources: { requests: { memory: 100Ti } } }"#)
            .build(),
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
    let pod = dir.write(
        "pod.yaml",
        &PodYaml::new("out")
            .never()
            .spec("volumes: [ { name: v, emptyDir: {} } ]")
            .container(r#"{ name: c, image: "{p1}", args: [print, ran], volumeMounts: [ { name: v, mountPath: /v } ] }"#)
            .build(),
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
    let pod = dir.write(
        "pod.yaml",
        &PodYaml::new("flood")
            .never()
            .container(&container_yaml(
                "c",
                "{p1}",
                r#"[flood, "200000", print, done]"#,
            ))
            .build(),
    );
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
    let pod = dir.write(
        "pod.yaml",
        &PodYaml::new("rotated")
            .never()
            .container(&container_yaml(
                "c",
                "{p1}",
                r#"[flood, "5000", print, done]"#,
            ))
            .build(),
    );
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
    let pod = dir.write(
        "pod.yaml",
        &PodYaml::new("picky")
            .never()
            .spec("nodeSelector: { disk: ssd }")
            .container(&container_yaml("c", "{p1}", "[print, ran]"))
            .build(),
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
    let pod = dir.write(
        "pod.yaml",
        &wasmpod_tests::PodYaml::new("interactive")
            .never()
            .container(r#"{ name: quiet, image: "{p1}", args: [stdin] }"#)
            .container(r#"{ name: c, image: "{p2}", args: [stdin], stdin: true }"#)
            .build(),
    );
    let mut child = dir
        .run_command(&pod, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
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
        &wasmpod_tests::PodYaml::new("two")
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
