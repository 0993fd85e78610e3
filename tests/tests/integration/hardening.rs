//! The sandbox against hostile pod specs and guests: host paths built only from validated parts
//! and held by one pod, mounts opened once, huge numbers, one memory budget per container, CPU
//! limits counting only wasm time, bounded logs, orphans cleaned. Each test fails on the runtime
//! before the hardening.

use std::path::Path;
use std::time::Duration;

use wasmpod::{Error, LogLimits, LogOptions, PodOptions, Reason};
use wasmpod_tests::{PodYaml, TestNode, Timeline, remove, running, terminated};

const LIMIT: Duration = Duration::from_secs(60);

/// A `Never` pod of one container `c` in block style: `spec` and `container` are lines
/// (indented two and four spaces) under `spec:` and the container.
fn pod(name: &str, spec: &str, container: &str) -> String {
    let mut pod = PodYaml::new(name).never();
    for line in spec.lines() {
        pod = pod.spec(line.trim_start());
    }
    pod.container(&format!("name: c\n{container}")).build()
}

/// Two pods given one UID, on one node or on two sharing a state dir (as two processes would),
/// never share a directory: the second is refused.
#[tokio::test]
async fn a_uid_is_held_by_one_pod() {
    let node = TestNode::new();
    let yaml = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{ name: {name}, uid: 0b5c4a4e-1111-4222-8333-944455556666 }}\nspec:\n  containers:\n  - {{ name: c, image: \"{{p1}}\", args: [sleep, '60000'] }}\n"
        )
    };
    let first = node.start(&yaml("first")).await;
    let again = node
        .node
        .create_pod(node.spec(&yaml("second")), PodOptions::default())
        .await;
    assert!(
        matches!(again, Err(Error::UidInUse(_))),
        "{:?}",
        again.err()
    );
    let other = wasmpod::Node::new(
        wasmpod::NodeOptions::default()
            .state_dir(node.dir.path().join("state"))
            .cache_dir(Some(wasmpod_tests::shared_cache())),
    )
    .unwrap();
    let there = other
        .create_pod(node.spec(&yaml("third")), PodOptions::default())
        .await;
    assert!(
        matches!(there, Err(Error::UidInUse(_))),
        "{:?}",
        there.err()
    );
    remove(&first).await;
    // Free again once the first is gone.
    let later = node.start(&yaml("fourth")).await;
    remove(&later).await;
}

/// The longest valid pod name still makes file names the file system takes.
#[tokio::test]
async fn a_long_pod_name_runs() {
    let node = TestNode::new();
    // DNS labels of at most 63, 245 characters in all.
    let name = format!("{}.a", vec!["n".repeat(60); 4].join("."));
    assert_eq!(name.len(), 245);
    let yaml = pod(&name, "", "    image: \"{p1}\"\n    args: [print, long]\n");
    let (_, status) = node.run(&yaml, LIMIT).await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let logs = node.dir.path().join("state/logs");
    let dir = std::fs::read_dir(&logs).unwrap().next().unwrap().unwrap();
    assert!(dir.file_name().len() <= 255);
    let log = std::fs::read_to_string(dir.path().join("c/0.log")).unwrap();
    assert!(log.contains(" stdout F long"), "{log}");
}

/// A `subPath` is opened once: replacing it with a symlink afterwards (as another container
/// sharing the volume could) does not redirect the container's exec instances.
#[tokio::test]
async fn a_sub_path_swapped_for_a_symlink_is_not_followed() {
    let node = TestNode::new();
    let yaml = pod(
        "swap",
        "  volumes: [ { name: v, emptyDir: {} } ]\n",
        "    image: \"{p1}\"\n    args: [sleep, '60000']\n    volumeMounts: [ { name: v, mountPath: /s, subPath: sub } ]\n",
    );
    let pod = node.start(&yaml).await;
    running(&pod, &["c"]).await;
    let volume = pod.dir().join("volumes/v");
    let outside = node.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::rename(volume.join("sub"), volume.join("moved")).unwrap();
    std::os::unix::fs::symlink(&outside, volume.join("sub")).unwrap();
    pod.exec("c", &["agnhost", "write", "/s/planted", "x"])
        .await
        .unwrap();
    assert!(
        !outside.join("planted").exists(),
        "followed the planted symlink"
    );
    assert!(volume.join("moved/planted").exists());
    remove(&pod).await;
}

