//! A CRI containerd and a client of its runtime service, as the kubelet drives it: what the
//! shim's CRI tests and benchmark share.

#![allow(
    dead_code,
    reason = "each test binary and the benchmark use a part of it"
)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;
use wasmpod_tests::containerd::{Containerd, SANDBOX_IMAGE};
use wasmpod_tests::guests;

/// A CRI containerd and a client of its runtime service.
pub(crate) struct Node {
    pub(crate) ctd: Containerd,
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) client: RuntimeServiceClient<Channel>,
    pub(crate) logs: PathBuf,
}

/// A client of the CRI at `socket`, once the CRI says it is ready.
async fn connect(socket: &Path) -> RuntimeServiceClient<Channel> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let socket = socket.to_owned();
        let channel = tonic::transport::Endpoint::try_from("http://[::]:50051")
            .unwrap()
            .connect_with_connector(tower::service_fn(move |_| {
                let socket = socket.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(socket).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            }))
            .await;
        if let Ok(channel) = channel {
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
                return client;
            }
        }
        assert!(Instant::now() < deadline, "the CRI is not ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// This test process's pods' cgroups go under this one.
pub(crate) fn cgroup_root() -> String {
    format!("/wasmpod-cri-{}", std::process::id())
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
        // Each pod's shim ends once containerd has deleted its last task (containerd does that
        // after the CRI's removal returns). One still there is reported with containerd's log,
        // and ended, so that no test leaves a process behind.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut left = shims_at(self.ctd.socket());
        while !left.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            left = shims_at(self.ctd.socket());
        }
        if !left.is_empty() {
            eprintln!(
                "shims {left:?} still run after their pods' removal:\n{}",
                self.ctd.log()
            );
            for pid in left {
                // SAFETY: signalling a process by pid.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
        // The pods' cgroups (their sandboxes' went with the shims), in every hierarchy.
        let hierarchies = std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten();
        for hierarchy in hierarchies
            .map(|h| h.path())
            .chain(["/sys/fs/cgroup".into()])
        {
            let root = hierarchy.join(cgroup_root().trim_start_matches('/'));
            for pod in std::fs::read_dir(&root).into_iter().flatten().flatten() {
                let _ = std::fs::remove_dir(pod.path());
            }
            let _ = std::fs::remove_dir(&root);
        }
    }
}

/// A container to create in a pod.
#[derive(Default)]
pub(crate) struct Spec<'a> {
    pub(crate) name: &'a str,
    pub(crate) image: &'a str,
    pub(crate) args: &'a [&'a str],
    pub(crate) env: &'a [(&'a str, &'a str)],
    pub(crate) memory_limit: i64,
}

impl<'a> Spec<'a> {
    /// `holder`: takes 8 MiB of its 64 MiB limit, prints `held` and sleeps.
    pub(crate) fn holder(image: &'a str) -> Spec<'a> {
        Spec {
            name: "holder",
            image,
            args: &["alloc", "8", "print", "held", "sleep", "600000"],
            memory_limit: 64 << 20,
            ..Default::default()
        }
    }
}

impl Node {
    /// Starts containerd (with the CRI) with `shim`, and a client.
    pub(crate) fn start(shim: &str) -> Node {
        Node::on(Containerd::start_cri(shim.as_ref()))
    }

    /// Starts containerd as a node has it before wasmpod is installed (see
    /// [`Containerd::start_stock`]), and a client.
    pub(crate) fn start_stock(shim: &str) -> Node {
        Node::on(Containerd::start_stock(shim.as_ref()))
    }

