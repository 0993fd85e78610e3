//! The shim under a real containerd (Debian's, started by each test with its own root and
//! socket), driven with `ctr run --runtime io.containerd.wasmpod.v1` on images built from the
//! test guests: output, exit codes, TERM and KILL as the kubelet sends them through containerd,
//! mounts, the memory limit, containers side by side.

use std::time::{Duration, Instant};

use wasmpod_tests::containerd::{Containerd, Run, memory_cgroup, wait_removed};
use wasmpod_tests::guests;

const SHIM: &str = env!("CARGO_BIN_EXE_containerd-shim-wasmpod-v1");

fn containerd() -> Containerd {
    Containerd::start(SHIM.as_ref())
}

fn assert_run(run: &Run, code: i32) {
    assert_eq!(run.code, code, "{run:?}");
}

#[test]
fn output_argv_env_and_exit_codes_of_modules_and_components() {
    let ctd = containerd();
    for (guest, wasm) in [("p1", guests::AGNHOST_P1), ("p2", guests::AGNHOST_P2)] {
        let image = ctd.import(guest, wasm.as_ref());
        let run = ctd.run(
            &["--env", "GREETING=hi there"],
            &image,
            &format!("{guest}-ok"),
            &[
                "print",
                "hello",
                "args",
                "env",
                "GREETING",
                "eprint",
                "to stderr",
            ],
        );
        assert_run(&run, 0);
        assert_eq!(
            run.stdout,
            "hello\n/app.wasm print hello args env GREETING eprint to stderr\n\
             GREETING=hi there\n",
            "{guest}"
        );
        assert!(run.stderr.contains("to stderr"), "{run:?}");

        assert_run(
            &ctd.run(&[], &image, &format!("{guest}-1"), &["exit", "1"]),
            1,
        );
        if guest == "p1" {
            // The highest code WASI preview1 passes on (wasmtime traps `proc_exit` above 125).
            assert_run(&ctd.run(&[], &image, "p1-125", &["exit", "125"]), 125);
        }
        let trap = ctd.run(
            &[],
            &image,
            &format!("{guest}-trap"),
            &["print", "before", "trap"],
        );
        assert_run(&trap, 134);
        assert_eq!(trap.stdout, "before\n");
        assert!(trap.stderr.contains("wasmpod: wasm trap"), "{trap:?}");
    }
}

#[test]
fn a_wasi_0_3_component_runs_and_execs() {
    let ctd = containerd();
    let image = ctd.import("p3", guests::P3_CLI_P2.as_ref());
    let run = ctd.run(
        &["--env", "GREETING=0.3"],
        &image,
        "p3",
        &["print", "hello", "env", "GREETING", "eprint", "to stderr"],
    );
    assert_run(&run, 0);
    assert_eq!(run.stdout, "hello\nGREETING=0.3\n");
    assert!(run.stderr.contains("to stderr"), "{run:?}");
    let mut task = ctd.spawn(&[], &image, "p3-host", &["print", "up", "sleep", "600000"]);
    task.wait_for_line("up");
    let exec = ctd.ctr(&[
        "task",
        "exec",
        "--exec-id",
        "e",
        "p3-host",
        "/app.wasm",
        "print",
        "in exec",
        "fail",
    ]);
    assert_eq!(exec.status.code(), Some(1), "{exec:?}");
    assert_eq!(String::from_utf8_lossy(&exec.stdout), "in exec\n");
    ctd.kill("p3-host", "SIGKILL");
    assert_run(&task.finish(), 137);
}

#[test]
fn term_lets_a_guest_that_imports_termination_finish_its_work() {
    let ctd = containerd();
    let image = ctd.import("term", guests::AGNHOST_TERM_P1.as_ref());
    let mut task = ctd.spawn(
        &[],
        &image,
        "finisher",
        &[
            "print",
            "started",
            "on-term",
            "0",
            "300",
            "sleep",
            "600000",
            "print",
            "unreachable",
        ],
    );
    task.wait_for_line("started");
    let sent = Instant::now();
    ctd.kill("finisher", "SIGTERM");
    let run = task.finish();
    let took = sent.elapsed();
    assert_run(&run, 0);
    assert_eq!(run.stdout, "started\ngot TERM, exiting with 0 in 300 ms\n");
    // It finished its 300 ms of work after TERM, and did not wait for its 10 minute sleep.
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(30), "{took:?}");
}

