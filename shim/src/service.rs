//! containerd's task API (runtime v2), served by the pod's shim process: one method per
//! request, each a few lines over [`Container`] and [`crate::process::Process`]. The service is
//! generic over where its events go ([`EventSink`]): containerd's publisher in the shim, a list
//! in its tests, which drive the task API's flows without containerd.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::SystemTime;

use anyhow::Context;
use containerd_shim::api::{
    CloseIORequest, ConnectRequest, ConnectResponse, CreateTaskRequest, CreateTaskResponse,
    DeleteRequest, Empty, ExecProcessRequest, KillRequest, PidsRequest, PidsResponse,
    ResizePtyRequest, ShutdownRequest, StartRequest, StartResponse, StateRequest, StateResponse,
    StatsRequest, StatsResponse, UpdateTaskRequest, WaitRequest, WaitResponse,
};
use containerd_shim::protos::events::task::{
    TaskCreate, TaskDelete, TaskExecAdded, TaskExecStarted, TaskIO, TaskStart,
};
use containerd_shim::protos::protobuf::MessageField;
use containerd_shim::protos::protobuf::well_known_types::timestamp::Timestamp;
use containerd_shim::protos::types::task::ProcessInfo;
use containerd_shim::{DeleteResponse, ExitSignal, Task, TtrpcContext, TtrpcResult};
use wasmpod::task::TaskEngine;

use crate::cgroup;
use crate::container::{Container, Guest};
use crate::events::EventSink;
use crate::failure::Failure;
use crate::image::Images;
use crate::process::Exited;
use crate::stdio::Stdio;

/// Where compiled guests are kept between shim processes, unless `WASMPOD_SHIM_CACHE` names
/// another directory (only root may write it, else the cache is off).
const CACHE_DIR: &str = "/var/cache/wasmpod-shim";

/// The compile cache's directory: `WASMPOD_SHIM_CACHE`, else [`CACHE_DIR`].
pub(crate) fn cache_dir() -> PathBuf {
    std::env::var_os("WASMPOD_SHIM_CACHE").map_or(CACHE_DIR.into(), Into::into)
}

/// The task service of one shim process, its events sent to `E`.
pub(crate) struct Service<E> {
    rt: tokio::runtime::Runtime,
    engine: Mutex<Option<Arc<TaskEngine>>>,
    containers: Mutex<HashMap<String, Arc<Container>>>,
    events: E,
    /// containerd's images, where a guest the root filesystem lacks is looked for.
    images: Images,
    exit: Arc<ExitSignal>,
    cgroup: Mutex<Option<cgroup::Joined>>,
    /// Where compiled guests are kept ([`cache_dir`]).
    cache: PathBuf,
    pid: u32,
}

