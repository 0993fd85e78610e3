//! `containerd-shim-wasmpod-v1`: the containerd shim of the runtime `io.containerd.wasmpod.v1`.
//!
//! containerd starts one shim process per pod (the CRI's `io.kubernetes.cri.sandbox-id`
//! annotation groups a pod's containers, as runc's shim does) or per container run outside a
//! pod (`ctr run`). The process serves containerd's task API itself ([`service`]): each
//! container is a [`wasmpod::task::Task`] on the process's one engine, so a pod's containers
//! share compiled code and the pod's sandbox (pause) container costs nothing; exec runs a
//! command in a fresh instance of the container's guest; a container ended by its memory limit
//! is reported as containerd's `TaskOOM`; `Stats` and `Update` are the runtime's own figures
//! and limits.
//!
//! - [`shim`]: containerd's `start` and `delete` calls: grouping, the pod's network namespace.
//! - [`service`]: the task API, one method per request.
//! - [`container`] and [`process`]: a container and its processes (the entry point and execs),
//!   a process's state as an enum with a method per transition.
//! - [`install`]: `install` and `uninstall`, the shim put on a node and registered with its
//!   containerd (the binary's own subcommands; containerd's calls never start with them).
//! - [`image`]: the guest from the image's layers in containerd's content store, when the root
//!   filesystem has none (wasm OCI artifacts; images containerd did not unpack).
//! - [`bundle`]: the OCI bundle (config.json and root filesystem) as a task's options.
//! - [`stdio`]: containerd's fifos; [`stats`]: the metrics containerd reads; [`cgroup`]: the
//!   cgroup the shim's process runs in.

mod bundle;
mod cgroup;
mod container;
mod events;
mod failure;
mod image;
mod install;
mod process;
mod service;
mod shim;
mod stats;
mod stdio;

fn main() {
    if let Some(code) = install::from_command_line() {
        std::process::exit(code);
    }
    diagnostics();
    containerd_shim::run::<shim::WasmpodShim>(shim::RUNTIME, None);
}

/// The runtime's warnings and errors go to containerd's log, through the shim's logger; its
/// spans and finer events (a guest's individual WASI calls among them) go nowhere.
fn diagnostics() {
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .with_writer(|| LogLine(Vec::new()))
        .finish();
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// One formatted event, logged as a warning when it is complete.
struct LogLine(Vec<u8>);

impl std::io::Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        let line = String::from_utf8_lossy(&self.0);
        if !line.trim().is_empty() {
            log::warn!("{}", line.trim_end());
        }
    }
}
