//! One container of the pod: its guest (a task, or nothing for the CRI's sandbox container),
//! its entry point's process and the processes exec'd in it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use tokio::sync::watch;
use wasmpod::task::{Task, TaskEngine};

use crate::bundle::{self, Bundle};
use crate::failure::Failure;
use crate::image::Images;
use crate::process::{Outcome, Process};
use crate::stdio::Stdio;

/// The most processes exec'd in a container at once (`kubectl exec`, exec probes).
const MAX_EXECS: usize = 64;

/// What runs in a container.
pub(crate) enum Guest {
    /// The CRI's pod sandbox (its pause container): nothing, until TERM or KILL.
    Sandbox(watch::Sender<bool>),
    /// A WASI module or component.
    Wasm(Arc<Task>),
}

pub(crate) struct Container {
    pub(crate) id: String,
    pub(crate) bundle: PathBuf,
    pub(crate) guest: Guest,
    pub(crate) init: Arc<Process>,
    execs: Mutex<HashMap<String, Exec>>,
    /// The root filesystem this process mounted (unmounted when the container is deleted).
    mounted: Option<PathBuf>,
    /// The cgroup config.json names and the memory limit it sets.
    pub(crate) cgroup: Option<(PathBuf, Option<u64>)>,
}

impl Container {
    /// Mounts the root filesystem, reads the bundle, compiles the guest (or takes it from the
    /// engine's cache) and opens the entry point's stdio. Blocking.
    pub(crate) fn create(
        id: &str,
        bundle_dir: &Path,
        rootfs: &[containerd_shim::protos::types::mount::Mount],
        stdio: Stdio,
        engine: &TaskEngine,
        images: &Images,
    ) -> anyhow::Result<Container> {
        let bundle = Bundle::load(bundle_dir)?;
        let mounted = bundle::mount_rootfs(&bundle.rootfs, rootfs)?;
        let made = (|| {
            let guest = if bundle.is_sandbox() {
                Guest::Sandbox(watch::channel(false).0)
            } else {
                let options = bundle.options()?;
                let (name, wasm) = match bundle.wasm() {
                    Ok(found) => found,
                    // Not unpacked into the root filesystem: a wasm artifact, or an image
                    // containerd did not unpack.
                    Err(e) => images
                        .wasm(id, &bundle.candidates()?)
                        .map_err(|second| e.context(format!("{second:#}")))?,
                };
                let task = engine.task(&name, &wasm, options)?;
                Guest::Wasm(Arc::new(task))
            };
            let io = stdio.open()?;
            anyhow::Ok((guest, io))
        })();
        let (guest, io) = match made {
            Ok(made) => made,
            Err(e) => {
                if mounted {
                    bundle::unmount_rootfs(&bundle.rootfs);
                }
                return Err(e);
            }
        };
        Ok(Container {
            id: id.to_owned(),
            bundle: bundle_dir.to_owned(),
            init: Process::new(String::new(), stdio, io),
            guest,
            execs: Mutex::default(),
            mounted: mounted.then_some(bundle.rootfs.clone()),
            cgroup: bundle
                .cgroups_path()
                .map(|path| (path, bundle.memory_limit())),
        })
    }

    fn execs(&self) -> std::sync::MutexGuard<'_, HashMap<String, Exec>> {
        self.execs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the entry point (the sandbox: waits for TERM, then exits 0, as pause does).
    pub(crate) fn start(
        &self,
        rt: &tokio::runtime::Handle,
        ended: impl FnOnce(Outcome, crate::process::Exited) + Send + 'static,
    ) -> Result<(), Failure> {
        match &self.guest {
            Guest::Wasm(task) => {
                let task = task.clone();
                self.init.start(
                    rt,
                    |io| async move { Outcome::of(&task.run(io).await) },
                    ended,
                )
            }
            Guest::Sandbox(term) => {
                let mut term = term.subscribe();
                self.init.start(
                    rt,
                    |_| async move {
                        let _ = term.wait_for(|t| *t).await;
                        Outcome {
                            code: 0,
                            oom: false,
                        }
                    },
                    ended,
                )
            }
        }
    }

