//! Support for wasmpod's integration tests: pods written as YAML with the test guests' paths
//! filled in, run on a node with short backoff, and their event timelines.
//!
//! In pod YAML, `{p1}` and `{p2}` stand for the `agnhost` guest built for wasip1 and wasip2, and
//! `{term}` for the wasip1 `agnhost` that imports the termination interface, `{probed}` for the
//! wasip2 component that imports `termination` and exports `probes` and `hooks`, `{http}` for the
//! `wasi:http/proxy` handler component, `{p3}` for the WASI 0.3 command and `{p3-http}` for the WASI 0.3 HTTP handler.

pub mod containerd;
pub mod cosign;
pub mod registry;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;
use wasmpod::k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
use wasmpod::{BackoffOptions, Event, Node, NodeOptions, PodHandle, PodOptions, PodSpec, Reason};

pub use wasmpod_test_artifacts as guests;

/// The backoff the tests run with: 100 ms doubling to 800 ms, reset after 5 s.
pub const FAST_BACKOFF: BackoffOptions = BackoffOptions {
    initial: Duration::from_millis(100),
    max: Duration::from_millis(800),
    reset: Duration::from_secs(5),
};

/// A compile cache shared by every test process, so each guest compiles once per machine.
pub fn shared_cache() -> PathBuf {
    std::env::temp_dir().join("wasmpod-test-cache")
}

/// Substitutes the guests' paths into pod YAML.
pub fn fill(yaml: &str) -> String {
    yaml.replace("{p1}", guests::AGNHOST_P1)
        .replace("{p2}", guests::AGNHOST_P2)
        .replace("{term}", guests::AGNHOST_TERM_P1)
        .replace("{missing-import}", guests::IMPORTS_MISSING_P1)
        .replace("{probed}", guests::PROBED_P2)
        .replace("{http}", guests::HTTP_HANDLER_P2)
        .replace("{p3}", guests::P3_CLI_P2)
        .replace("{p3-http}", guests::P3_HANDLER_P2)
}

/// Pod YAML for the tests, written field by field: a name, lines under `metadata` and `spec`,
/// and containers as YAML flow mappings (guest placeholders such as `{p1}` are filled in when
/// the pod is made). Every pod of the tests starts here instead of repeating the preamble.
///
/// ```
/// let yaml = wasmpod_tests::PodYaml::new("web")
///     .never()
///     .spec("terminationGracePeriodSeconds: 5")
///     .container(r#"{ name: c, image: "{p1}", args: [print, hi] }"#)
///     .build();
/// assert!(yaml.contains("restartPolicy: Never"));
/// ```
#[derive(Debug, Clone, Default)]
pub struct PodYaml {
    name: String,
    metadata: Vec<String>,
    spec: Vec<String>,
    init: Vec<String>,
    containers: Vec<String>,
}

impl PodYaml {
    /// A pod named `name`, with nothing else yet.
    pub fn new(name: &str) -> PodYaml {
        PodYaml {
            name: name.to_owned(),
            ..PodYaml::default()
        }
    }

    /// Adds a line under `metadata` (`uid: ...`, `labels: {...}`).
    pub fn metadata(mut self, line: &str) -> PodYaml {
        self.metadata.push(line.to_owned());
        self
    }

    /// Adds a line under `spec` (`terminationGracePeriodSeconds: 5`).
    pub fn spec(mut self, line: &str) -> PodYaml {
        self.spec.push(line.to_owned());
        self
    }

    /// `restartPolicy: Never`.
    pub fn never(self) -> PodYaml {
        self.spec("restartPolicy: Never")
    }

    /// Adds an init container (a flow mapping, or block lines indented for a list item).
    pub fn init(mut self, container: &str) -> PodYaml {
        self.init.push(container.to_owned());
        self
    }

    /// Adds a regular container (a flow mapping, or block lines indented for a list item).
    pub fn container(mut self, container: &str) -> PodYaml {
        self.containers.push(container.to_owned());
        self
    }