impl<E: EventSink> Service<E> {
    /// A service with no container yet; its events go to `events`, a guest the root filesystem
    /// lacks is looked for in `images`, compiled guests are kept in `cache` (if only root may
    /// write it) and `exit` is signalled at `Shutdown`.
    pub(crate) fn new(events: E, images: Images, exit: Arc<ExitSignal>, cache: PathBuf) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .thread_name("wasmpod-shim")
            .enable_all()
            .build()
            .expect("the shim's async runtime");
        Service {
            rt,
            engine: Mutex::default(),
            containers: Mutex::default(),
            events,
            images,
            exit,
            cgroup: Mutex::default(),
            cache,
            pid: std::process::id(),
        }
    }

    fn containers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Container>>> {
        self.containers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn container(&self, id: &str) -> Result<Arc<Container>, Failure> {
        self.containers()
            .get(id)
            .cloned()
            .ok_or_else(|| Failure::NotFound(format!("container {id}")))
    }

    /// The process's engine, made at its first guest.
    fn engine(&self) -> anyhow::Result<Arc<TaskEngine>> {
        let mut engine = self.engine.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(engine) = &*engine {
            return Ok(engine.clone());
        }
        let cache = trusted_cache_dir(&self.cache);
        let made = Arc::new(TaskEngine::new(cache)?);
        *engine = Some(made.clone());
        Ok(made)
    }

    fn create_task(&self, req: CreateTaskRequest) -> Result<CreateTaskResponse, Failure> {
        if req.terminal {
            return Err(no_tty());
        }
        if !req.checkpoint.is_empty() {
            return Err(Failure::Invalid(
                "wasmpod does not restore checkpoints".into(),
            ));
        }
        if self.containers().contains_key(&req.id) {
            return Err(Failure::AlreadyExists(format!("container {}", req.id)));
        }
        let stdio = Stdio {
            stdin: req.stdin.clone(),
            stdout: req.stdout.clone(),
            stderr: req.stderr.clone(),
        };
        let engine = self.engine()?;
        let _runtime = self.rt.enter();
        let bundle = Path::new(&req.bundle);
        let container =
            Container::create(&req.id, bundle, &req.rootfs, stdio, &engine, &self.images)
                .with_context(|| format!("cannot create {}", req.id))?;
        self.join_cgroup(&container);
        let container = Arc::new(container);
        let mut containers = self.containers();
        if containers.contains_key(&req.id) {
            container.unmount();
            return Err(Failure::AlreadyExists(format!("container {}", req.id)));
        }
        containers.insert(req.id.clone(), container);
        drop(containers);
        self.events.send(TaskCreate {
            container_id: req.id.clone(),
            bundle: req.bundle.clone(),
            rootfs: req.rootfs.clone(),
            io: MessageField::some(TaskIO {
                stdin: req.stdin,
                stdout: req.stdout,
                stderr: req.stderr,
                terminal: false,
                ..Default::default()
            }),
            pid: self.pid,
            ..Default::default()
        });
        Ok(CreateTaskResponse {
            pid: self.pid,
            ..Default::default()
        })
    }

    /// The shim's process joins the cgroup of the first container it serves.
    fn join_cgroup(&self, container: &Container) {
        let mut joined = self.cgroup.lock().unwrap_or_else(|e| e.into_inner());
        if joined.is_some() || !self.containers().is_empty() {
            return;
        }
        let Some((path, memory)) = &container.cgroup else {
            return;
        };
        match cgroup::join(path, *memory) {
            Ok(cgroup) => *joined = Some(cgroup),
            Err(e) => log::warn!("{e:#}"),
        }
    }

    fn start_task(&self, req: StartRequest) -> Result<StartResponse, Failure> {
        let container = self.container(&req.id)?;
        let process = container.process(&req.exec_id)?;
        let events = self.events.clone();
        let (pid, id) = (self.pid, req.id.clone());
        if req.exec_id.is_empty() {
            let weak: Weak<Container> = Arc::downgrade(&container);
            container.start(self.rt.handle(), move |outcome, end| {
                if let Some(container) = weak.upgrade() {
                    container.kill_execs();
                }
                events.exited(&id, &id, pid, outcome, end);
            })?;
            self.events.send(TaskStart {
                container_id: req.id,
                pid,
                ..Default::default()
            });
        } else {
            let exec_id = req.exec_id.clone();
            container.start_exec(&req.exec_id, self.rt.handle(), move |outcome, end| {
                events.exited(&id, &exec_id, pid, outcome, end);
            })?;
            self.events.send(TaskExecStarted {
                container_id: req.id,
                exec_id: req.exec_id,
                pid,
                ..Default::default()
            });
        }
        process.answered();
        Ok(StartResponse {
            pid,
            ..Default::default()
        })
    }

    fn delete_task(&self, req: DeleteRequest) -> Result<DeleteResponse, Failure> {
        let container = self.container(&req.id)?;
        let (process, deleted) = if req.exec_id.is_empty() {
            if container.init.running() {
                return Err(Failure::Precondition(format!(
                    "{} is running: kill it first",
                    req.id
                )));
            }
            self.containers().remove(&req.id);
            container.kill_execs();
            container.unmount();
            (container.init.clone(), true)
        } else {
            (container.remove_exec(&req.exec_id)?, false)
        };
        let (_, end) = process.status();
        let end = end.unwrap_or(Exited {
            code: 0,
            at: SystemTime::now(),
        });
        if deleted {
            self.events.send(TaskDelete {
                container_id: req.id.clone(),
                pid: self.pid,
                exit_status: end.code,
                exited_at: MessageField::some(Timestamp::from(end.at)),
                id: req.id,
                ..Default::default()
            });
        }
        Ok(DeleteResponse {
            pid: self.pid,
            exit_status: end.code,
            exited_at: MessageField::some(Timestamp::from(end.at)),
            ..Default::default()
        })
    }

    fn kill_task(&self, req: KillRequest) -> Result<(), Failure> {
        let container = self.container(&req.id)?;
        let process = container.process(&req.exec_id)?;
        let (_, ended) = process.status();
        const KILL: u32 = libc::SIGKILL as u32;
        const TERM: u32 = libc::SIGTERM as u32;
        const INT: u32 = libc::SIGINT as u32;
        match req.signal {
            _ if ended.is_some() => Err(Failure::NotFound("process already finished".into())),
            // Signal 0: does it live.
            0 => Ok(()),
            KILL => {
                if req.all && req.exec_id.is_empty() {
                    container.kill_execs();
                }
                process.kill()
            }
            TERM | INT if req.exec_id.is_empty() && process.running() => {
                container.terminate();
                Ok(())
            }
            // A process not started, and an exec'd command, have nothing to learn TERM with.
            TERM | INT => process.kill(),
            other => Err(Failure::Invalid(format!(
                "wasmpod delivers TERM (15), INT (2) and KILL (9), not signal {other}"
            ))),
        }
    }

    fn exec_process(&self, req: ExecProcessRequest) -> Result<(), Failure> {
        if req.terminal {
            return Err(no_tty());
        }
        let container = self.container(&req.id)?;
        let spec = req
            .spec
            .as_ref()
            .ok_or_else(|| Failure::Invalid("exec: no process spec".into()))?;
        let process: oci_spec::runtime::Process = serde_json::from_slice(&spec.value)
            .map_err(|e| Failure::Invalid(format!("exec: the process spec: {e}")))?;
        if process.terminal().unwrap_or(false) {
            return Err(no_tty());
        }
        let stdio = Stdio {
            stdin: req.stdin,
            stdout: req.stdout,
            stderr: req.stderr,
        };
        let _runtime = self.rt.enter();
        container.add_exec(
            &req.exec_id,
            stdio,
            process.args().clone().unwrap_or_default(),
        )?;
        self.events.send(TaskExecAdded {
            container_id: req.id,
            exec_id: req.exec_id,
            ..Default::default()
        });
        Ok(())
    }

    fn update_task(&self, req: UpdateTaskRequest) -> Result<(), Failure> {
        let container = self.container(&req.id)?;
        let Guest::Wasm(task) = &container.guest else {
            return Ok(());
        };
        let Some(resources) = req.resources.as_ref() else {
            return Ok(());
        };
        let resources: oci_spec::runtime::LinuxResources = serde_json::from_slice(&resources.value)
            .map_err(|e| Failure::Invalid(format!("update: the resources: {e}")))?;
        let memory = resources
            .memory()
            .as_ref()
            .and_then(|m| m.limit())
            .and_then(|l| u64::try_from(l).ok())
            .filter(|l| *l > 0);
        let cpu = resources
            .cpu()
            .as_ref()
            .and_then(|c| crate::bundle::cpu_share(c.quota(), c.period()));
        task.resize(memory, cpu)
            .map_err(|e| Failure::Invalid(format!("update {}: {e}", req.id)))
    }

    fn state_of(&self, req: StateRequest) -> Result<StateResponse, Failure> {
        let container = self.container(&req.id)?;
        let process = container.process(&req.exec_id)?;
        let (status, end) = process.status();
        Ok(StateResponse {
            id: req.id,
            bundle: container.bundle.to_string_lossy().into_owned(),
            pid: self.pid,
            status: status.into(),
            stdin: process.stdio.stdin.clone(),
            stdout: process.stdio.stdout.clone(),
            stderr: process.stdio.stderr.clone(),
            terminal: false,
            exit_status: end.map_or(0, |e| e.code),
            exited_at: end.map_or(MessageField::none(), |e| {
                MessageField::some(Timestamp::from(e.at))
            }),
            exec_id: process.exec_id.clone(),
            ..Default::default()
        })
    }

    fn wait_for(&self, req: WaitRequest) -> Result<WaitResponse, Failure> {
        let process = self.container(&req.id)?.process(&req.exec_id)?;
        let end = self.rt.block_on(process.wait());
        Ok(WaitResponse {
            exit_status: end.code,
            exited_at: MessageField::some(Timestamp::from(end.at)),
            ..Default::default()
        })
    }

    fn stats_of(&self, req: StatsRequest) -> Result<StatsResponse, Failure> {
        let container = self.container(&req.id)?;
        let stats = match container.usage() {
            Some(usage) => crate::stats::of_task(usage)?,
            None => crate::stats::of_process()?,
        };
        Ok(StatsResponse {
            stats: MessageField::some(stats),
            ..Default::default()
        })
    }
}