#[test]
fn term_stops_a_guest_without_the_import_at_once_with_143() {
    let ctd = containerd();
    for (guest, wasm) in [("p1", guests::AGNHOST_P1), ("p2", guests::AGNHOST_P2)] {
        let image = ctd.import(guest, wasm.as_ref());
        for (id, script) in [
            ("sleeper", &["sleep", "600000"][..]),
            ("spinner", &["loop"]),
        ] {
            let id = format!("{guest}-{id}");
            let script = [&["print", "started"][..], script].concat();
            let mut task = ctd.spawn(&[], &image, &id, &script);
            task.wait_for_line("started");
            ctd.kill(&id, "SIGTERM");
            assert_run(&task.finish(), 143);
        }
        // TERM that comes before the guest runs (while it compiles) is not lost.
        let id = format!("{guest}-early");
        let task = ctd.spawn(&[], &image, &id, &["sleep", "600000"]);
        ctd.wait_running(&id);
        ctd.kill(&id, "SIGTERM");
        assert_run(&task.finish(), 143);
    }
}

#[test]
fn kill_ends_a_guest_that_ignores_term_with_137() {
    let ctd = containerd();
    let image = ctd.import("term", guests::AGNHOST_TERM_P1.as_ref());
    // A guest that imports the termination interface but never looks at it: computing, and
    // blocked in a host call.
    for (id, script) in [
        ("computing", &["print", "started", "loop"][..]),
        ("blocked", &["print", "started", "sleep", "600000"]),
    ] {
        let mut task = ctd.spawn(&[], &image, id, script);
        task.wait_for_line("started");
        ctd.kill(id, "SIGTERM");
        // TERM was delivered and the guest goes on: it is still running when KILL comes.
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(ctd.task_status(id).as_deref(), Some("RUNNING"), "{id}");
        ctd.kill(id, "SIGKILL");
        let run = task.finish();
        assert_run(&run, 137);
        assert_eq!(run.stdout, "started\n");
    }
}

#[test]
fn bind_mounts_are_the_guests_directories_read_only_ones_stay_read_only() {
    let ctd = containerd();
    let image = ctd.import("p1", guests::AGNHOST_P1.as_ref());
    let host = tempfile::tempdir().unwrap();
    let (ro, rw) = (host.path().join("ro"), host.path().join("rw"));
    std::fs::create_dir(&ro).unwrap();
    std::fs::create_dir(&rw).unwrap();
    std::fs::write(ro.join("config"), "from the host\n").unwrap();
    let mount = |dir: &std::path::Path, at: &str, mode: &str| {
        format!(
            "type=bind,src={},dst={at},options=rbind:{mode}",
            dir.display()
        )
    };
    let (ro_mount, rw_mount) = (mount(&ro, "/config", "ro"), mount(&rw, "/out", "rw"));
    let run = ctd.run(
        &["--mount", &ro_mount, "--mount", &rw_mount],
        &image,
        "mounts",
        &[
            "cat",
            "/config/config",
            "write",
            "/out/result",
            "written",
            "write",
            "/config/config",
            "changed",
        ],
    );
    assert_eq!(run.stdout, "from the host\n", "{run:?}");
    assert_ne!(run.code, 0, "the read-only mount was written: {run:?}");
    assert!(run.stderr.contains("write /config/config"), "{run:?}");
    assert_eq!(
        std::fs::read_to_string(rw.join("result")).unwrap(),
        "written\n"
    );
    assert_eq!(
        std::fs::read_to_string(ro.join("config")).unwrap(),
        "from the host\n"
    );
}

#[test]
fn a_guest_past_its_memory_limit_ends_with_137() {
    let ctd = containerd();
    let image = ctd.import("p1", guests::AGNHOST_P1.as_ref());
    let limit = ["--memory-limit", "67108864"];
    let within = ctd.run(&limit, &image, "within", &["alloc", "8"]);
    assert_run(&within, 0);
    assert_eq!(within.stdout, "allocated 8 MiB\n");
    let past = ctd.run(
        &limit,
        &image,
        "past",
        &["alloc", "256", "print", "unreachable"],
    );
    assert_run(&past, 137);
    assert!(!past.stdout.contains("unreachable"), "{past:?}");
}

