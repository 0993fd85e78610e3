//! The shim under containerd's CRI plugin, driven over gRPC as the kubelet drives it
//! (`RunPodSandbox` with the runtime handler `wasmpod`, `CreateContainer`/`StartContainer` with
//! a log path, `ExecSync`, `StopContainer`, `ContainerStats`, `RemovePodSandbox`): a pod's
//! containers in one shim process, on the pod's loopback, with exec, OOM and stats as a
//! kubelet reads them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;
use wasmpod_tests::containerd::{Containerd, SANDBOX_IMAGE};
use wasmpod_tests::guests;

const SHIM: &str = env!("CARGO_BIN_EXE_containerd-shim-wasmpod-v1");

/// A CRI containerd and a client of its runtime service.
struct Node {
    ctd: Containerd,
    rt: tokio::runtime::Runtime,
    client: RuntimeServiceClient<Channel>,
    logs: PathBuf,
}

impl Drop for Node {
    /// Every pod is stopped and removed through the CRI (its network torn down by the CNI)
    /// before containerd stops, also when a test failed half-way.
    fn drop(&mut self) {
        let listed = self.rt.block_on(
            self.client
                .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }),
        );
        for pod in listed.map(|l| l.into_inner().items).unwrap_or_default() {
            let _ = self
                .rt
                .block_on(self.client.stop_pod_sandbox(cri::StopPodSandboxRequest {
                    pod_sandbox_id: pod.id.clone(),
                }));
            let _ = self.rt.block_on(self.client.remove_pod_sandbox(
                cri::RemovePodSandboxRequest {
                    pod_sandbox_id: pod.id,
                },
            ));
        }
    }
}

/// A container to create in a pod.
#[derive(Default)]
struct Spec<'a> {
    name: &'a str,
    image: &'a str,
    args: &'a [&'a str],
    env: &'a [(&'a str, &'a str)],
    memory_limit: i64,
}