    /// The YAML.
    pub fn build(&self) -> String {
        let mut yaml = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {}\n",
            self.name
        );
        for line in &self.metadata {
            yaml += &format!("  {line}\n");
        }
        yaml += "spec:\n";
        for line in &self.spec {
            yaml += &format!("  {line}\n");
        }
        for (field, list) in [
            ("initContainers", &self.init),
            ("containers", &self.containers),
        ] {
            if list.is_empty() {
                continue;
            }
            yaml += &format!("  {field}:\n");
            for c in list {
                yaml += &format!("  - {}\n", c.trim());
            }
        }
        yaml
    }
}

/// One container as a flow mapping: `{ name: NAME, image: "IMAGE", args: ARGS }`.
pub fn container_yaml(name: &str, image: &str, args: &str) -> String {
    format!(r#"{{ name: {name}, image: "{image}", args: {args} }}"#)
}

/// A node in a temporary state dir, and the pods made on it.
#[derive(Debug)]
pub struct TestNode {
    /// The node, with the tests' short backoff and the shared compile cache.
    pub node: Node,
    /// The temporary directory holding its state dir (`state/`) and the tests' files.
    pub dir: TempDir,
}

impl TestNode {
    /// A node with the tests' defaults.
    pub fn new() -> TestNode {
        Self::with(|o| o)
    }

    /// A node with the tests' defaults changed by `options`. Its registry images are its own:
    /// the tests' registries listen on whatever loopback port is free, so a reference such as
    /// `127.0.0.1:PORT/app:1.0` names different images in different tests.
    pub fn with(options: impl FnOnce(NodeOptions) -> NodeOptions) -> TestNode {
        let dir = tempfile::tempdir().unwrap();
        let base = NodeOptions::default()
            .state_dir(dir.path().join("state"))
            .cache_dir(Some(shared_cache()))
            .image_dir(dir.path().join("images"))
            .backoff(FAST_BACKOFF);
        TestNode {
            node: Node::new(options(base)).unwrap(),
            dir,
        }
    }

    /// Validates pod YAML (guest placeholders filled in); panics with the errors if invalid.
    pub fn spec(&self, yaml: &str) -> PodSpec {
        PodSpec::from_yaml(&fill(yaml), self.dir.path()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The errors of pod YAML that must not validate, as `wasmpod validate` prints them.
    pub fn invalid(&self, yaml: &str) -> String {
        match PodSpec::from_yaml(&fill(yaml), self.dir.path()) {
            Ok(_) => panic!("the pod validated:\n{yaml}"),
            Err(e) => e.to_string(),
        }
    }

    /// Creates and starts a pod from YAML.
    pub async fn start(&self, yaml: &str) -> PodHandle {
        self.node
            .create_pod(self.spec(yaml), PodOptions::default())
            .await
            .unwrap()
    }

    /// Runs a pod until it ends by itself (bounded by `limit`), deletes it and returns its
    /// timeline and final status.
    pub async fn run(&self, yaml: &str, limit: Duration) -> (Timeline, PodStatus) {
        let pod = self.start(yaml).await;
        let status = tokio::time::timeout(limit, pod.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "pod did not end within {limit:?}; status: {:#?}",
                    pod.status()
                )
            });
        pod.delete(None);
        let timeline = Timeline::collect(&pod).await;
        (timeline, status)
    }
}

impl Default for TestNode {
    fn default() -> Self {
        Self::new()
    }
}

/// Every event of a pod, in order.
#[derive(Debug, Clone)]
pub struct Timeline(pub Vec<Event>);

impl Timeline {
    /// Reads the pod's events until it is deleted (at most 30 s).
    pub async fn collect(pod: &PodHandle) -> Timeline {
        let mut events = pod.events();
        let mut all = Vec::new();
        let read = async {
            while let Some(e) = events.next().await {
                all.push(e);
            }
        };
        tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .expect("pod not deleted within 30 s");
        Timeline(all)
    }

    /// Waits until `container` has an event with `reason` (at most `limit`) and returns the
    /// events up to it.
    pub async fn until(
        pod: &PodHandle,
        container: &str,
        reason: Reason,
        limit: Duration,
    ) -> Timeline {
        let mut events = pod.events();
        let mut all = Vec::new();
        let read = async {
            while let Some(e) = events.next().await {
                let done = e.container.as_deref() == Some(container) && e.reason == reason;
                all.push(e);
                if done {
                    return;
                }
            }
        };
        if tokio::time::timeout(limit, read).await.is_err() {
            panic!(
                "no {reason:?} for {container} within {limit:?}:\n{}",
                Timeline(all)
            );
        }
        Timeline(all)
    }

    /// Events recorded so far, without waiting.
    pub async fn so_far(pod: &PodHandle) -> Timeline {
        let mut events = pod.events();
        let mut all = Vec::new();
        while let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(1), events.next()).await
        {
            all.push(e);
        }
        Timeline(all)
    }

    /// Positions of the events of `container` with `reason`.
    pub fn positions(&self, container: &str, reason: Reason) -> Vec<usize> {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, e)| e.container.as_deref() == Some(container) && e.reason == reason)
            .map(|(i, _)| i)
            .collect()
    }

    /// How many events `container` has with `reason`.
    pub fn count(&self, container: &str, reason: Reason) -> usize {
        self.positions(container, reason).len()
    }

    /// Position of the first `reason` event of `container`; panics when there is none.
    pub fn first(&self, container: &str, reason: Reason) -> usize {
        *self
            .positions(container, reason)
            .first()
            .unwrap_or_else(|| panic!("no {reason:?} for {container}:\n{self}"))
    }

    /// Position of the last `reason` event of `container`; panics when there is none.
    pub fn last(&self, container: &str, reason: Reason) -> usize {
        *self
            .positions(container, reason)
            .last()
            .unwrap_or_else(|| panic!("no {reason:?} for {container}:\n{self}"))
    }

    /// Where the pod-level events with `reason` are.
    pub fn pod_positions(&self, reason: Reason) -> Vec<usize> {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, e)| e.container.is_none() && e.reason == reason)
            .map(|(i, _)| i)
            .collect()
    }

    /// The phases the pod went through, in order.
    pub fn phases(&self) -> Vec<&'static str> {
        self.0
            .iter()
            .filter(|e| e.reason == Reason::PhaseChanged)
            .filter_map(|e| e.phase.map(wasmpod::PodPhase::as_str))
            .collect()
    }

    /// The time of event `i`.
    pub fn time(&self, i: usize) -> std::time::SystemTime {
        let t: wasmpod::k8s_openapi::jiff::Timestamp = self.0[i].time.parse().unwrap();
        std::time::SystemTime::from(t)
    }

    /// Time between events `a` and `b`.
    pub fn between(&self, a: usize, b: usize) -> Duration {
        self.time(b)
            .duration_since(self.time(a))
            .unwrap_or_else(|_| panic!("event {b} is before event {a}:\n{self}"))
    }

    /// The exit codes of `container`'s `Exited` events, in order.
    pub fn exit_codes(&self, container: &str) -> Vec<i32> {
        self.positions(container, Reason::Exited)
            .into_iter()
            .filter_map(|i| self.0[i].exit_code)
            .collect()
    }
}