#[test]
fn exec_runs_a_command_in_the_container_with_its_stdin_and_exit_code() {
    let ctd = containerd();
    let image = ctd.import("p1", guests::AGNHOST_P1.as_ref());
    let mut task = ctd.spawn(
        &["--env", "GREETING=hi"],
        &image,
        "host",
        &["print", "up", "sleep", "600000"],
    );
    task.wait_for_line("up");
    let mut exec = ctd
        .command()
        .args(["task", "exec", "--exec-id", "reader", "host", "/app.wasm"])
        .args(["env", "GREETING", "stdin", "exit", "3"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = exec.stdin.take().unwrap();
        stdin.write_all(b"one\ntwo\n").unwrap();
    }
    let out = exec.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "GREETING=hi\nread: one\nread: two\nstdin ended after 2 lines\n"
    );
    assert_eq!(ctd.task_status("host").as_deref(), Some("RUNNING"));
    ctd.kill("host", "SIGKILL");
    assert_run(&task.finish(), 137);
    // The guest's WASI calls are not in containerd's log at its default level.
    assert!(!ctd.log().contains("fd_write"), "{}", ctd.log());
}

#[test]
fn the_shim_runs_in_the_containers_cgroup_under_its_memory_limit() {
    let ctd = containerd();
    let image = ctd.import("p1", guests::AGNHOST_P1.as_ref());
    let mut task = ctd.spawn(
        &["--memory-limit", "67108864"],
        &image,
        "limited",
        &["print", "up", "sleep", "600000"],
    );
    task.wait_for_line("up");
    let pid = ctd.task_pid("limited").unwrap();
    let (memory, dir) = memory_cgroup(pid);
    assert!(memory.ends_with("/limited"), "{memory}");
    let limit = ["memory.limit_in_bytes", "memory.max"]
        .iter()
        .find_map(|f| std::fs::read_to_string(dir.join(f)).ok())
        .unwrap();
    assert_eq!(limit.trim(), "67108864");
    ctd.kill("limited", "SIGKILL");
    assert_run(&task.finish(), 137);
    // The cgroup goes with the shim.
    wait_removed(&dir);
}

#[test]
fn two_containers_run_at_once_each_with_its_own_exit() {
    let ctd = containerd();
    let p1 = ctd.import("p1", guests::AGNHOST_P1.as_ref());
    let p2 = ctd.import("p2", guests::AGNHOST_P2.as_ref());
    let mut a = ctd.spawn(&[], &p1, "a", &["print", "a", "sleep", "600000"]);
    let mut b = ctd.spawn(&[], &p2, "b", &["print", "b", "sleep", "600000"]);
    a.wait_for_line("a");
    b.wait_for_line("b");
    // Both run side by side, in processes of their own.
    assert_ne!(ctd.task_pid("a"), ctd.task_pid("b"));
    ctd.kill("a", "SIGKILL");
    let a = a.finish();
    assert_run(&a, 137);
    assert_eq!(ctd.task_status("b").as_deref(), Some("RUNNING"));
    ctd.kill("b", "SIGTERM");
    let b = b.finish();
    assert_run(&b, 143);
    assert_eq!((a.stdout.as_str(), b.stdout.as_str()), ("a\n", "b\n"));
}

#[test]
fn containers_sharing_a_network_namespace_meet_on_localhost_through_host_sockets() {
    let ctd = containerd();
    let image = ctd.import("p2", guests::AGNHOST_P2.as_ref());
    // A pod as the CRI makes it: the first container gets a network namespace, whose loopback
    // the CNI's loopback plugin brings up, and the next joins it.
    let mut server = ctd.spawn(&[], &image, "server", &["echo-server", "127.0.0.1:8080"]);
    server.wait_for_line("listening 127.0.0.1:8080");
    let pid = ctd.task_pid("server").unwrap();
    let netns = format!("/proc/{pid}/ns/net");
    let up = std::process::Command::new("nsenter")
        .args([&format!("--net={netns}"), "ip", "link", "set", "lo", "up"])
        .status()
        .unwrap();
    assert!(up.success());
    let client = ctd.run(
        &["--with-ns", &format!("network:{netns}")],
        &image,
        "client",
        &["ping", "127.0.0.1:8080", "3"],
    );
    assert_run(&client, 0);
    assert!(client.stdout.starts_with("ping p50 "), "{client:?}");
    // The listener is a kernel socket of that namespace, not of the host's.
    assert!(std::net::TcpStream::connect("127.0.0.1:8080").is_err());
    ctd.kill("server", "SIGKILL");
    assert_run(&server.finish(), 137);
}