fn no_tty() -> Failure {
    Failure::Invalid(
        "wasmpod gives containers no terminal (TTY): run without -t / tty: true".into(),
    )
}

/// `dir` when it is (or can be made) a directory only root may write, as the compile cache
/// requires.
fn trusted_cache_dir(dir: &Path) -> Option<&Path> {
    use std::os::unix::fs::DirBuilderExt;
    let made = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir);
    if let Err(e) = made {
        log::warn!("compile cache {} is off: {e}", dir.display());
        return None;
    }
    Some(dir)
}

impl<E: EventSink> Task for Service<E> {
    fn create(&self, _: &TtrpcContext, req: CreateTaskRequest) -> TtrpcResult<CreateTaskResponse> {
        Ok(self.create_task(req)?)
    }

    fn start(&self, _: &TtrpcContext, req: StartRequest) -> TtrpcResult<StartResponse> {
        Ok(self.start_task(req)?)
    }

    fn delete(&self, _: &TtrpcContext, req: DeleteRequest) -> TtrpcResult<DeleteResponse> {
        Ok(self.delete_task(req)?)
    }

    fn pids(&self, _: &TtrpcContext, req: PidsRequest) -> TtrpcResult<PidsResponse> {
        self.container(&req.id)?;
        Ok(PidsResponse {
            processes: vec![ProcessInfo {
                pid: self.pid,
                ..Default::default()
            }],
            ..Default::default()
        })
    }