impl std::fmt::Display for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            writeln!(
                f,
                "{i:3} {} {:10} {:18} {:?} {}",
                e.time,
                e.container.as_deref().unwrap_or("-"),
                format!("{:?}", e.reason),
                e.exit_code,
                e.message
            )?;
        }
        Ok(())
    }
}

/// The status of container `name` (init or regular).
pub fn container<'a>(status: &'a PodStatus, name: &str) -> &'a ContainerStatus {
    status
        .init_container_statuses
        .iter()
        .chain(status.container_statuses.iter())
        .flatten()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no status for container {name}"))
}

/// The reason container `name` is waiting, if it is.
pub fn waiting_reason(status: &PodStatus, name: &str) -> Option<String> {
    container(status, name)
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

/// Whether container `name` is running.
pub fn is_running(status: &PodStatus, name: &str) -> bool {
    container(status, name)
        .state
        .as_ref()
        .is_some_and(|s| s.running.is_some())
}

/// How container `name` terminated; panics if it has not.
pub fn terminated(
    status: &PodStatus,
    name: &str,
) -> wasmpod::k8s_openapi::api::core::v1::ContainerStateTerminated {
    let state = container(status, name).state.clone();
    state
        .and_then(|s| s.terminated)
        .unwrap_or_else(|| panic!("{name} has not terminated: {status:#?}"))
}

/// CPU time this process has used so far in user space and in the kernel (`getrusage`, every
/// thread).
pub fn cpu_times() -> (Duration, Duration) {
    // SAFETY: `getrusage` writes the struct it is given; RUSAGE_SELF is always valid.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    (time(usage.ru_utime), time(usage.ru_stime))
}

/// CPU time (user + system) this process has used so far.
pub fn cpu_time() -> Duration {
    let (user, system) = cpu_times();
    user + system
}

/// What a command printed on its standard output, once it is checked to have succeeded (else
/// a panic with both of its outputs).
pub fn succeeded(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Writes a benchmark's results to `target/wasmpod-bench/<name>.json`.
pub fn save_bench(name: &str, results: &serde_json::Value) {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/wasmpod-bench");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join(format!("{name}.json")),
        serde_json::to_string_pretty(results).unwrap(),
    )
    .unwrap();
}

/// A target's verdict as the benchmarks print it.
pub fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

/// Prints `keys` of a benchmark's results beside the `name` entry of `docs/bench-baseline.json`
/// (now / then and their ratio). A key starting with `/` is a JSON pointer into nested results
/// (`/case/p99_us`).
pub fn compare_bench(name: &str, results: &serde_json::Value, keys: &[&str]) {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/bench-baseline.json");
    let base = std::fs::read_to_string(&file)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|b| b.get(name).cloned());
    let Some(base) = base else {
        println!("\n(no `{name}` entry in docs/bench-baseline.json yet)");
        return;
    };
    println!("\nagainst the baseline in docs/bench-baseline.json (now / then):");
    let at = |v: &serde_json::Value, key: &str| {
        if key.starts_with('/') {
            v.pointer(key).and_then(serde_json::Value::as_f64)
        } else {
            v.get(key).and_then(serde_json::Value::as_f64)
        }
    };
    let width = keys.iter().map(|k| k.chars().count()).max().unwrap_or(0);
    for key in keys {
        if let (Some(now), Some(then)) = (at(results, key), at(&base, key)) {
            println!(
                "  {key:<width$} {now:>10.1} / {then:>10.1} = {:.2}",
                now / then
            );
        }
    }
}