#[test]
fn an_http_handler_component_is_served_on_8080_of_its_network_namespace() {
    let ctd = containerd();
    let handler = ctd.import("http", guests::HTTP_HANDLER_P2.as_ref());
    let web = ctd.spawn(&["--env", "QUIET=1"], &handler, "web", &[]);
    ctd.wait_running("web");
    let netns = format!("/proc/{}/ns/net", ctd.task_pid("web").unwrap());
    let up = std::process::Command::new("nsenter")
        .args([&format!("--net={netns}"), "ip", "link", "set", "lo", "up"])
        .status()
        .unwrap();
    assert!(up.success());
    // A client in the pod's network namespace (python's urllib, through nsenter) asks it over
    // the namespace's loopback, twice: a fresh instance each time.
    // The handler listens once its first instance is made: a refused connect is retried.
    let get = r#"
import time, urllib.request
start = time.monotonic()
for _ in range(2):
    while True:
        try:
            body = urllib.request.urlopen("http://127.0.0.1:8080/", timeout=10).read()
            break
        except OSError:
            if time.monotonic() - start > 10:
                raise
            time.sleep(0.01)
    print(body.decode(), end="")
"#;
    let out = std::process::Command::new("nsenter")
        .args([&format!("--net={netns}"), "python3", "-c", get])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout, "hello 1\nhello 1\n");
    // TERM: the handler stops accepting, has nothing under way, and exits 0.
    ctd.kill("web", "SIGTERM");
    assert_run(&web.finish(), 0);
}

/// A container whose root filesystem has no `.wasm` (an empty snapshot, as containerd 2.1's CRI
/// gives an image of platform `wasi/wasm` it did not unpack, or any wasm OCI artifact): the
/// shim reads the guest from the image's layers in containerd's content store, through
/// containerd's API.
#[test]
fn a_guest_missing_from_the_root_filesystem_is_read_from_the_images_layers() {
    use containerd_client::services::v1::{Container, CreateContainerRequest, container};
    use containerd_client::tonic::Request;
    use containerd_client::with_namespace;

    let ctd = Containerd::start(SHIM.as_ref());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt
        .block_on(containerd_client::Client::from_path(ctd.socket()))
        .unwrap();
    // A container of `image` on the snapshot `id`, made through containerd's API.
    let create = |id: &str, image: &str, spec: &serde_json::Value| {
        let container = Container {
            id: id.to_owned(),
            image: image.to_owned(),
            runtime: Some(container::Runtime {
                name: wasmpod_tests::containerd::RUNTIME.to_owned(),
                options: None,
            }),
            spec: Some(prost_types::Any {
                type_url: "types.containerd.io/opencontainers/runtime-spec/1/Spec".to_owned(),
                value: spec.to_string().into_bytes(),
            }),
            snapshotter: "overlayfs".to_owned(),
            snapshot_key: id.to_owned(),
            ..Default::default()
        };
        let request = CreateContainerRequest {
            container: Some(container),
        };
        rt.block_on(
            client
                .containers()
                .create(with_namespace!(request, ctd.namespace())),
        )
        .unwrap();
    };
    let spec = ctd.ctr(&["oci", "spec"]);
    let mut spec: serde_json::Value = serde_json::from_slice(&spec.stdout).unwrap();
    spec["root"]["path"] = "rootfs".into();
    for (n, artifact) in [true, false].into_iter().enumerate() {
        let kind = if artifact { "artifact" } else { "packed image" };
        let image = ctd.import_packed(
            &format!("packed-{n}"),
            guests::AGNHOST_P1.as_ref(),
            artifact,
        );
        let id = format!("packed-{n}");
        spec["process"]["args"] =
            serde_json::json!(["/app.wasm", "print", format!("from the {kind}")]);
        let prepared = ctd.ctr(&["snapshots", "prepare", &id]);
        assert!(prepared.status.success(), "{prepared:?}");
        create(&id, &image, &spec);
        let out = ctd.ctr(&["task", "start", &id]);
        assert_eq!(
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).as_ref()
            ),
            (Some(0), format!("from the {kind}\n").as_str()),
            "{kind}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            ctd.log()
        );
    }
    // An image whose layers hold no such file: the reason names the image.
    spec["process"]["args"] = serde_json::json!(["/missing.wasm"]);
    let image = ctd.import_packed("packed-2", guests::AGNHOST_P1.as_ref(), false);
    assert!(
        ctd.ctr(&["snapshots", "prepare", "packed-2"])
            .status
            .success()
    );
    create("packed-2", &image, &spec);
    let out = ctd.ctr(&["task", "start", "packed-2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("/missing.wasm: no such file") && stderr.contains(&image),
        "{stderr}"
    );
}
