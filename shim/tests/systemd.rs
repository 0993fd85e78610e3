//! `containerd-shim-wasmpod-v1 install` and `uninstall` on a node whose containerd is a systemd
//! service: this machine's Debian booted in a container (`systemd-nspawn`: the host's root file
//! system under a tmpfs overlay, so nothing it writes reaches the host; a network of its own),
//! systemd its PID 1 and containerd the `containerd.service` Debian's package enables, with the
//! config the package installs. The installer finds the unit from containerd's cgroup and
//! restarts it with `systemctl`, once from a mount namespace of its own (as the DaemonSet's
//! container runs it, `systemctl` then entering PID 1's) and once from the node's.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SHIM: &str = env!("CARGO_BIN_EXE_containerd-shim-wasmpod-v1");

/// Where the shim is bound, read-only, in the booted system.
const SHIM_INSIDE: &str = "/opt/wasmpod-test/containerd-shim-wasmpod-v1";

/// A booted Debian: `systemd-nspawn` and, under it, systemd as PID 1.
struct Booted {
    nspawn: Child,
    /// systemd's pid on the host.
    init: u32,
    _root: tempfile::TempDir,
}

impl Booted {
    fn boot() -> Booted {
        assert!(
            Path::new("/usr/bin/systemd-nspawn").exists(),
            "systemd-nspawn is missing: tools/test-deps.sh installs Debian's systemd-container"
        );
        // The host's root file system bound alone (not its /dev, /proc, … mounts) in a mount
        // namespace of nspawn's own: nspawn refuses to boot `/` itself.
        let root = tempfile::tempdir().unwrap();
        let machine = format!("wasmpod-test-{}", std::process::id());
        let nspawn = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount --bind / "$0" && exec systemd-nspawn --quiet -D "$0" "$@""#)
            .arg(root.path())
            .args([
                "--volatile=overlay",
                "--private-network",
                "--register=no",
                "--keep-unit",
                "--console=passive",
                "--boot",
            ])
            .arg(format!("--machine={machine}"))
            .arg(format!("--bind-ro={SHIM}:{SHIM_INSIDE}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let pid = nspawn.id();
        let mut booted = Booted {
            nspawn,
            init: 0,
            _root: root,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        booted.init = loop {
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .unwrap_or_default();
            let init = children.split_whitespace().find_map(|c| {
                let comm = std::fs::read_to_string(format!("/proc/{c}/comm")).ok()?;
                (comm.trim_end() == "systemd").then(|| c.parse().ok())?
            });
            if let Some(init) = init {
                break init;
            }
            assert!(
                booted.nspawn.try_wait().unwrap().is_none(),
                "systemd-nspawn ended before it started systemd"
            );
            assert!(Instant::now() < deadline, "systemd did not start");
            std::thread::sleep(Duration::from_millis(50));
        };
        // Booted when systemd has no jobs left (a unit of the host's that fails in a container
        // leaves it `degraded`).
        loop {
            let state = booted.systemctl(&["is-system-running"]);
            if ["running", "degraded"].contains(&state.as_str()) {
                break;
            }
            assert!(Instant::now() < deadline, "not booted within 60 s: {state}");
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(booted.systemctl(&["is-active", "containerd"]), "active");
        booted
    }

    /// A command run in the booted system (all of its namespaces).
    fn inside(&self) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg("--target")
            .arg(self.init.to_string())
            .arg("--all");
        command
    }

    /// Whether a shell command succeeded in the booted system.
    fn sh(&self, script: &str) -> bool {
        self.inside()
            .args(["sh", "-c", script])
            .status()
            .unwrap()
            .success()
    }

    /// `systemctl`'s answer, trimmed.
    fn systemctl(&self, args: &[&str]) -> String {
        let out = self.inside().arg("systemctl").args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// containerd's main process, as systemd knows it.
    fn containerd(&self) -> u32 {
        self.systemctl(&["show", "--property=MainPID", "--value", "containerd"])
            .parse()
            .unwrap()
    }

    fn read(&self, path: &str) -> Vec<u8> {
        let out = self.inside().arg("cat").arg(path).output().unwrap();
        assert!(out.status.success(), "cannot read {path} in the container");
        out.stdout
    }

    /// Whether containerd loaded its CRI plugin (`ctr plugins ls`: type `io.containerd.grpc.v1`,
    /// id `cri`, status `ok` or `error`).
    fn cri_loaded(&self) -> bool {
        let out = self
            .inside()
            .args(["ctr", "plugins", "ls"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).lines().any(|l| {
            let columns: Vec<&str> = l.split_whitespace().collect();
            columns.first() == Some(&"io.containerd.grpc.v1")
                && columns.get(1) == Some(&"cri")
                && columns.last() == Some(&"ok")
        })
    }
}

impl Drop for Booted {
    fn drop(&mut self) {
        // nspawn answers TERM by shutting the system down.
        // SAFETY: signalling our own child, which has not been waited for.
        unsafe {
            libc::kill(self.nspawn.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.nspawn.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = self.nspawn.kill();
                let _ = self.nspawn.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn install_and_uninstall_restart_a_systemd_services_containerd_through_systemctl() {
    let node = Booted::boot();
    let config = "/etc/containerd/config.toml";
    let before = node.read(config);
    let pid = node.containerd();
    assert!(node.cri_loaded(), "the stock containerd serves the CRI");

    // As the DaemonSet's container runs it: a mount namespace of its own.
    let out = wasmpod_tests::succeeded(
        &node
            .inside()
            .args(["unshare", "--mount", "--propagation", "private"])
            .args([SHIM_INSIDE, "install", "--timeout", "60s"])
            .output()
            .unwrap(),
    );
    eprintln!("{out}");
    for line in [
        format!("node: containerd (kubeadm and other nodes); config {config}"),
        "shim: /usr/local/bin/containerd-shim-wasmpod-v1 installed".to_owned(),
        format!("config: runtime `wasmpod` added to {config}"),
        "containerd: restarted (systemctl restart containerd.service)".to_owned(),
        "cri: containerd lists the handler `wasmpod`".to_owned(),
    ] {
        assert!(out.contains(&line), "{line:?} not in:\n{out}");
    }
    let restarted = node.containerd();
    assert_ne!(restarted, pid, "systemd started a new containerd");
    assert_eq!(node.systemctl(&["is-active", "containerd"]), "active");
    // Debian's config leaves runc to containerd's defaults: it is written out beside `wasmpod`,
    // or the CRI plugin would not load.
    let installed = String::from_utf8(node.read(config)).unwrap();
    assert!(
        installed.contains("runtimes.runc]") && installed.contains("runtimes.wasmpod]"),
        "{installed}"
    );
    assert!(node.cri_loaded(), "the CRI plugin loads the edited config");

    // From the node itself: its mount namespace is systemd's.
    let out = wasmpod_tests::succeeded(
        &node
            .inside()
            .args([SHIM_INSIDE, "uninstall", "--timeout", "60s"])
            .output()
            .unwrap(),
    );
    eprintln!("{out}");
    for line in [
        "restored as it was before install",
        "containerd: restarted (systemctl restart containerd.service)",
        "cri: containerd no longer lists the handler `wasmpod`",
    ] {
        assert!(out.contains(line), "{line:?} not in:\n{out}");
    }
    assert_ne!(node.containerd(), restarted);
    assert_eq!(
        node.read(config),
        before,
        "the config is back byte for byte"
    );
    assert!(node.cri_loaded());
    let gone = node
        .inside()
        .args(["test", "-e", "/usr/local/bin/containerd-shim-wasmpod-v1"])
        .status()
        .unwrap();
    assert!(!gone.success(), "uninstall removes the shim it put there");

    // A containerd that does not come back (its unit made to fail to start): the install is
    // undone, and the node's config is as it was.
    let broken = "/etc/systemd/system/containerd.service.d/wasmpod-test.conf";
    node.sh(&format!(
        "mkdir -p $(dirname {broken}) && printf '[Service]\\nExecStartPre=/bin/false\\n' > {broken} \
         && systemctl daemon-reload"
    ));
    let out = node
        .inside()
        .args([SHIM_INSIDE, "install", "--timeout", "10s"])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprintln!("{stdout}{stderr}");
    assert!(!out.status.success(), "a failed restart fails the install");
    for line in [
        "config: /etc/containerd/config.toml put back as it was: containerd did not come back",
        "shim: /usr/local/bin/containerd-shim-wasmpod-v1 removed",
        "containerd: not running: it reads the config as it was when it starts",
    ] {
        assert!(stdout.contains(line), "{line:?} not in:\n{stdout}");
    }
    assert!(
        stderr.contains("install undone")
            && stderr.contains("systemctl restart containerd.service"),
        "{stderr}"
    );
    assert_eq!(node.read(config), before, "the config is as it was");
    for left in [
        "/etc/containerd/config.toml.before-wasmpod",
        "/etc/containerd/wasmpod-install.json",
    ] {
        assert!(!node.sh(&format!("test -e {left}")), "{left} is left");
    }
    assert!(node.sh(&format!(
        "rm {broken} && systemctl daemon-reload && systemctl reset-failed containerd \
         && systemctl start containerd"
    )));
    assert!(
        node.cri_loaded(),
        "containerd starts on the config as it was"
    );
}