/// Grace periods and deadlines near `i64::MAX` are held, not overflowed: the pod runs, is
/// deleted and says so.
#[tokio::test]
async fn huge_grace_periods_and_deadlines_do_not_break_the_supervisor() {
    let node = TestNode::new();
    let max = i64::MAX;
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{ name: huge }}\nspec:\n  terminationGracePeriodSeconds: {max}\n  activeDeadlineSeconds: 2147483647\n  containers:\n  - name: c\n    image: \"{{term}}\"\n    args: [on-term, '0', '0', sleep, '60000']\n    livenessProbe: {{ exec: {{ command: [liveness] }}, periodSeconds: 1, terminationGracePeriodSeconds: {max} }}\n    lifecycle: {{ preStop: {{ sleep: {{ seconds: 0 }} }} }}\n"
    );
    let pod = node.start(&yaml).await;
    running(&pod, &["c"]).await;
    pod.delete(None);
    let timeline = tokio::time::timeout(Duration::from_secs(20), Timeline::collect(&pod))
        .await
        .expect("the pod is deleted");
    assert_eq!(timeline.0.last().map(|e| e.reason), Some(Reason::Deleted));
    assert_eq!(timeline.exit_codes("c"), [0]);
}

/// A module built from WAT, written where a pod can name it.
fn module(dir: &Path, name: &str, wat: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, wat::parse_str(wat).unwrap()).unwrap();
    path.display().to_string()
}

/// Grows until refused (`grow` leaves -1 on refusal), at most 500 times, then exits with the
/// number of growths.
fn grower(decls: &str, grow: &str) -> String {
    format!(
        r#"(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  {decls}
  (func (export "_start")
    (local $n i32)
    (block $done
      (loop $again
        (br_if $done (i32.eq ({grow}) (i32.const -1)))
        (local.set $n (i32.add (local.get $n) (i32.const 1)))
        (br_if $again (i32.lt_u (local.get $n) (i32.const 500)))))
    (call $exit (local.get $n))))"#
    )
}

/// Tables and additional memories count against the container's memory limit, together.
#[tokio::test]
async fn one_memory_budget_covers_tables_and_every_memory() {
    let node = TestNode::new();
    let dir = node.dir.path();
    // 10,000 table elements per growth (80 KB): 1 MiB holds 13 of them at most.
    let tables = module(
        dir,
        "tables.wasm",
        &grower(
            "(memory (export \"memory\") 1) (table $t 0 funcref)",
            "table.grow $t (ref.null func) (i32.const 10000)",
        ),
    );
    // Eight memories grown 4 MiB at a time, in turn: 16 MiB holds four growths in all.
    let decls: String = (0..8)
        .map(|i| format!("(memory $m{i} (export \"m{i}\") 0)\n"))
        .collect::<String>()
        .replacen("\"m0\"", "\"memory\"", 1);
    let grow_all: String = (1..8)
        .map(|i| format!("(drop (memory.grow $m{i} (i32.const 64)))\n"))
        .collect();
    let memories = module(
        dir,
        "memories.wasm",
        &grower(
            &decls,
            &format!("block (result i32) {grow_all} (memory.grow $m0 (i32.const 64))"),
        ),
    );
    let run = |name: &str, image: &str, limit: &str| {
        pod(
            name,
            "",
            &format!("    image: {image}\n    resources: {{ limits: {{ memory: {limit} }} }}\n"),
        )
    };
    let (t, _) = node.run(&run("tables", &tables, "1Mi"), LIMIT).await;
    let grown = t.exit_codes("c")[0];
    // 1 MiB less the 64 KiB page holds 12 growths.
    assert!(
        (1..=12).contains(&grown),
        "tables grew {grown} times within 1Mi: {t}"
    );
    let (t, _) = node.run(&run("memories", &memories, "16Mi"), LIMIT).await;
    let grown = t.exit_codes("c")[0];
    // Each round grows all eight memories by 4 MiB; the round that runs out is not counted.
    assert!(
        grown <= 1,
        "eight memories grew {grown} rounds of 4 MiB within 16Mi: {t}"
    );
}