    fn on(ctd: Containerd) -> Node {
        ctd.import("pause", guests::AGNHOST_P1.as_ref());
        assert_eq!(
            SANDBOX_IMAGE, "docker.io/wasmpod/pause:latest",
            "the sandbox image is the one imported"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = rt.block_on(connect(ctd.socket()));
        let logs = ctd.dir().join("pods");
        Node {
            ctd,
            rt,
            client,
            logs,
        }
    }

    /// A new client, once the CRI is ready (after containerd restarted).
    pub(crate) fn reconnect(&mut self) {
        self.client = self.rt.block_on(connect(self.ctd.socket()));
    }

    pub(crate) fn sandbox_config(
        &self,
        name: &str,
        annotations: &[(&str, &str)],
    ) -> cri::PodSandboxConfig {
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.to_owned(),
                uid: format!("uid-{name}"),
                namespace: "default".to_owned(),
                attempt: 0,
            }),
            hostname: name.to_owned(),
            log_directory: self.logs.join(name).to_string_lossy().into_owned(),
            // The pod's cgroup, as the kubelet names one (cgroupfs).
            linux: Some(cri::LinuxPodSandboxConfig {
                cgroup_parent: format!("{}/{name}", cgroup_root()),
                ..Default::default()
            }),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    /// RunPodSandbox: the pod's id.
    pub(crate) fn run_pod(&mut self, config: &cri::PodSandboxConfig) -> String {
        self.try_run_pod(config)
            .unwrap_or_else(|e| panic!("{e}\n{}", self.ctd.log()))
    }

    /// RunPodSandbox with the handler `wasmpod`: the pod's id, or the CRI's refusal.
    pub(crate) fn try_run_pod(
        &mut self,
        config: &cri::PodSandboxConfig,
    ) -> Result<String, tonic::Status> {
        let request = cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: "wasmpod".to_owned(),
        };
        let response = self.rt.block_on(self.client.run_pod_sandbox(request))?;
        Ok(response.into_inner().pod_sandbox_id)
    }