    /// TERM to the entry point.
    pub(crate) fn terminate(&self) {
        match &self.guest {
            Guest::Wasm(task) => task.terminator().terminate(),
            Guest::Sandbox(term) => {
                term.send_replace(true);
            }
        }
    }

    /// The process `exec_id` names (the entry point for an empty one).
    pub(crate) fn process(&self, exec_id: &str) -> Result<Arc<Process>, Failure> {
        if exec_id.is_empty() {
            return Ok(self.init.clone());
        }
        self.execs()
            .get(exec_id)
            .map(|e| e.process.clone())
            .ok_or_else(|| Failure::NotFound(format!("exec {exec_id} in {}", self.id)))
    }

    /// Adds an exec'd process (created, its stdio open). Must be called within the runtime.
    pub(crate) fn add_exec(
        &self,
        exec_id: &str,
        stdio: Stdio,
        command: Vec<String>,
    ) -> Result<(), Failure> {
        if matches!(self.guest, Guest::Sandbox(_)) {
            return Err(Failure::Precondition(
                "a pod's sandbox container runs nothing to exec in".into(),
            ));
        }
        if command.is_empty() {
            return Err(Failure::Invalid("exec: the process has no args".into()));
        }
        let mut execs = self.execs();
        if execs.contains_key(exec_id) {
            return Err(Failure::AlreadyExists(format!("exec {exec_id}")));
        }
        if execs.len() >= MAX_EXECS {
            return Err(Failure::Precondition(format!(
                "{} has {MAX_EXECS} execs already",
                self.id
            )));
        }
        let io = stdio.open().context("exec")?;
        let process = Process::new(exec_id.to_owned(), stdio, io);
        execs.insert(exec_id.to_owned(), Exec { process, command });
        Ok(())
    }

    /// Starts an exec'd process: its command in a fresh instance of the container's guest.
    pub(crate) fn start_exec(
        &self,
        exec_id: &str,
        rt: &tokio::runtime::Handle,
        ended: impl FnOnce(Outcome, crate::process::Exited) + Send + 'static,
    ) -> Result<(), Failure> {
        let Guest::Wasm(task) = &self.guest else {
            return Err(Failure::NotFound(format!("exec {exec_id}")));
        };
        let (process, command) = {
            let execs = self.execs();
            let exec = execs
                .get(exec_id)
                .ok_or_else(|| Failure::NotFound(format!("exec {exec_id} in {}", self.id)))?;
            (exec.process.clone(), exec.command.clone())
        };
        if !self.init.running() {
            return Err(Failure::Precondition(format!("{} is not running", self.id)));
        }
        let task = task.clone();
        process.start(
            rt,
            |io| async move { Outcome::of(&task.exec(&command, io).await) },
            ended,
        )
    }

    /// Removes an exec'd process that is not running.
    pub(crate) fn remove_exec(&self, exec_id: &str) -> Result<Arc<Process>, Failure> {
        let mut execs = self.execs();
        let running = execs
            .get(exec_id)
            .ok_or_else(|| Failure::NotFound(format!("exec {exec_id} in {}", self.id)))?
            .process
            .running();
        if running {
            return Err(Failure::Precondition(format!("exec {exec_id} is running")));
        }
        Ok(execs.remove(exec_id).map(|e| e.process).expect("checked"))
    }

    /// KILL to every exec'd process still running (the entry point ended: as in a Linux
    /// container, nothing outlives it).
    pub(crate) fn kill_execs(&self) {
        for exec in self.execs().values() {
            let _ = exec.process.kill();
        }
    }

    /// What its guest used (none for the sandbox).
    pub(crate) fn usage(&self) -> Option<wasmpod::task::TaskUsage> {
        match &self.guest {
            Guest::Wasm(task) => Some(task.usage()),
            Guest::Sandbox(_) => None,
        }
    }

    /// Unmounts the root filesystem it mounted.
    pub(crate) fn unmount(&self) {
        if let Some(rootfs) = &self.mounted {
            bundle::unmount_rootfs(rootfs);
        }
    }
}

/// A process exec'd in a container, and its command.
struct Exec {
    process: Arc<Process>,
    command: Vec<String>,
}