impl Node {
    fn start() -> Node {
        let ctd = Containerd::start_cri(SHIM.as_ref());
        ctd.import("pause", guests::AGNHOST_P1.as_ref());
        assert_eq!(
            SANDBOX_IMAGE, "docker.io/wasmpod/pause:latest",
            "the sandbox image is the one imported"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let socket = ctd.socket().to_owned();
        let client = rt.block_on(async {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let socket = socket.clone();
                let channel = tonic::transport::Endpoint::try_from("http://[::]:50051")
                    .unwrap()
                    .connect_with_connector(tower::service_fn(move |_| {
                        let socket = socket.clone();
                        async move {
                            let stream = tokio::net::UnixStream::connect(socket).await?;
                            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                        }
                    }))
                    .await
                    .unwrap();
                let mut client = RuntimeServiceClient::new(channel);
                let ready = client
                    .status(cri::StatusRequest { verbose: false })
                    .await
                    .is_ok_and(|s| {
                        s.into_inner()
                            .status
                            .is_some_and(|s| s.conditions.iter().all(|c| c.status))
                    });
                if ready {
                    break client;
                }
                assert!(Instant::now() < deadline, "the CRI is not ready");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let logs = ctd.dir().join("pods");
        Node {
            ctd,
            rt,
            client,
            logs,
        }
    }

    fn sandbox_config(&self, name: &str, annotations: &[(&str, &str)]) -> cri::PodSandboxConfig {
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.to_owned(),
                uid: format!("uid-{name}"),
                namespace: "default".to_owned(),
                attempt: 0,
            }),
            hostname: name.to_owned(),
            log_directory: self.logs.join(name).to_string_lossy().into_owned(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    /// RunPodSandbox: the pod's id.
    fn run_pod(&mut self, config: &cri::PodSandboxConfig) -> String {
        let request = cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: "wasmpod".to_owned(),
        };
        let response = self.rt.block_on(self.client.run_pod_sandbox(request));
        let response = response.unwrap_or_else(|e| panic!("{e}\n{}", self.ctd.log()));
        response.into_inner().pod_sandbox_id
    }

    /// CreateContainer and StartContainer: the container's id.
    fn start_container(
        &mut self,
        pod: &str,
        config: &cri::PodSandboxConfig,
        spec: &Spec,
    ) -> String {
        let id = self.create_container(pod, config, spec).unwrap();
        let started = self
            .rt
            .block_on(self.client.start_container(cri::StartContainerRequest {
                container_id: id.clone(),
            }));
        started.unwrap_or_else(|e| panic!("{e}\n{}", self.ctd.log()));
        id
    }

    fn create_container(
        &mut self,
        pod: &str,
        config: &cri::PodSandboxConfig,
        spec: &Spec,
    ) -> Result<String, tonic::Status> {
        let request = cri::CreateContainerRequest {
            pod_sandbox_id: pod.to_owned(),
            config: Some(cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata {
                    name: spec.name.to_owned(),
                    attempt: 0,
                }),
                image: Some(cri::ImageSpec {
                    image: spec.image.to_owned(),
                    ..Default::default()
                }),
                args: spec.args.iter().map(|a| a.to_string()).collect(),
                envs: spec
                    .env
                    .iter()
                    .map(|(k, v)| cri::KeyValue {
                        key: k.to_string(),
                        value: v.to_string(),
                    })
                    .collect(),
                log_path: format!("{}.log", spec.name),
                linux: Some(cri::LinuxContainerConfig {
                    resources: Some(cri::LinuxContainerResources {
                        memory_limit_in_bytes: spec.memory_limit,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            sandbox_config: Some(config.clone()),
        };
        let created = self.rt.block_on(self.client.create_container(request))?;
        Ok(created.into_inner().container_id)
    }

    fn status(&mut self, id: &str) -> cri::ContainerStatus {
        let request = cri::ContainerStatusRequest {
            container_id: id.to_owned(),
            verbose: false,
        };
        let status = self.rt.block_on(self.client.container_status(request));
        status.unwrap().into_inner().status.unwrap()
    }

    /// Waits until container `id` has exited; its status.
    fn exited(&mut self, id: &str) -> cri::ContainerStatus {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = self.status(id);
            if status.state == cri::ContainerState::ContainerExited as i32 {
                return status;
            }
            assert!(Instant::now() < deadline, "{id} did not exit: {status:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn exec_sync(
        &mut self,
        id: &str,
        cmd: &[&str],
        timeout: i64,
    ) -> Result<cri::ExecSyncResponse, tonic::Status> {
        let request = cri::ExecSyncRequest {
            container_id: id.to_owned(),
            cmd: cmd.iter().map(|c| c.to_string()).collect(),
            timeout,
        };
        Ok(self
            .rt
            .block_on(self.client.exec_sync(request))?
            .into_inner())
    }

    fn stop_container(&mut self, id: &str, timeout: i64) {
        let request = cri::StopContainerRequest {
            container_id: id.to_owned(),
            timeout,
        };
        self.rt
            .block_on(self.client.stop_container(request))
            .unwrap();
    }

    fn stats(&mut self, id: &str) -> cri::ContainerStats {
        let request = cri::ContainerStatsRequest {
            container_id: id.to_owned(),
        };
        let stats = self.rt.block_on(self.client.container_stats(request));
        stats.unwrap().into_inner().stats.unwrap()
    }

    fn remove_pod(&mut self, pod: &str) {
        let stopped = self
            .rt
            .block_on(self.client.stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: pod.to_owned(),
            }));
        stopped.unwrap();
        let removed = self.rt.block_on(self.client.remove_pod_sandbox(
            cri::RemovePodSandboxRequest {
                pod_sandbox_id: pod.to_owned(),
            },
        ));
        removed.unwrap();
    }

    /// The CRI log of container `name` of pod `pod`: (stream, line) pairs, each line checked
    /// to be in the CRI's format (`TIMESTAMP STREAM F|P TEXT`).
    fn log(&self, pod: &str, name: &str) -> Vec<(String, String)> {
        let text = std::fs::read_to_string(self.logs.join(pod).join(format!("{name}.log")))
            .unwrap_or_default();
        text.lines()
            .map(|line| {
                let mut parts = line.splitn(4, ' ');
                let (time, stream, tag, text) = (
                    parts.next().unwrap(),
                    parts.next().unwrap_or_default(),
                    parts.next().unwrap_or_default(),
                    parts.next().unwrap_or_default(),
                );
                assert!(time.contains('T') && time.ends_with('Z'), "{line}");
                assert_eq!(tag, "F", "{line}");
                (stream.to_owned(), text.to_owned())
            })
            .collect()
    }

    /// Waits until container `name`'s log has a line `line` on stdout.
    fn wait_for_line(&self, pod: &str, name: &str, line: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self
            .log(pod, name)
            .iter()
            .any(|(s, l)| s == "stdout" && l == line)
        {
            assert!(
                Instant::now() < deadline,
                "no {line:?} in {name}'s log: {:?}",
                self.log(pod, name)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The shim processes serving pod sandbox `pod` (their `-id` is the sandbox's, or a container's
/// of it).
fn shims_of(ids: &[&str]) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let shim = args
            .first()
            .is_some_and(|a| a.ends_with(b"containerd-shim-wasmpod-v1"));
        let ours = args
            .windows(2)
            .any(|w| w[0] == b"-id" && ids.iter().any(|id| w[1] == id.as_bytes()));
        if shim && ours {
            pids.push(pid);
        }
    }
    pids
}

fn mounts_under(dir: &Path) -> Vec<String> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mounts
        .lines()
        .filter(|l| l.contains(&*dir.to_string_lossy()))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_pods_containers_run_in_one_shim_process_and_meet_on_the_pods_loopback() {
    let mut node = Node::start();
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
    let mut node = Node::start();
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
    let mut node = Node::start();
    let image = node.ctd.import("p1", guests::AGNHOST_P1.as_ref());
    let config = node.sandbox_config("limits", &[]);
    let pod = node.run_pod(&config);
    let holder = node.start_container(
        &pod,
        &config,
        &Spec {
            name: "holder",
            image: &image,
            args: &["alloc", "8", "print", "held", "sleep", "600000"],
            memory_limit: 64 << 20,
            ..Default::default()
        },
    );
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

    let hog = node.start_container(
        &pod,
        &config,
        &Spec {
            name: "hog",
            image: &image,
            args: &["alloc", "256", "print", "unreachable"],
            memory_limit: 64 << 20,
            ..Default::default()
        },
    );
    let status = node.exited(&hog);
    assert_eq!(
        (status.exit_code, status.reason.as_str()),
        (137, "OOMKilled"),
        "{status:?}"
    );
    assert!(
        !node
            .log("limits", "hog")
            .iter()
            .any(|(_, l)| l == "unreachable")
    );
    // The others run on.
    assert_eq!(
        node.status(&holder).state,
        cri::ContainerState::ContainerRunning as i32
    );
    node.remove_pod(&pod);
}

#[test]
fn stop_gives_term_then_kill_after_the_grace_period_and_traps_say_why_in_the_log() {
    let mut node = Node::start();
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
    assert_eq!(log[0], ("stdout".to_owned(), "before".to_owned()));
    assert!(
        log.iter()
            .any(|(s, l)| s == "stderr" && l.starts_with("wasmpod: wasm trap")),
        "{log:?}"
    );
    node.remove_pod(&pod);
}

#[test]
fn pod_annotations_set_the_port_an_http_handler_serves_and_bad_ones_are_refused() {
    let mut node = Node::start();
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