/// The condition `kind` of a pod status: (status, reason, message).
pub fn condition(status: &PodStatus, kind: &str) -> (String, Option<String>, Option<String>) {
    let c = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == kind)
        .unwrap_or_else(|| panic!("no condition {kind}"));
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

/// Waits until `check` holds for the pod's status, at most `limit`.
pub async fn wait_for(
    pod: &PodHandle,
    limit: Duration,
    check: impl Fn(&PodStatus) -> bool,
) -> PodStatus {
    match tokio::time::timeout(limit, pod.wait_until(&check)).await {
        Ok(status) if check(&status) => status,
        _ => panic!(
            "condition not reached within {limit:?}; status: {:#?}",
            pod.status()
        ),
    }
}

/// How long [`running`] waits for a pod's containers to run.
pub const RUNNING_LIMIT: Duration = Duration::from_secs(30);

/// Waits (at most [`RUNNING_LIMIT`]) until each of `containers` runs, and returns the status.
pub async fn running(pod: &PodHandle, containers: &[&str]) -> PodStatus {
    wait_for(pod, RUNNING_LIMIT, |s| {
        containers.iter().all(|c| is_running(s, c))
    })
    .await
}

/// Deletes `pod` with a zero grace period (KILL, no hooks) and waits until it is gone.
pub async fn remove(pod: &PodHandle) {
    pod.delete(Some(Duration::ZERO));
    pod.deleted().await;
}

/// Waits until the scheduler's verdict on a pod it cannot place (Pending,
/// `PodScheduled=False`, `Unschedulable`) and returns its message.
pub async fn unschedulable(pod: &PodHandle, limit: Duration) -> String {
    let s = wait_for(pod, limit, |s| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "PodScheduled")
    })
    .await;
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let (status, reason, message) = condition(&s, "PodScheduled");
    assert_eq!(
        (status.as_str(), reason.as_deref()),
        ("False", Some("Unschedulable"))
    );
    message.unwrap_or_default()
}

