//! A real containerd for the shim's tests: Debian's `containerd`, started with its own root,
//! state dir and socket (no CRI), with the wasmpod shim on its `PATH`, images imported from OCI
//! layouts the test builds from the test guests, and `ctr` to drive it. Each instance works in a
//! containerd namespace of its own, so its containers' cgroups (`/<namespace>/<id>`) never meet
//! another test's.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// The runtime name containerd knows the shim by.
pub const RUNTIME: &str = "io.containerd.wasmpod.v1";

/// The pod sandbox image of a CRI containerd ([`Containerd::start_cri`]): the tests import it
/// (any image does: the shim runs nothing in a sandbox container).
pub const SANDBOX_IMAGE: &str = "docker.io/wasmpod/pause:latest";

/// What a test's containerd is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// No CRI.
    Plain,
    /// The CRI with the handler `wasmpod`.
    Cri,
    /// The CRI without it, supervised.
    Stock,
}

/// A running containerd; its tasks are killed and it is stopped when dropped.
#[derive(Debug)]
pub struct Containerd {
    /// containerd, or the shell that supervises it ([`Containerd::start_stock`]).
    child: Child,
    supervised: bool,
    socket: PathBuf,
    namespace: String,
    dir: tempfile::TempDir,
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // Tasks (and their shims) outlive containerd: end them first.
        for id in self.task_ids() {
            let _ = self.ctr(&["task", "kill", "-s", "SIGKILL", &id]);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.task_ids().is_empty() && Instant::now() < deadline {
            for id in self.task_ids() {
                let _ = self.ctr(&["task", "delete", &id]);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        for id in self.lines(&["container", "ls", "-q"]) {
            let _ = self.ctr(&["container", "delete", &id]);
        }
        if self.supervised {
            // The supervisor first, so that it starts nothing again; then its containerd.
            let _ = self.child.kill();
            let _ = self.child.wait();
            if let Some(pid) = self.pid() {
                // SAFETY: signalling a containerd this test started, found by its config.
                unsafe { libc::kill(pid as i32, libc::SIGTERM) };
                let deadline = Instant::now() + Duration::from_secs(10);
                while self.pid() == Some(pid) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        } else {
            // SAFETY: signalling our own child process, which has not been waited for.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let _ = self.child.wait();
        }
        // The containers' cgroups are gone with them; their namespace's parent cgroups stay.
        if let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") {
            for h in hierarchies.flatten() {
                let _ = std::fs::remove_dir(h.path().join(&self.namespace));
            }
        }
        let _ = std::fs::remove_dir(Path::new("/sys/fs/cgroup").join(&self.namespace));
    }
}

impl Containerd {
    /// Starts containerd with `shim` (the `containerd-shim-wasmpod-v1` binary) on its `PATH`.
    pub fn start(shim: &Path) -> Containerd {
        Containerd::start_with(shim, Kind::Plain)
    }

    /// Starts containerd with its CRI plugin too, as a kubelet's node runs it: the runtime
    /// handler `wasmpod` (passing the pods' `wasmpod.dev/*` annotations on), Debian's CNI
    /// plugins (`ptp` with `host-local` addresses, and `loopback`), a sandbox image this test makes
    /// (see [`Containerd::import`]), the streaming server on a free port. Its namespace is the
    /// CRI's, `k8s.io`.
    pub fn start_cri(shim: &Path) -> Containerd {
        Containerd::start_with(shim, Kind::Cri)
    }

    /// Starts containerd as a node has it before wasmpod is installed: the CRI with runc as
    /// its only runtime (with systemd's cgroup driver, as kubeadm sets it) and no `wasmpod`
    /// handler, the rest as [`Containerd::start_cri`]; the shim is not on its `PATH`.
    /// containerd runs under a supervisor (a shell loop) that starts it again when it ends, as
    /// systemd does for a node's containerd.
    pub fn start_stock(shim: &Path) -> Containerd {
        Containerd::start_with(shim, Kind::Stock)
    }

    /// Its config file.
    pub fn config(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    /// The pid of the containerd that runs now (a supervised one's changes when it restarts).
    pub fn pid(&self) -> Option<u32> {
        if !self.supervised {
            return Some(self.child.id());
        }
        let config = self.config();
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .find_map(|entry| {
                let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
                let args = std::fs::read(entry.path().join("cmdline")).ok()?;
                let args: Vec<&[u8]> = args.split(|b| *b == 0).collect();
                let ours = args.first().is_some_and(|a| a.ends_with(b"containerd"))
                    && args.contains(&config.as_os_str().as_encoded_bytes());
                ours.then_some(pid)
            })
    }

    /// The socket of its gRPC API (the CRI's too).
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The containerd namespace its containers are in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The test's directory (containerd's root and state are in it).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn start_with(shim: &Path, kind: Kind) -> Containerd {
        static N: AtomicUsize = AtomicUsize::new(0);
        let cri = kind != Kind::Plain;
        let dir = tempfile::Builder::new().prefix("ctd").tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        if kind != Kind::Stock {
            std::os::unix::fs::symlink(shim, bin.join("containerd-shim-wasmpod-v1")).unwrap();
        }
        let socket = dir.path().join("c.sock");
        let config = dir.path().join("config.toml");
        let disabled = if cri {
            ""
        } else {
            "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"
        };
        let mut toml = format!(
            "# containerd's config on this test's node\nversion = 2\nroot = \"{root}\"\nstate = \"{state}\"\n{disabled}\
             [grpc]\n  address = \"{sock}\"\n[ttrpc]\n  address = \"{sock}.ttrpc\"\n",
            root = dir.path().join("root").display(),
            state = dir.path().join("state").display(),
            sock = socket.display(),
        );
        if cri {
            let cni = dir.path().join("cni");
            std::fs::create_dir(&cni).unwrap();
            // Each containerd its own subnet: a point-to-point link per pod (what the CRI asks
            // of a network is an address on eth0), and the pod's loopback (the CRI adds it).
            let subnet =
                (std::process::id() as usize * 7 + N.fetch_add(1, Ordering::Relaxed)) % 250;
            let conflist = serde_json::json!({
                "cniVersion": "1.0.0",
                "name": "wasmpod-test",
                "plugins": [{
                    "type": "ptp",
                    "ipMasq": false,
                    "ipam": {
                        "type": "host-local",
                        "subnet": format!("10.222.{subnet}.0/24"),
                        "dataDir": dir.path().join("ipam"),
                    },
                }],
            });
            std::fs::write(cni.join("10-wasmpod.conflist"), conflist.to_string()).unwrap();
            toml.push_str(&format!(
                "[plugins.\"io.containerd.grpc.v1.cri\"]\n\
                 \x20 sandbox_image = \"{SANDBOX_IMAGE}\"\n\
                 \x20 stream_server_port = \"0\"\n\
                 {runtimes}\
                 [plugins.\"io.containerd.grpc.v1.cri\".cni]\n\
                 \x20 bin_dir = \"/usr/lib/cni\"\n\
                 \x20 conf_dir = \"{cni}\"\n",
                cni = cni.display(),
                runtimes = if kind == Kind::Stock {
                    "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n\
                     \x20 runtime_type = \"io.containerd.runc.v2\"\n\
                     \x20 # kubeadm's cgroup driver\n\
                     [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n\
                     \x20 SystemdCgroup = true\n"
                        .to_owned()
                } else {
                    format!(
                        "[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n\
                         \x20 default_runtime_name = \"wasmpod\"\n\
                         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.wasmpod]\n\
                         \x20 runtime_type = \"{RUNTIME}\"\n\
                         \x20 pod_annotations = [\"wasmpod.dev/*\"]\n"
                    )
                },
            ));
        }
        std::fs::write(&config, toml).unwrap();
        let log = std::fs::File::create(dir.path().join("containerd.log")).unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut command = if kind == Kind::Stock {
            let mut sh = Command::new("sh");
            sh.args([
                "-c",
                "while :; do containerd --config \"$0\"; sleep 0.05; done",
            ])
            .arg(&config);
            sh
        } else {
            let mut containerd = Command::new("containerd");
            containerd.arg("--config").arg(&config);
            containerd
        };
        let child = command
            .env("PATH", path)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("containerd (Debian's package `containerd`) must be installed");
        let namespace = if cri {
            "k8s.io".to_owned()
        } else {
            format!(
                "wasmpod-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            )
        };
        let containerd = Containerd {
            child,
            supervised: kind == Kind::Stock,
            socket,
            namespace,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !containerd.ctr(&["version"]).status.success() {
            assert!(
                Instant::now() < deadline,
                "containerd did not start: {}",
                containerd.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        containerd
    }

    /// What containerd (and the shims, which log through it) logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    /// A `ctr` command for this containerd and namespace.
    pub fn command(&self) -> Command {
        let mut c = Command::new("ctr");
        c.arg("--address")
            .arg(&self.socket)
            .arg("--namespace")
            .arg(&self.namespace);
        c
    }

    /// Runs `ctr ARGS`.
    pub fn ctr(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }

    fn lines(&self, args: &[&str]) -> Vec<String> {
        String::from_utf8_lossy(&self.ctr(args).stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// `ctr task kill -s SIGNAL ID`: sends `signal` (`SIGTERM`, `SIGKILL`, ...) to task `id`.
    pub fn kill(&self, id: &str, signal: &str) {
        let out = self.ctr(&["task", "kill", "-s", signal, id]);
        assert!(
            out.status.success(),
            "kill {id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The ids of the tasks that exist (running or stopped).
    pub fn task_ids(&self) -> Vec<String> {
        self.lines(&["task", "ls", "-q"])
    }

    /// The status column of `ctr task ls` for task `id` (`RUNNING`, `STOPPED`, ...).
    pub fn task_status(&self, id: &str) -> Option<String> {
        self.lines(&["task", "ls"]).iter().find_map(|line| {
            let mut cols = line.split_whitespace();
            (cols.next() == Some(id)).then(|| cols.nth(1).unwrap_or_default().to_owned())
        })
    }

    /// The host pid of task `id`'s process.
    pub fn task_pid(&self, id: &str) -> Option<u32> {
        self.lines(&["task", "ls"]).iter().find_map(|line| {
            let mut cols = line.split_whitespace();
            (cols.next() == Some(id)).then(|| cols.next()?.parse().ok())?
        })
    }

    /// Waits until task `id` is running.
    pub fn wait_running(&self, id: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.task_status(id).as_deref() != Some("RUNNING") {
            assert!(
                Instant::now() < deadline,
                "task {id} did not start: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Imports `wasm` as image `name` (`docker.io/wasmpod/NAME:latest`): an ordinary image whose
    /// one layer holds `/app.wasm` (and an empty `/data`), named by its entry point.
    pub fn import(&self, name: &str, wasm: &Path) -> String {
        self.import_layout(name, wasm, image_layout, &[])
    }

    /// Imports `wasm` as image `name` into the content store only, without unpacking it into a
    /// snapshot, as containerd 2.1's CRI leaves a `wasi/wasm` image: a wasm OCI artifact
    /// (`artifact`, its one layer `application/wasm`) or the image [`Containerd::import`] makes.
    pub fn import_packed(&self, name: &str, wasm: &Path, artifact: bool) -> String {
        let layout = if artifact {
            artifact_layout
        } else {
            image_layout
        };
        self.import_layout(name, wasm, layout, &["--no-unpack"])
    }

    fn import_layout(
        &self,
        name: &str,
        wasm: &Path,
        layout: fn(&str, &[u8]) -> Vec<u8>,
        flags: &[&str],
    ) -> String {
        let reference = format!("docker.io/wasmpod/{name}:latest");
        let tar = self.dir.path().join(format!("{name}.tar"));
        std::fs::write(&tar, layout(&reference, &std::fs::read(wasm).unwrap())).unwrap();
        let mut args = vec!["images", "import"];
        args.extend(flags);
        args.push(tar.to_str().unwrap());
        let out = self.ctr(&args);
        assert!(
            out.status.success(),
            "import: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        reference
    }

    /// `ctr run --rm --runtime io.containerd.wasmpod.v1 FLAGS IMAGE ID /app.wasm ARGS`, started.
    pub fn spawn(&self, flags: &[&str], image: &str, id: &str, args: &[&str]) -> Running {
        let mut child = self
            .command()
            .args(["run", "--rm", "--runtime", RUNTIME])
            .args(flags)
            .args([image, id, "/app.wasm"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut delete = self.command();
        delete.args(["task", "delete", id]);
        Running {
            child,
            stdout,
            seen: String::new(),
            delete,
        }
    }

    /// Runs a container to its end: what it printed and its exit code.
    pub fn run(&self, flags: &[&str], image: &str, id: &str, args: &[&str]) -> Run {
        self.spawn(flags, image, id, args).finish()
    }
}

/// A `ctr run` going on: its container's stdout read as it comes.
#[derive(Debug)]
pub struct Running {
    child: Child,
    stdout: BufReader<ChildStdout>,
    seen: String,
    /// `ctr task delete ID`, for when ctr's own delete lost the race with the task's stop.
    delete: Command,
}

impl Running {
    /// Reads the container's stdout until it printed `line` (panics if it ends first).
    pub fn wait_for_line(&mut self, line: &str) {
        loop {
            let mut next = String::new();
            let n = self.stdout.read_line(&mut next).unwrap();
            assert!(
                n > 0,
                "the container ended without printing {line:?}: {:?}",
                self.seen
            );
            self.seen.push_str(&next);
            if next.trim_end_matches('\n') == line {
                return;
            }
        }
    }

    /// Waits for the container's end: all it printed and its exit code.
    pub fn finish(mut self) -> Run {
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        self.seen.push_str(&rest);
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            e.read_to_string(&mut stderr).unwrap();
        }
        let status = self.child.wait().unwrap();
        let mut code = status.code().unwrap_or(-1);
        // Once the task's exit is reported, ctr deletes it; the shim can still call it running
        // for a moment (containerd: "task must be stopped before deletion"), and ctr then exits
        // 1 instead of with the task's code. Delete it again until it is stopped: ctr reports a
        // non-zero exit code as it deletes.
        if code == 1 && stderr.contains("task must be stopped before deletion") {
            code = self.delete_stopped();
        }
        Run {
            code,
            stdout: self.seen,
            stderr,
        }
    }

    /// Deletes the task once the shim calls it stopped (within 10 s): its exit code.
    fn delete_stopped(&mut self) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self.delete.output().unwrap();
            let said = String::from_utf8_lossy(&out.stderr);
            if out.status.success() {
                return said
                    .split("exit with non-zero exit code ")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|n| n.trim_matches('"').parse().ok())
                    .unwrap_or(0);
            }
            assert!(Instant::now() < deadline, "task delete: {said}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// What `ctr run` of a container printed, and its exit code (the container's).
#[derive(Debug, Clone)]
pub struct Run {
    /// The container's exit code.
    pub code: i32,
    /// Its stdout.
    pub stdout: String,
    /// Its stderr (and ctr's).
    pub stderr: String,
}

/// An OCI image layout (as a tar, what `ctr images import` takes) of one image: a layer with
/// `app.wasm` and a `data` directory, a config whose entry point is `/app.wasm`.
fn image_layout(reference: &str, wasm: &[u8]) -> Vec<u8> {
    let mut layer = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(wasm.len() as u64);
    header.set_mode(0o755);
    layer.append_data(&mut header, "app.wasm", wasm).unwrap();
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_size(0);
    layer
        .append_data(&mut dir, "data/", std::io::empty())
        .unwrap();
    let layer = layer.into_inner().unwrap();
    let diff_id = format!("sha256:{:x}", Sha256::digest(&layer));
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/app.wasm"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    });
    layout(
        reference,
        ("application/vnd.oci.image.config.v1+json", config),
        ("application/vnd.oci.image.layer.v1.tar", layer),
    )
}

/// A wasm OCI artifact (the CNCF wasm working group's): a config of its own media type and
/// one layer, the module or component itself.
fn artifact_layout(reference: &str, wasm: &[u8]) -> Vec<u8> {
    let config = serde_json::json!({
        "architecture": "wasm", "os": "wasip1",
        "layerDigests": [format!("sha256:{:x}", Sha256::digest(wasm))],
        "component": {},
    });
    layout(
        reference,
        ("application/vnd.wasm.config.v0+json", config),
        ("application/wasm", wasm.to_vec()),
    )
}

/// An OCI layout of one manifest, `config` and one `layer` (media types first), named
/// `reference`.
fn layout(reference: &str, config: (&str, serde_json::Value), layer: (&str, Vec<u8>)) -> Vec<u8> {
    let mut out = tar::Builder::new(Vec::new());
    let mut blob = |data: &[u8]| {
        let digest = format!("sha256:{:x}", Sha256::digest(data));
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        let path = format!("blobs/sha256/{}", &digest[7..]);
        out.append_data(&mut h, path, data).unwrap();
        (digest, data.len())
    };
    let (layer_digest, layer_size) = blob(&layer.1);
    let (config_digest, config_size) = blob(config.1.to_string().as_bytes());
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": config.0, "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": layer.0, "digest": layer_digest, "size": layer_size}],
    })
    .to_string();
    let (manifest_digest, manifest_size) = blob(manifest.as_bytes());
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": manifest_digest, "size": manifest_size,
                       "annotations": {"io.containerd.image.name": reference}}],
    })
    .to_string();
    for (name, data) in [
        ("index.json", index.as_bytes()),
        (
            "oci-layout",
            br#"{"imageLayoutVersion":"1.0.0"}"#.as_slice(),
        ),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        out.append_data(&mut h, name, data).unwrap();
    }
    out.into_inner().unwrap()
}

/// The resident memory of process `pid` (`VmRSS`), in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    crate::proc_kib(&format!("/proc/{pid}/status"), "VmRSS:")
}

/// The proportional set size of process `pid` (its share of the pages it maps), in KiB.
pub fn pss_kib(pid: u32) -> Option<u64> {
    crate::proc_kib(&format!("/proc/{pid}/smaps_rollup"), "Pss:")
}

/// The memory cgroup process `pid` is in (its path in cgroup v1's memory hierarchy, or in the
/// unified one), and that cgroup's directory.
pub fn memory_cgroup(pid: u32) -> (String, PathBuf) {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let path = cgroups
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once(':')?;
            let (controllers, path) = rest.split_once(':')?;
            (controllers.split(',').any(|c| c == "memory") || controllers.is_empty())
                .then(|| path.to_owned())
        })
        .unwrap_or_else(|| panic!("no memory cgroup in {cgroups}"));
    let dir = ["/sys/fs/cgroup/memory", "/sys/fs/cgroup"]
        .iter()
        .map(|root| PathBuf::from(format!("{root}{path}")))
        .find(|d| d.is_dir())
        .unwrap_or_else(|| panic!("no directory for the cgroup {path}"));
    (path, dir)
}

/// Waits until the cgroup directory `dir` is gone (its shim ended); panics after 10 s.
pub fn wait_removed(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while dir.exists() {
        assert!(
            Instant::now() < deadline,
            "{} is still there",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
