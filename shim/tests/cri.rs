//! The shim under containerd's CRI plugin, driven over gRPC as the kubelet drives it
//! (`RunPodSandbox` with the runtime handler `wasmpod`, `CreateContainer`/`StartContainer` with
//! a log path, `ExecSync`, `StopContainer`, `ContainerStats`, `RemovePodSandbox`): a pod's
//! containers in one shim process, on the pod's loopback, with exec, OOM and stats as a
//! kubelet reads them.

#[path = "support/cri.rs"]
mod support;

use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use support::{Node, Spec, mounts_under, shims_of};
use wasmpod_tests::containerd::{memory_cgroup, wait_removed};
use wasmpod_tests::guests;

const SHIM: &str = env!("CARGO_BIN_EXE_containerd-shim-wasmpod-v1");

#[test]
fn a_pods_containers_run_in_one_shim_process_and_meet_on_the_pods_loopback() {
    let mut node = Node::start(SHIM);
    let image = node.ctd.import("p2", guests::AGNHOST_P2.as_ref());
    let config = node.sandbox_config("web", &[]);
    let pod = node.run_pod(&config);
    let server = node.start_container(
        &pod,
        &config,
        &Spec {
            name: "server",
            image: &image,
            args: &["echo-server", "127.0.0.1:8080"],
            ..Default::default()
        },
    );
    node.wait_for_line("web", "server", "listening 127.0.0.1:8080");
    let client = node.start_container(
        &pod,
        &config,
        &Spec {
            name: "client",
            image: &image,
            args: &[
                "ping",
                "127.0.0.1:8080",
                "3",
                "print",
                "done",
                "eprint",
                "to stderr",
            ],
            ..Default::default()
        },
    );
    let status = node.exited(&client);
    assert_eq!((status.exit_code, status.reason.as_str()), (0, "Completed"));
    assert!(status.started_at <= status.finished_at, "{status:?}");
    // Containers that end at once: containerd reads its clock for `started_at` when the shim's
    // answer to Start reaches it, and the kubelet subtracts it from `finished_at`.
    for n in 0..3 {
        let name = format!("quick-{n}");
        let quick = node.start_container(
            &pod,
            &config,
            &Spec {
                name: &name,
                image: &image,
                args: &["print", "done"],
                ..Default::default()
            },
        );
        let status = node.exited(&quick);
        assert_eq!(status.exit_code, 0, "{status:?}");
        assert!(
            status.started_at <= status.finished_at,
            "started {} ns after it finished",
            status.started_at - status.finished_at
        );
    }
    let log = node.log("web", "client");
    // (Each stream in order; the two streams are separate fifos.)
    let stream = |name: &str| -> Vec<String> {
        log.iter()
            .filter(|(s, _)| s == name)
            .map(|(_, l)| l.clone())
            .collect()
    };
    assert!(stream("stdout")[0].starts_with("ping p50 "), "{log:?}");
    assert_eq!(stream("stdout")[1..], ["done"]);
    assert_eq!(stream("stderr"), ["to stderr"]);
    // The sandbox and both containers: one process.
    assert_eq!(shims_of(&[&pod, &server, &client]).len(), 1);
    // The listener is the pod's, not the host's.
    assert!(std::net::TcpStream::connect("127.0.0.1:8080").is_err());

    // TERM for a guest without the termination import: 143 at once.
    let begun = Instant::now();
    node.stop_container(&server, 30);
    let status = node.exited(&server);
    assert_eq!((status.exit_code, status.reason.as_str()), (143, "Error"));
    assert!(
        begun.elapsed() < Duration::from_secs(10),
        "{:?}",
        begun.elapsed()
    );

    let bundles = node.ctd.dir().join("state");
    assert!(
        !mounts_under(&bundles).is_empty(),
        "the root filesystems are mounted"
    );
    node.remove_pod(&pod);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !shims_of(&[&pod]).is_empty() {
        assert!(Instant::now() < deadline, "the pod's shim is still there");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(mounts_under(&bundles), Vec::<String>::new());
}

#[test]
fn exec_sync_runs_commands_and_probes_in_fresh_instances_and_honours_its_timeout() {
    let mut node = Node::start(SHIM);
    let image = node.ctd.import("probed", guests::PROBED_P2.as_ref());
    let config = node.sandbox_config("probed", &[]);
    let pod = node.run_pod(&config);
    let id = node.start_container(
        &pod,
        &config,
        &Spec {
            name: "app",
            image: &image,
            args: &["print", "up", "sleep", "600000"],
            env: &[("PROBE_DIR", "/data"), ("GREETING", "hello")],
            ..Default::default()
        },
    );
    node.wait_for_line("probed", "app", "up");

    // A command: the entry point with this argv, the container's environment.
    // (A WASI 0.2 component exits 0 or 1.)
    let out = node
        .exec_sync(&id, &["/app.wasm", "env", "GREETING", "exit", "1"], 10)
        .unwrap();
    assert_eq!(
        (out.exit_code, String::from_utf8_lossy(&out.stdout).as_ref()),
        (1, "GREETING=hello\n")
    );
    // An exported probe, failing until its file exists (written by another exec, in the
    // container's own directory).
    let probe = node.exec_sync(&id, &["readiness"], 10).unwrap();
    assert_eq!(probe.exit_code, 1, "{probe:?}");
    assert!(
        String::from_utf8_lossy(&probe.stderr).contains("/data/readiness"),
        "{probe:?}"
    );
    let write = node
        .exec_sync(&id, &["/app.wasm", "write", "/data/readiness", "ok"], 10)
        .unwrap();
    assert_eq!(write.exit_code, 0, "{write:?}");
    assert_eq!(
        node.exec_sync(&id, &["readiness"], 10).unwrap().exit_code,
        0
    );

    // `kubectl exec`: the CRI's Exec, streamed through containerd's streaming server over a
    // WebSocket (`v4.channel.k8s.io`: stdout on channel 1, the end's status on channel 3).
    let (stdout, status) =
        node.exec_streamed(&id, &["/app.wasm", "print", "streamed", "exit", "1"]);
    assert_eq!(stdout, "streamed\n");
    assert!(status.contains("NonZeroExitCode"), "{status}");

    // A command past its timeout is ended.
    let begun = Instant::now();
    let hung = node.exec_sync(&id, &["/app.wasm", "loop"], 1);
    assert!(
        hung.is_err() || hung.as_ref().unwrap().exit_code != 0,
        "{hung:?}"
    );
    assert!(
        begun.elapsed() < Duration::from_secs(5),
        "{:?}",
        begun.elapsed()
    );
    // The round trip of a small exec, for the record.
    let begun = Instant::now();
    for _ in 0..10 {
        node.exec_sync(&id, &["readiness"], 10).unwrap();
    }
    eprintln!("ExecSync round trip: {:?}", begun.elapsed() / 10);
    // The container kept running through all of it.
    assert_eq!(
        node.status(&id).state,
        cri::ContainerState::ContainerRunning as i32
    );
    node.remove_pod(&pod);
}

#[test]
fn a_memory_limit_ends_a_container_as_oom_killed_and_stats_are_the_containers_own() {
    let mut node = Node::start(SHIM);
    let image = node.ctd.import("p1", guests::AGNHOST_P1.as_ref());
    let config = node.sandbox_config("limits", &[]);
    let pod = node.run_pod(&config);
    let holder = node.start_container(&pod, &config, &Spec::holder(&image));
    let spinner = node.start_container(
        &pod,
        &config,
        &Spec {
            name: "spinner",
            image: &image,
            args: &["print", "spinning", "loop"],
            ..Default::default()
        },
    );
    node.wait_for_line("limits", "holder", "held");
    node.wait_for_line("limits", "spinner", "spinning");
    std::thread::sleep(Duration::from_millis(300));
    let (held, spun) = (node.stats(&holder), node.stats(&spinner));
    let memory = |s: &cri::ContainerStats| {
        s.memory
            .as_ref()
            .unwrap()
            .working_set_bytes
            .as_ref()
            .unwrap()
            .value
    };
    let cpu = |s: &cri::ContainerStats| {
        s.cpu
            .as_ref()
            .unwrap()
            .usage_core_nano_seconds
            .as_ref()
            .unwrap()
            .value
    };
    assert!(
        (8 << 20..10 << 20).contains(&memory(&held)),
        "holder {}",
        memory(&held)
    );
    assert!(memory(&spun) < 4 << 20, "spinner {}", memory(&spun));
    assert!(cpu(&spun) > 100_000_000, "spinner {}", cpu(&spun));
    assert!(
        cpu(&held) < cpu(&spun) / 2,
        "holder {} spinner {}",
        cpu(&held),
        cpu(&spun)
    );

    // In-place resize: the container's budget, which its execs draw from too.
    let alloc = ["/app.wasm", "alloc", "40"];
    assert_eq!(node.exec_sync(&holder, &alloc, 10).unwrap().exit_code, 0);
    node.update(&holder, 32 << 20).unwrap();
    assert_eq!(node.exec_sync(&holder, &alloc, 10).unwrap().exit_code, 137);
    let refused = node.update(&holder, 4 << 20).unwrap_err();
    assert!(refused.message().contains("below"), "{refused:?}");

    // The pod's stats: the sandbox's (the shim process) and each container's.
    let listed = node.rt.block_on(
        node.client
            .list_pod_sandbox_stats(cri::ListPodSandboxStatsRequest { filter: None }),
    );
    let listed = listed.unwrap().into_inner().stats;
    let ours = listed
        .iter()
        .find(|s| s.attributes.as_ref().is_some_and(|a| a.id == pod))
        .unwrap();
    let containers = &ours.linux.as_ref().unwrap().containers;
    assert_eq!(containers.len(), 2, "{ours:?}");

    node.oom_killed(&pod, &config, &image, 256);
    // The others run on.
    assert_eq!(
        node.status(&holder).state,
        cri::ContainerState::ContainerRunning as i32
    );
    node.remove_pod(&pod);
}

#[test]
fn stop_gives_term_then_kill_after_the_grace_period_and_traps_say_why_in_the_log() {
    let mut node = Node::start(SHIM);
    let term = node.ctd.import("term", guests::AGNHOST_TERM_P1.as_ref());
    let p1 = node.ctd.import("p1", guests::AGNHOST_P1.as_ref());
    let config = node.sandbox_config("stopping", &[]);
    let pod = node.run_pod(&config);
    let stubborn = node.start_container(
        &pod,
        &config,
        &Spec {
            name: "stubborn",
            image: &term,
            args: &["print", "started", "sleep", "600000"],
            ..Default::default()
        },
    );
    node.wait_for_line("stopping", "stubborn", "started");
    let begun = Instant::now();
    node.stop_container(&stubborn, 1);
    let status = node.exited(&stubborn);
    let took = begun.elapsed();
    assert_eq!(status.exit_code, 137, "{status:?}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(10),
        "{took:?}"
    );

    let trap = node.start_container(
        &pod,
        &config,
        &Spec {
            name: "trap",
            image: &p1,
            args: &["print", "before", "trap"],
            ..Default::default()
        },
    );
    let status = node.exited(&trap);
    assert_eq!((status.exit_code, status.reason.as_str()), (134, "Error"));
    let log = node.log("stopping", "trap");
    assert!(
        log.contains(&("stdout".to_owned(), "before".to_owned())),
        "{log:?}"
    );
    assert!(
        log.iter()
            .any(|(s, l)| s == "stderr" && l.starts_with("wasmpod: wasm trap")),
        "{log:?}"
    );
    node.remove_pod(&pod);
}

#[test]
fn pod_annotations_set_the_port_an_http_handler_serves_and_bad_ones_are_refused() {
    let mut node = Node::start(SHIM);
    let handler = node.ctd.import("http", guests::HTTP_HANDLER_P2.as_ref());
    let client = node.ctd.import("p2", guests::AGNHOST_P2.as_ref());
    let config = node.sandbox_config("served", &[("wasmpod.dev/http-port", "8000")]);
    let pod = node.run_pod(&config);
    node.start_container(
        &pod,
        &config,
        &Spec {
            name: "web",
            image: &handler,
            env: &[("QUIET", "1")],
            ..Default::default()
        },
    );
    let get = node.start_container(
        &pod,
        &config,
        &Spec {
            name: "get",
            image: &client,
            args: &[
                "connect",
                "127.0.0.1:8000",
                "GET / HTTP/1.0\r\nHost: pod\r\n\r\n",
            ],
            ..Default::default()
        },
    );
    let status = node.exited(&get);
    let log = node.log("served", "get");
    assert_eq!(
        status.exit_code,
        0,
        "{log:?} {:?}",
        node.log("served", "web")
    );
    assert!(
        log[0].1.starts_with("reply HTTP/1.0 200 OK"),
        "{log:?} {:?}",
        node.log("served", "web")
    );
    assert!(log.iter().any(|(_, l)| l == "hello 1"), "{log:?}");

    let bad = node.sandbox_config("bad", &[("wasmpod.dev/http-port", "eighty")]);
    let bad_pod = node.run_pod(&bad);
    // The CRI makes the task (where the annotations are read) at StartContainer.
    let created = node
        .create_container(
            &bad_pod,
            &bad,
            &Spec {
                name: "web",
                image: &handler,
                ..Default::default()
            },
        )
        .unwrap();
    let started = node
        .rt
        .block_on(node.client.start_container(cri::StartContainerRequest {
            container_id: created,
        }));
    let refused = started.unwrap_err();
    assert!(
        refused
            .message()
            .contains("metadata.annotations[wasmpod.dev/http-port]"),
        "{refused:?}"
    );
    node.remove_pod(&pod);
    node.remove_pod(&bad_pod);
}

/// A kubelet with the systemd cgroup driver names the pod's cgroup as a slice
/// (`kubepods-besteffort-pod<uid>.slice`), and containerd's CRI gives the shim systemd's
/// `slice:cri-containerd:<id>`: the shim runs in that scope's cgroup, under the slice's parents
/// as systemd lays them out, and the scope goes with the pod.
#[test]
fn a_systemd_cgroup_parent_puts_the_pod_in_its_scope_under_the_slice() {
    let mut node = Node::start(SHIM);
    let image = node.ctd.import("p1", guests::AGNHOST_P1.as_ref());
    let top = format!("wasmpodcri{}", std::process::id());
    let _slices = Slices(top.clone());
    let mut config = node.sandbox_config("sliced", &[]);
    if let Some(linux) = &mut config.linux {
        linux.cgroup_parent = format!("{top}-podsliced.slice");
    }
    let pod = node.run_pod(&config);
    node.start_container(
        &pod,
        &config,
        &Spec {
            name: "app",
            image: &image,
            args: &["print", "up", "sleep", "600000"],
            ..Default::default()
        },
    );
    node.wait_for_line("sliced", "app", "up");
    let [shim] = shims_of(&[&pod])[..] else {
        panic!("one shim for the pod")
    };
    let scope = format!("/{top}.slice/{top}-podsliced.slice/cri-containerd-{pod}.scope");
    let (memory, dir) = memory_cgroup(shim);
    assert_eq!(memory, scope);
    node.remove_pod(&pod);
    wait_removed(&dir);
}

/// The test's slices (`{0}.slice` and the pod's inside it), removed from every hierarchy at the
/// end as a kubelet would remove them.
struct Slices(String);

impl Drop for Slices {
    fn drop(&mut self) {
        let hierarchies = std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
            .map(|h| h.path())
            .chain(["/sys/fs/cgroup".into()]);
        for hierarchy in hierarchies {
            let top = hierarchy.join(format!("{}.slice", self.0));
            for slice in std::fs::read_dir(&top).into_iter().flatten().flatten() {
                let _ = std::fs::remove_dir(slice.path());
            }
            let _ = std::fs::remove_dir(&top);
        }
    }
}

/// The kubelet limits a pod's cgroup to its containers' limits (plus the RuntimeClass's
/// overhead): the shim's own memory is in that cgroup too. A container that grows into what the
/// shim needs ends `OOMKilled` alone, as the pod's cgroup would end it, instead of the kernel
/// killing the shim and every container of the pod with it.
#[test]
fn a_container_that_outgrows_the_pods_cgroup_ends_oom_killed_and_the_pod_runs_on() {
    let mut node = Node::start(SHIM);
    let image = node.ctd.import("p1", guests::AGNHOST_P1.as_ref());
    let config = node.sandbox_config("tight", &[]);
    let parent = config.linux.as_ref().unwrap().cgroup_parent.clone();
    wasmpod_tests::limit_memory(&parent, 64 << 20);
    let pod = node.run_pod(&config);
    let holder = node.start_container(&pod, &config, &Spec::holder(&image));
    node.wait_for_line("tight", "holder", "held");
    node.oom_killed(&pod, &config, &image, 60);
    assert_eq!(
        node.status(&holder).state,
        cri::ContainerState::ContainerRunning as i32
    );
    let out = node
        .exec_sync(&holder, &["/app.wasm", "print", "alive"], 10)
        .unwrap();
    assert_eq!(
        (out.exit_code, String::from_utf8_lossy(&out.stdout).trim()),
        (0, "alive")
    );
    // 48 MiB more fit in the holder's 64 beside its 8, not in the pod's cgroup beside the shim
    // and its 8 MiB to grow; once the kubelet resizes the pod (its cgroup's limit raised), the
    // next exec fits.
    let alloc = ["/app.wasm", "alloc", "48"];
    assert_eq!(node.exec_sync(&holder, &alloc, 10).unwrap().exit_code, 137);
    wasmpod_tests::limit_memory(&parent, 256 << 20);
    assert_eq!(node.exec_sync(&holder, &alloc, 10).unwrap().exit_code, 0);
    node.remove_pod(&pod);
}