    fn kill(&self, _: &TtrpcContext, req: KillRequest) -> TtrpcResult<Empty> {
        self.kill_task(req)?;
        Ok(Empty::new())
    }

    fn exec(&self, _: &TtrpcContext, req: ExecProcessRequest) -> TtrpcResult<Empty> {
        self.exec_process(req)?;
        Ok(Empty::new())
    }

    fn resize_pty(&self, _: &TtrpcContext, _: ResizePtyRequest) -> TtrpcResult<Empty> {
        Err(no_tty().into())
    }

    fn close_io(&self, _: &TtrpcContext, _: CloseIORequest) -> TtrpcResult<Empty> {
        // Its stdin fifo ends when containerd closes its end.
        Ok(Empty::new())
    }

    fn update(&self, _: &TtrpcContext, req: UpdateTaskRequest) -> TtrpcResult<Empty> {
        self.update_task(req)?;
        Ok(Empty::new())
    }

    fn wait(&self, _: &TtrpcContext, req: WaitRequest) -> TtrpcResult<WaitResponse> {
        Ok(self.wait_for(req)?)
    }

    fn state(&self, _: &TtrpcContext, req: StateRequest) -> TtrpcResult<StateResponse> {
        Ok(self.state_of(req)?)
    }

    fn stats(&self, _: &TtrpcContext, req: StatsRequest) -> TtrpcResult<StatsResponse> {
        Ok(self.stats_of(req)?)
    }

    fn connect(&self, _: &TtrpcContext, _: ConnectRequest) -> TtrpcResult<ConnectResponse> {
        Ok(ConnectResponse {
            shim_pid: self.pid,
            task_pid: self.pid,
            ..Default::default()
        })
    }

    fn shutdown(&self, _: &TtrpcContext, _: ShutdownRequest) -> TtrpcResult<Empty> {
        if self.containers().is_empty() {
            // Out of the cgroup it joined, which goes with it.
            self.cgroup.lock().unwrap_or_else(|e| e.into_inner()).take();
            self.events.flush();
            self.exit.signal();
        }
        Ok(Empty::new())
    }
}

#[cfg(test)]
mod tests;
