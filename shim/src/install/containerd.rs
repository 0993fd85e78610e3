//! The node's containerd process: found by the config it reads, restarted the way the host runs
//! it, and asked through its CRI whether it lists the handler.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;

use super::node::host;

/// A running containerd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Process {
    pid: u32,
    /// Its start time (clock ticks after boot), to tell it from a process that reuses its pid.
    started: u64,
    /// The systemd unit it runs in, if any.
    unit: Option<String>,
    /// The socket its command line names (`--address`, `-a`), if any.
    pub(crate) address: Option<PathBuf>,
    /// Its `PATH`, where it looks for shims.
    pub(crate) path: Option<String>,
}

impl Process {
    /// The containerd process started with `config` (host path); or the only containerd there
    /// is.
    pub(crate) fn find(config: &Path) -> Option<Process> {
        let mut all = Vec::new();
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            if comm.trim_end() != "containerd" {
                continue;
            }
            let Some(started) = start_time(pid) else {
                continue;
            };
            let args = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let process = Process {
                pid,
                started,
                unit: unit(pid),
                address: arg(&args, "--address", "-a").map(PathBuf::from),
                path: std::fs::read(entry.path().join("environ"))
                    .ok()
                    .and_then(|env| path_of(&env)),
            };
            let named = arg(&args, "--config", "-c");
            if Path::new(named.as_deref().unwrap_or("/etc/containerd/config.toml")) == config {
                return Some(process);
            }
            all.push(process);
        }
        (all.len() == 1).then(|| all.remove(0))
    }

    /// Whether the process still runs (a new process with its pid is another one).
    fn runs(&self) -> bool {
        start_time(self.pid) == Some(self.started)
    }

    /// How the process is restarted: what a person reads.
    pub(crate) fn how(&self) -> String {
        match &self.unit {
            Some(unit) => format!("systemctl restart {unit}"),
            None => format!(
                "SIGTERM to pid {} (not a systemd service: its supervisor starts it again)",
                self.pid
            ),
        }
    }

    /// Restarts containerd: its systemd unit, or, outside systemd, a TERM its supervisor answers
    /// by starting it again. Returns once the old process has ended.
    pub(crate) fn restart(&self, root: &Path, timeout: Duration) -> anyhow::Result<()> {
        match &self.unit {
            Some(unit) => {
                let status = systemctl(root)?
                    .args(["restart", unit])
                    .status()
                    .context("cannot run systemctl")?;
                if !status.success() {
                    bail!("`systemctl restart {unit}` failed ({status})");
                }
            }
            // SAFETY: signalling a process by pid; `runs` checked it is still the one found.
            None if self.runs() => unsafe {
                libc::kill(self.pid as i32, libc::SIGTERM);
            },
            None => {}
        }
        let deadline = Instant::now() + timeout;
        while self.runs() {
            if Instant::now() > deadline {
                bail!(
                    "containerd (pid {}) still runs {timeout:?} after its restart",
                    self.pid
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

/// `systemctl`, run in the host's mount namespace (PID 1's) when this process is in another
/// one (a DaemonSet's container with the host's PID namespace).
fn systemctl(root: &Path) -> anyhow::Result<Command> {
    let program = ["/usr/bin/systemctl", "/bin/systemctl"]
        .into_iter()
        .find(|p| host(root, Path::new(p)).exists())
        .context("the host has no systemctl")?;
    let mut command = Command::new(program);
    let ours = std::fs::read_link("/proc/self/ns/mnt").ok();
    let hosts = std::fs::read_link("/proc/1/ns/mnt").ok();
    if ours != hosts {
        let namespace = std::fs::File::open("/proc/1/ns/mnt")
            .context("cannot open the host's mount namespace (/proc/1/ns/mnt)")?;
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let fd = namespace.as_raw_fd();
        // SAFETY: between fork and exec only setns, which is async-signal-safe, is called; the
        // namespace's file stays open in the parent until the command has run.
        unsafe {
            command.pre_exec(move || {
                let _keep = &namespace;
                if libc::setns(fd, libc::CLONE_NEWNS) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }
    Ok(command)
}

/// The value a command line (`/proc/<pid>/cmdline`) gives a flag (`--long`, `-s`, `--long=`).
fn arg(cmdline: &[u8], long: &str, short: &str) -> Option<String> {
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let equals = format!("{long}=");
    args.iter().enumerate().find_map(|(i, a)| {
        let value = if *a == long.as_bytes() || *a == short.as_bytes() {
            args.get(i + 1).copied()
        } else {
            a.strip_prefix(equals.as_bytes())
        };
        value.map(|v| String::from_utf8_lossy(v).into_owned())
    })
}

/// The `PATH` of an environment as `/proc/<pid>/environ` has it.
fn path_of(environ: &[u8]) -> Option<String> {
    environ
        .split(|b| *b == 0)
        .find_map(|v| v.strip_prefix(b"PATH="))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// A process's start time, from `/proc/<pid>/stat` (field 22).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count from its closing parenthesis. A zombie
    // has ended.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    if fields.next() == Some("Z") {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// The systemd service a process runs in, from its cgroup (`…/containerd.service`).
fn unit(pid: u32) -> Option<String> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    cgroups
        .lines()
        .filter(|l| l.starts_with("0::") || l.contains("name=systemd"))
        .flat_map(|l| l.rsplit('/'))
        .find(|part| part.ends_with(".service"))
        .map(str::to_owned)
}

/// Waits until containerd answers on `socket` and its CRI lists the handler (`listed`) or no
/// longer lists it.
pub(crate) fn wait_for_handler(
    socket: &Path,
    handler: &str,
    listed: bool,
    timeout: Duration,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let start = Instant::now();
    let mut last = String::from("no answer yet");
    while start.elapsed() < timeout {
        match rt.block_on(handlers(socket)) {
            Ok(names) if names.iter().any(|n| n == handler) == listed => return Ok(()),
            Ok(names) => last = format!("its CRI lists the runtime handlers {names:?}"),
            Err(e) => last = format!("{e:#}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!(
        "containerd at {} did not {} the handler `{handler}` within {timeout:?}: {last}",
        socket.display(),
        if listed { "list" } else { "drop" }
    )
}

/// The runtime handlers containerd's CRI knows (its `Status`, verbose: the config it runs).
async fn handlers(socket: &Path) -> anyhow::Result<Vec<String>> {
    let socket = socket.to_owned();
    let channel = tonic::transport::Endpoint::try_from("http://[::]:50051")?
        .connect_timeout(Duration::from_secs(2))
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .context("cannot connect")?;
    let status = tokio::time::timeout(
        Duration::from_secs(5),
        RuntimeServiceClient::new(channel).status(cri::StatusRequest { verbose: true }),
    )
    .await
    .context("its CRI does not answer")?
    .context("its CRI refuses Status")?
    .into_inner();
    let config = status
        .info
        .get("config")
        .context("its CRI's Status has no config")?;
    let config: serde_json::Value =
        serde_json::from_str(config).context("its CRI's config is not JSON")?;
    let runtimes = config
        .pointer("/containerd/runtimes")
        .and_then(|r| r.as_object())
        .context("its CRI's config has no runtimes")?;
    Ok(runtimes.keys().cloned().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_and_socket_are_read_off_the_command_line() {
        let k3s = b"containerd\0-c\0/var/lib/rancher/k3s/agent/etc/containerd/config.toml\0-a\0/run/k3s/containerd/containerd.sock\0";
        assert_eq!(
            arg(k3s, "--config", "-c").as_deref(),
            Some("/var/lib/rancher/k3s/agent/etc/containerd/config.toml")
        );
        assert_eq!(
            arg(k3s, "--address", "-a").as_deref(),
            Some("/run/k3s/containerd/containerd.sock")
        );
        assert_eq!(arg(b"containerd\0", "--config", "-c"), None);
        assert_eq!(
            arg(b"containerd\0--config=/x.toml\0", "--config", "-c").as_deref(),
            Some("/x.toml")
        );
    }

    #[test]
    fn a_process_start_time_tells_it_from_one_that_reuses_its_pid() {
        let me = std::process::id();
        assert!(start_time(me).is_some());
        assert_eq!(start_time(u32::MAX), None);
    }
}