    /// CreateContainer and StartContainer: the container's id.
    pub(crate) fn start_container(
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

    pub(crate) fn create_container(
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

    /// Starts a container `hog` in `pod` with a 64 MiB limit that allocates `mib` MiB, and
    /// checks that it ends `OOMKilled` before printing anything.
    pub(crate) fn oom_killed(
        &mut self,
        pod: &str,
        config: &cri::PodSandboxConfig,
        image: &str,
        mib: u32,
    ) {
        let mib = mib.to_string();
        let hog = self.start_container(
            pod,
            config,
            &Spec {
                name: "hog",
                image,
                args: &["alloc", &mib, "print", "unreachable"],
                memory_limit: 64 << 20,
                ..Default::default()
            },
        );
        let status = self.exited_with(&hog, "OOMKilled");
        assert_eq!(
            (status.exit_code, status.reason.as_str()),
            (137, "OOMKilled"),
            "{status:?}\n{}",
            self.ctd.log()
        );
        let pod_name = &config.metadata.as_ref().unwrap().name;
        let printed = self.log(pod_name, "hog");
        assert!(
            !printed.iter().any(|(_, l)| l == "unreachable"),
            "{printed:?}"
        );
    }

    pub(crate) fn status(&mut self, id: &str) -> cri::ContainerStatus {
        let request = cri::ContainerStatusRequest {
            container_id: id.to_owned(),
            verbose: false,
        };
        let status = self.rt.block_on(self.client.container_status(request));
        status.unwrap().into_inner().status.unwrap()
    }

    /// Waits until container `id` has exited with `reason` (containerd's CRI takes the reason
    /// from an event it handles apart from the exit); its status.
    pub(crate) fn exited_with(&mut self, id: &str, reason: &str) -> cri::ContainerStatus {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let status = self.exited(id);
            if status.reason == reason || Instant::now() >= deadline {
                return status;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until container `id` has exited; its status.
    pub(crate) fn exited(&mut self, id: &str) -> cri::ContainerStatus {
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

    pub(crate) fn exec_sync(
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

    /// The id of the container named `name` (in any pod).
    pub(crate) fn container_id(&mut self, name: &str) -> String {
        let listed = self.rt.block_on(
            self.client
                .list_containers(cri::ListContainersRequest { filter: None }),
        );
        listed
            .unwrap()
            .into_inner()
            .containers
            .into_iter()
            .find(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))
            .unwrap()
            .id
    }

    /// The CRI's Exec (`kubectl exec`) of `cmd` in container `id`, through containerd's
    /// streaming server: what it wrote to stdout, and the status it ended with (channel 3).
    pub(crate) fn exec_streamed(&mut self, id: &str, cmd: &[&str]) -> (String, String) {
        use futures_util::StreamExt;
        let request = cri::ExecRequest {
            container_id: id.to_owned(),
            cmd: cmd.iter().map(|c| c.to_string()).collect(),
            stdout: true,
            stderr: true,
            ..Default::default()
        };
        let url = self
            .rt
            .block_on(self.client.exec(request))
            .unwrap()
            .into_inner()
            .url;
        self.rt.block_on(async {
            use tokio_tungstenite::tungstenite::client::IntoClientRequest;
            let mut request = url
                .replace("http://", "ws://")
                .into_client_request()
                .unwrap();
            request.headers_mut().insert(
                "Sec-WebSocket-Protocol",
                "v4.channel.k8s.io".parse().unwrap(),
            );
            let authority = request.uri().authority().unwrap().to_string();
            let tcp = tokio::net::TcpStream::connect(authority).await.unwrap();
            let (mut ws, _) = tokio_tungstenite::client_async(request, tcp).await.unwrap();
            let (mut stdout, mut status) = (Vec::new(), Vec::new());
            let deadline = Duration::from_secs(20);
            while let Ok(Some(Ok(message))) = tokio::time::timeout(deadline, ws.next()).await {
                let data = message.into_data();
                match data.first() {
                    Some(1) => stdout.extend_from_slice(&data[1..]),
                    Some(3) => status.extend_from_slice(&data[1..]),
                    _ => {}
                }
            }
            (
                String::from_utf8_lossy(&stdout).into_owned(),
                String::from_utf8_lossy(&status).into_owned(),
            )
        })
    }

    pub(crate) fn stop_container(&mut self, id: &str, timeout: i64) {
        let request = cri::StopContainerRequest {
            container_id: id.to_owned(),
            timeout,
        };
        self.rt
            .block_on(self.client.stop_container(request))
            .unwrap();
    }

    /// UpdateContainerResources: a new memory limit.
    pub(crate) fn update(&mut self, id: &str, memory: i64) -> Result<(), tonic::Status> {
        let request = cri::UpdateContainerResourcesRequest {
            container_id: id.to_owned(),
            linux: Some(cri::LinuxContainerResources {
                memory_limit_in_bytes: memory,
                ..Default::default()
            }),
            ..Default::default()
        };
        self.rt
            .block_on(self.client.update_container_resources(request))
            .map(|_| ())
    }

    pub(crate) fn stats(&mut self, id: &str) -> cri::ContainerStats {
        let request = cri::ContainerStatsRequest {
            container_id: id.to_owned(),
        };
        let stats = self.rt.block_on(self.client.container_stats(request));
        stats.unwrap().into_inner().stats.unwrap()
    }

    pub(crate) fn remove_pod(&mut self, pod: &str) {
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
    pub(crate) fn log(&self, pod: &str, name: &str) -> Vec<(String, String)> {
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
    pub(crate) fn wait_for_line(&self, pod: &str, name: &str, line: &str) {
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

/// The pids of the processes whose argv `matches`.
fn processes(matches: impl Fn(&[&[u8]]) -> bool) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if matches(&args) {
            pids.push(pid);
        }
    }
    pids
}

/// The shim processes serving pod sandbox `pod` (their `-id` is the sandbox's, or a container's
/// of it).
pub(crate) fn shims_of(ids: &[&str]) -> Vec<u32> {
    processes(|args| {
        // Not only the first: a shim run under a wrapper (valgrind, as tools/startup-order.py
        // runs it) has the wrapper's name first.
        let shim = args
            .iter()
            .any(|a| a.ends_with(b"containerd-shim-wasmpod-v1"));
        let ours = args
            .windows(2)
            .any(|w| w[0] == b"-id" && ids.iter().any(|id| w[1] == id.as_bytes()));
        shim && ours
    })
}

/// The processes started for the containerd at `socket` (its shims).
pub(crate) fn shims_at(socket: &Path) -> Vec<u32> {
    let socket = socket.to_string_lossy();
    processes(|args| args.iter().any(|a| String::from_utf8_lossy(a) == socket))
}

pub(crate) fn mounts_under(dir: &Path) -> Vec<String> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mounts
        .lines()
        .filter(|l| l.contains(&*dir.to_string_lossy()))
        .map(str::to_owned)
        .collect()
}