/// The text of each line a container's first instance logged (the CRI format's fourth field).
pub fn log_lines(pod: &PodHandle, container: &str) -> Vec<String> {
    read(&pod.log_file(container, 0))
        .lines()
        .map(|l| l.splitn(4, ' ').nth(3).unwrap_or_default().to_owned())
        .collect()
}

/// Waits (at most `limit`) until `container` has terminated and returns how.
pub async fn wait_terminated(
    pod: &PodHandle,
    name: &str,
    limit: Duration,
) -> wasmpod::k8s_openapi::api::core::v1::ContainerStateTerminated {
    let status = wait_for(pod, limit, |s| {
        container(s, name)
            .state
            .as_ref()
            .is_some_and(|st| st.terminated.is_some())
    })
    .await;
    let state = container(&status, name).state.clone();
    state.and_then(|s| s.terminated).expect("terminated")
}

/// A TCP port free on 127.0.0.1 now (for `hostPort`s and servers the tests start).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Reads a whole file as text.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A PriorityClass document; `more` adds fields (`preemptionPolicy: Never`).
pub fn priority_class(name: &str, value: i32, more: &str) -> String {
    format!(
        "---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{ name: {name} }}\nvalue: {value}\n{more}\n"
    )
}

/// Reads the PriorityClass documents of YAML text through a file, as `wasmpod run --config` does.
pub fn read_classes(
    yaml: &str,
) -> Result<Vec<wasmpod::k8s_openapi::api::scheduling::v1::PriorityClass>, wasmpod::InvalidPod> {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), yaml).unwrap();
    wasmpod::read_priority_classes(file.path())
}

/// Compiles every test guest into the shared compile cache, once per process, so that test
/// processes started in parallel (the CLI tests) load them instead of all compiling at once.
pub fn warm_shared_cache() {
    static WARM: std::sync::Once = std::sync::Once::new();
    WARM.call_once(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let node = TestNode::new();
        let images: Vec<String> = [
            guests::AGNHOST_P1,
            guests::AGNHOST_P2,
            guests::AGNHOST_TERM_P1,
            guests::PROBED_P2,
        ]
        .iter()
        .enumerate()
        .map(|(i, path)| format!("  - {{ name: c{i}, image: \"{path}\" }}\n"))
        .collect();
        let yaml = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{ name: warm }}\nspec:\n  containers:\n{}",
            images.concat()
        );
        runtime
            .block_on(node.node.load_images(&node.spec(&yaml)))
            .unwrap();
    });
}

/// This process's resident memory in bytes (`VmRSS`), for the benches; 0 where `/proc` is not.
pub fn rss_bytes() -> u64 {
    proc_kib("/proc/self/status", "VmRSS:").map_or(0, |kib| kib * 1024)
}

/// The `KEY: N kB` line of a `/proc` file (`/proc/PID/status`, `smaps_rollup`), in KiB.
pub fn proc_kib(file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Limits the memory of the cgroup at `path` (made if needed, relative to the hierarchy's root)
/// to `bytes`, as the kubelet limits a pod's or systemd a unit's, in cgroup v1's memory
/// hierarchy or in the unified one: its directory.
pub fn limit_memory(path: &str, bytes: u64) -> std::path::PathBuf {
    let relative = path.trim_start_matches('/');
    let v1 = std::path::Path::new("/sys/fs/cgroup/memory");
    if v1.is_dir() {
        let dir = v1.join(relative);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("memory.limit_in_bytes"), bytes.to_string()).unwrap();
        return dir;
    }
    let root = std::path::Path::new("/sys/fs/cgroup");
    let mut dir = root.to_path_buf();
    for part in std::path::Path::new(relative).components() {
        // Each level hands the memory controller down to the next.
        let _ = std::fs::write(dir.join("cgroup.subtree_control"), "+memory");
        dir.push(part);
        std::fs::create_dir_all(&dir).unwrap();
    }
    std::fs::write(dir.join("memory.max"), bytes.to_string()).unwrap();
    dir
}