/// A store may not make more memories than a component needs.
#[tokio::test]
async fn a_module_with_too_many_memories_does_not_start() {
    let node = TestNode::new();
    let decls: String = (0..40).map(|i| format!("(memory $m{i} 0)\n")).collect();
    let image = module(
        node.dir.path(),
        "many.wasm",
        &grower(&decls, "memory.grow $m0 (i32.const 1)"),
    );
    let (t, status) = node
        .run(&pod("many", "", &format!("    image: {image}\n")), LIMIT)
        .await;
    // Instantiation fails (it would otherwise grow its first memory 500 times and exit 500):
    // the container could not be created, which is no trap of the guest's.
    assert_eq!(t.exit_codes("c"), [128], "{t}");
    let c = terminated(&status, "c");
    assert_eq!(c.reason.as_deref(), Some("StartError"));
    let message = c.message.unwrap_or_default();
    assert!(message.contains("memor"), "{message}");
}

/// The tables and memories a module declares are charged before it runs: 40 tables of a
/// million elements (320 MB) do not fit in 1Mi, and the guest never runs.
#[tokio::test]
async fn declared_tables_are_charged_before_the_guest_runs() {
    let node = TestNode::new();
    let tables: String = (0..40)
        .map(|i| format!("(table $t{i} 1000000 funcref)\n"))
        .collect();
    let image = module(
        node.dir.path(),
        "tables40.wasm",
        &format!(
            r#"(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  {tables}
  (memory (export "memory") 1)
  (func (export "_start") (call $exit (i32.const 7))))"#
        ),
    );
    let (t, status) = node
        .run(
            &pod(
                "tables40",
                "",
                &format!("    image: {image}\n    resources: {{ limits: {{ memory: 1Mi }} }}\n"),
            ),
            LIMIT,
        )
        .await;
    assert_eq!(t.exit_codes("c"), [137], "{t}");
    let c = terminated(&status, "c");
    assert_eq!(c.reason.as_deref(), Some("OOMKilled"), "{c:?}");
    assert!(
        c.message.unwrap_or_default().contains("memory limit"),
        "{t}"
    );
}

/// A published port carries a bounded number of connections at once: a flood of idle
/// connections costs the process a bounded number of descriptors (past the bound, the one that
/// has waited longest for its client is closed), and the port serves again once they go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_port_bounds_its_connections() {
    let node = TestNode::new();
    let port = wasmpod_tests::free_port();
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{ name: flood }}\nspec:\n  containers:\n  - name: c\n    image: \"{{p2}}\"\n    args: [echo-server, \"0.0.0.0:8080\"]\n    ports: [ {{ containerPort: 8080, hostPort: {port} }} ]\n"
    );
    let pod = node.start(&yaml).await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    // The server is up once it echoes.
    let echo = |addr| {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"hi")?;
        s.shutdown(std::net::Shutdown::Write)?;
        let mut reply = String::new();
        s.read_to_string(&mut reply)?;
        Ok::<_, std::io::Error>(reply)
    };
    let start = std::time::Instant::now();
    while echo(addr).ok().as_deref() != Some("hi") {
        assert!(start.elapsed() < LIMIT, "the echo server never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let before = fds();
    // Connected at once; those a full backlog would hold back give up.
    let attempts: Vec<_> = (0..2000)
        .map(|_| {
            tokio::spawn(tokio::time::timeout(
                Duration::from_secs(1),
                tokio::net::TcpStream::connect(addr),
            ))
        })
        .collect();
    let mut idle = Vec::new();
    for attempt in attempts {
        if let Ok(Ok(Ok(stream))) = attempt.await {
            idle.push(stream);
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // 1,024 a port (docs/security.md), with room for what the tests running beside this one
    // open.
    let held = fds().saturating_sub(before + idle.len());
    assert!(
        held < 1400,
        "2,000 idle connections to a published port hold {held} descriptors of the node"
    );
    drop(idle);
    let start = std::time::Instant::now();
    while echo(addr).ok().as_deref() != Some("hi") {
        assert!(start.elapsed() < LIMIT, "the port never served again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    remove(&pod).await;
}

/// Socket buffers count against the container's memory: a guest cannot hold connections
/// beyond its limit.
#[tokio::test]
async fn socket_buffers_count_against_the_memory_limit() {
    let node = TestNode::new();
    let yaml = pod(
        "sockets",
        "",
        "    image: \"{p2}\"\n    args: [hold, '1000']\n    resources: { limits: { memory: 24Mi } }\n",
    );
    let pod = node.start(&yaml).await;
    tokio::time::timeout(LIMIT, pod.wait()).await.unwrap();
    let mut logs = pod.logs("c", LogOptions::default()).unwrap();
    let line = logs.next().await.unwrap().line;
    let held: usize = line
        .strip_prefix("held ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    // Each connection holds 2 × 512 KiB of buffers (both ends are this container's).
    assert!(held < 24, "{line}");
    assert!(line.contains("OutOfMemory"), "{line}");
    pod.delete(None);
    pod.deleted().await;
}

/// Only time spent executing wasm counts against a CPU limit: a `100m` guest that sleeps, then
/// computes briefly, takes its sleep plus about ten times its computation, not ten times the
/// sleep too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_limit_counts_only_time_executing_wasm() {
    let node = TestNode::new();
    let run = |name: &str, resources: &str, args: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{ name: {name} }}\nspec:\n  restartPolicy: Never\n  containers:\n  - {{ name: c, image: \"{{p1}}\", args: [{args}]{resources} }}\n"
        )
    };
    let start = std::time::Instant::now();
    node.run(&run("calibrate", "", "work, '20'"), LIMIT).await;
    let work = start.elapsed();
    let start = std::time::Instant::now();
    let limited = ", resources: { limits: { cpu: 100m } }";
    let (t, status) = node
        .run(&run("mixed", limited, "sleep, '1500', work, '20'"), LIMIT)
        .await;
    let took = start.elapsed();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{t}");
    // Blocked time counted as CPU would add 9 × 1.5 s = 13.5 s of throttling.
    let bound = Duration::from_millis(1500) + work * 15 + Duration::from_secs(2);
    assert!(
        took >= Duration::from_millis(1500) && took < bound,
        "took {took:?}; unlimited work took {work:?}, bound {bound:?}"
    );
}

/// Logs rotate past their size and keep a bounded number of files; only the previous
/// instance's logs are kept besides the current one; the reader reads the current file.
#[tokio::test]
async fn logs_rotate_and_old_instances_are_removed() {
    let node = TestNode::with(|o| o.log_limits(LogLimits::new(64 * 1024, 3)));
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata: { name: flood }\nspec:\n  restartPolicy: OnFailure\n  volumes: [ { name: v, emptyDir: {} } ]\n  containers:\n  - name: c\n    image: \"{p1}\"\n    args: [flood, '20000', fail-after, /v/count, '4']\n    volumeMounts: [ { name: v, mountPath: /v } ]\n";
    let pod = node.start(yaml).await;
    let status = tokio::time::timeout(LIMIT, pod.wait()).await.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    assert_eq!(terminated(&status, "c").exit_code, 0);
    let dir = pod.log_file("c", 3).parent().unwrap().to_owned();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("2.log") || n.starts_with("3.log")),
        "{names:?}"
    );
    for instance in ["2.log", "3.log"] {
        let files: Vec<&String> = names.iter().filter(|n| n.starts_with(instance)).collect();
        assert_eq!(files.len(), 3, "{instance}: {names:?}");
    }
    for name in &names {
        let size = std::fs::metadata(dir.join(name)).unwrap().len();
        assert!(size <= 64 * 1024, "{name}: {size} bytes");
    }
    let mut logs = pod.logs("c", LogOptions::default()).unwrap();
    let mut last = String::new();
    while let Some(line) = logs.next().await {
        last = line.line;
    }
    assert!(last.starts_with("flood line 19999"), "{last}");
    pod.delete(None);
    pod.deleted().await;
}

/// What a container printed is in its log file by the time its pod ends, even while the log
/// writer is held up: here by a watcher of the pod's output that reads nothing, which the writer
/// waits for (a while) after writing `two`, as `three` and `four` come and the guest exits. The
/// file is read from disk at once, with no reader that waits for the writer.
#[tokio::test]
async fn a_pods_output_is_on_disk_when_the_pod_ends() {
    let node = TestNode::new();
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata: { name: printed }\nspec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: \"{p1}\"\n    args: [print, one, print, two, sleep, '50', print, three, print, four]\n";
    let (watcher, _unread) = tokio::sync::mpsc::channel(1);
    let pod = node
        .node
        .create_pod(node.spec(yaml), PodOptions::default().output(watcher))
        .await
        .unwrap();
    let status = tokio::time::timeout(LIMIT, pod.wait()).await.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let text = std::fs::read_to_string(pod.log_file("c", 0)).unwrap();
    let printed: Vec<&str> = text
        .lines()
        .map(|record| record.splitn(4, ' ').nth(3).unwrap_or_default())
        .collect();
    assert_eq!(printed, ["one", "two", "three", "four"]);
}

/// A node raises its open-file limit, and removes what killed processes left in `/dev/shm`
/// (a pod directory whose lock nobody holds), but not a live one's.
#[tokio::test]
async fn a_node_cleans_orphans_and_raises_the_fd_limit() {
    let shm = Path::new("/dev/shm/wasmpod");
    if !Path::new("/dev/shm").is_dir() {
        return;
    }
    let orphan = shm.join(format!("orphan-{}", std::process::id()));
    let live = shm.join(format!("live-{}", std::process::id()));
    for dir in [&orphan, &live] {
        std::fs::create_dir_all(dir.join("v")).unwrap();
        std::fs::write(dir.join("v/data"), "x").unwrap();
    }
    std::fs::File::create(orphan.join(".lock")).unwrap();
    let held = std::fs::File::create(live.join(".lock")).unwrap();
    held.try_lock().unwrap();
    let _node = TestNode::new();
    assert!(!orphan.exists(), "the orphan is removed");
    assert!(live.join("v/data").exists(), "a live pod's volume stays");
    drop(held);
    std::fs::remove_dir_all(&live).unwrap();
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct passed.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    assert_eq!(limit.rlim_cur, limit.rlim_max);
}

/// On a state dir the operator made readable by all (0755), what holds pods' data — volumes
/// with Secret files, logs, the memory `emptyDir` under `/dev/shm` — is the node's user's alone.
#[cfg(unix)]
#[tokio::test]
async fn pods_data_is_private_whatever_the_state_dirs_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    for d in [&state, &state.join("pods"), &state.join("logs")] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let node = wasmpod::Node::new(
        wasmpod::NodeOptions::default()
            .state_dir(&state)
            .cache_dir(Some(wasmpod_tests::shared_cache())),
    )
    .unwrap();
    let yaml = wasmpod_tests::fill(
        "apiVersion: v1\nkind: Pod\nmetadata: { name: secretive }\nspec:\n  volumes: [ { name: shm, emptyDir: { medium: Memory } } ]\n  containers:\n  - { name: c, image: \"{p1}\", args: [print, hi, sleep, '60000'], volumeMounts: [ { name: shm, mountPath: /shm } ] }\n",
    );
    let spec = wasmpod::PodSpec::from_yaml(&yaml, dir.path()).unwrap();
    let pod = node.create_pod(spec, PodOptions::default()).await.unwrap();
    running(&pod, &["c"]).await;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&state.join("pods")), 0o700);
    assert_eq!(mode(&state.join("logs")), 0o700);
    let shm = Path::new("/dev/shm/wasmpod");
    if shm.is_dir() {
        assert_eq!(mode(shm), 0o700);
        assert_eq!(mode(&shm.join(pod.uid())), 0o700);
    }
    remove(&pod).await;
}
