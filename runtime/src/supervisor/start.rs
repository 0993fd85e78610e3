//! Starting a container: the backoff gate, loading its module, assembling its sandbox
//! (environment, mounts, limits), launching the instance, and its postStart hook.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::container::{HookState, Instance, Waiting};
use super::probe::{self, HookKind, ProbeKind};
use super::stopping::Stopping;
use super::{MIN_GRACE, Msg, PodTask};
use crate::container::{
    CpuLimit, DEFAULT_PORT, EXIT_KILLED, Exit, HttpServe, Meter, Preopen, Sandbox, StdinPipe,
};
use crate::engine::{Image, Life, LoadError, Origin, Pull};
use crate::events::{EventType, Message, Reason};
use crate::host::TermSignal;
use crate::memory::Budget;
use crate::spec::{PodInfo, VolumeSource, resolve_env};

impl PodTask {
    /// Starts container `index`, which the plan found due: the restart counted against its
    /// backoff, its registry image pulled if it needs one (the start then waits for the pull),
    /// its module loaded, its sandbox assembled, its instance launched.
    pub(super) async fn start(&mut self, index: usize, now: Instant) {
        self.restarting(index, now);
        if !self.image_ready(index) {
            return;
        }
        let Some(image) = self.load_image(index, now).await else {
            return;
        };
        let sandbox = self.sandbox(index, image);
        self.launch(index, sandbox);
    }

    /// The container waits for its crash-loop backoff to end, at `until`.
    pub(super) fn back_off(&mut self, index: usize, until: Instant, now: Instant) {
        let pod = self.spec.name.clone();
        let c = &mut self.containers[index];
        let finished = c.last_exit().map_or(now, |t| t.finished);
        let delay = fmt_duration(until - finished);
        let message = format!(
            "back-off {delay} restarting failed container={} pod={pod}",
            c.name
        );
        c.wait(Waiting::CrashLoopBackOff, Some(message));
        c.retry_at = Some(until);
        let message = format!(
            "Back-off restarting failed container {} in pod {pod} (delay {delay})",
            c.name
        );
        self.container_event(index, EventType::Warning, Reason::BackOff, message, None);
    }

    /// Counts a start after an exit against the crash-loop backoff (a container restarted for
    /// a new image does not count).
    fn restarting(&mut self, index: usize, now: Instant) {
        let options = self.node.backoff;
        let c = &mut self.containers[index];
        let changed = std::mem::take(&mut c.changed);
        if let Some(finished) = c.last_exit().map(|t| t.finished).filter(|_| !changed) {
            c.backoff.restarted(finished, now, &options);
        }
        c.retry_at = None;
    }

    /// The container's module, preloaded or loaded now (with its `Pulled` event); `None` when
    /// it cannot be loaded, and the container then waits out the image backoff.
    async fn load_image(&mut self, index: usize, now: Instant) -> Option<Arc<Image>> {
        let options = self.node.backoff;
        let image = match self.containers[index].preloaded.take() {
            Some(preloaded) => Ok(preloaded),
            None => self.load(index).await,
        };
        let image = match image {
            // Its module was compiled by Cranelift first, unless another container loaded it
            // as baseline code: then it waits for the optimized code, which it would otherwise
            // keep for its whole life (an HTTP handler's instances are each request's).
            Ok((image, pull)) if self.life(index) == Life::AsLongAsItsPod && !image.serves() => {
                Ok((image.for_long_life().await, pull))
            }
            image => image,
        };
        let c = &mut self.containers[index];
        let (image, pull) = match image {
            Ok(loaded) => loaded,
            Err(e) => {
                let until = c.image_failed(now, &options);
                c.wait(Waiting::ImagePullBackOff, Some(e.to_string()));
                let message = format!(
                    "Failed to load module: {e}; back-off {}",
                    fmt_duration(until - now)
                );
                self.container_event(index, EventType::Warning, Reason::Failed, message, None);
                return None;
            }
        };
        c.load_failed_at = None;
        let path = c.spec.image.display().to_string();
        let message = match pull {
            // A registry image's `Pulled` event was its pull's.
            _ if c.spec.pull.is_some() => None,
            Pull::Present => Some(format!("Module {path:?} already loaded")),
            Pull::Cached => Some(format!("Loaded module {path:?} from the compile cache")),
            Pull::Precompiled => Some(format!("Loaded precompiled module {path:?}")),
            Pull::Compiled(t) => Some(format!(
                "Successfully compiled module {path:?} in {}",
                fmt_duration(t)
            )),
            Pull::Baseline(t) => Some(format!(
                "Successfully compiled module {path:?} in {} (baseline code; optimizing in the \
                 background)",
                fmt_duration(t)
            )),
        };
        if let Some(message) = message {
            self.container_event(index, EventType::Normal, Reason::Pulled, message, None);
        }
        Some(image)
    }

    /// How long the container's instances live, which decides whether they may start on
    /// baseline code.
    fn life(&self, index: usize) -> Life {
        let spec = &self.containers[index].spec;
        Life::of(spec.lives_as_long_as_its_pod(self.spec.restart_policy))
    }

    /// The sandbox of the container's next instance: its environment (the downward API, the
    /// `kubernetes` Service), its mounts, its memory and CPU limits, its ports and stdin.
    fn sandbox(&self, index: usize, image: Arc<Image>) -> Arc<Sandbox> {
        let c = &self.containers[index];
        let labels_and_more = PodInfo {
            name: &self.spec.name,
            namespace: &self.spec.namespace,
            uid: &self.uid,
            labels: &self.spec.labels,
            annotations: &self.spec.annotations,
            node_name: &self.node.node_name,
            service_account: &self.spec.service_account,
            pod_ip: self.pod_ip().to_string(),
            host_ip: self.node.host_ip.to_string(),
        };
        let (mut env, argv) = resolve_env(&c.spec.env, &c.spec.argv, &labels_and_more);
        if self.node.network.api_server().is_some() {
            // Before the container's own, which win.
            let mut service: Vec<_> = crate::network::kubernetes_service_env()
                .into_iter()
                .filter(|(k, _)| !env.iter().any(|(name, _)| name == k))
                .collect();
            service.append(&mut env);
            env = service;
        }
        Arc::new(Sandbox {
            image,
            argv,
            env,
            preopens: c
                .spec
                .mounts
                .iter()
                .filter(|m| !m.file)
                .map(|m| Preopen {
                    host: self.volumes.mount_dir(m.volume, m.sub_path.as_deref()),
                    guest: m.path.clone(),
                    read_only: m.read_only
                        || matches!(self.spec.volumes[m.volume].source, VolumeSource::Files(_)),
                })
                .chain(c.spec.file_dirs.iter().enumerate().map(|(n, d)| {
                    let files: Vec<_> = d
                        .files
                        .iter()
                        .map(|(name, m)| (name.clone(), &c.spec.mounts[*m]))
                        .collect();
                    Preopen {
                        host: self.paths.pod_dir().and_then(|pod_dir| {
                            self.volumes.file_dir(
                                (&self.spec, pod_dir, &self.uid),
                                &c.name,
                                n,
                                &files,
                            )
                        }),
                        guest: d.dir.clone(),
                        read_only: d.read_only,
                    }
                }))
                .chain(c.spec.termination.as_ref().map(|t| Preopen {
                    host: self.paths.pod_dir().and_then(|pod_dir| {
                        crate::volumes::termination_dir(pod_dir, &c.name, &t.file)
                    }),
                    guest: t.dir.clone(),
                    read_only: false,
                }))
                .collect(),
            working_dir: c.spec.working_dir.clone(),
            budget: Budget::within(
                c.spec
                    .resources
                    .memory_limit
                    .unwrap_or(self.node.memory_limit as u64),
                self.pod_limits.memory.clone(),
            ),
            cpu: match (c.spec.resources.cpu_share(), &self.pod_limits.cpu) {
                (Some(share), pod) => Some(CpuLimit::within(share, pod.clone())),
                (None, pod) => pod.clone(),
            },
            term: TermSignal::default(),
            kill: Default::default(),
            net: self.net.clone(),
            host_sockets: self.spec.host_network,
            http: HttpServe {
                ports: {
                    let tcp: Vec<u16> = c
                        .spec
                        .ports
                        .iter()
                        .filter(|p| !p.udp)
                        .map(|p| p.port)
                        .collect();
                    if tcp.is_empty() {
                        vec![DEFAULT_PORT]
                    } else {
                        tcp
                    }
                },
                serving: self.spec.serving,
            },
            activity: self
                .node
                .engine_for(self.spec.host_network)
                .activity()
                .clone(),
            memory: self.memory.clone(),
            meter: Meter::new(),
            stdin: c.spec.stdin.map(StdinPipe::new),
        })
    }

    /// Launches the container's instance in `sandbox` (TERM reaches it through the sandbox's
    /// signal), then its postStart hook; it counts as Running once the hook returned.
    fn launch(&mut self, index: usize, sandbox: Arc<Sandbox>) {
        let c = &mut self.containers[index];
        if c.runs > 0 {
            c.restart_count += 1;
        }
        c.wait(Waiting::ContainerCreating, None);
        let (kill_tx, kill_rx) = oneshot::channel();
        self.meters.running(index, &c.name, &sandbox);
        let (stdout, stderr, log) = self.output.instance(&c.name, c.restart_count);
        self.instances += 1;
        let id = self.instances;
        c.instance = Some(Instance {
            id,
            sandbox: sandbox.clone(),
            started: Instant::now(),
            kill: Some(kill_tx),
            stop: Stopping::No,
            post_start: if c.spec.post_start.is_some() {
                HookState::Running
            } else {
                HookState::NotRun
            },
            tasks: Vec::new(),
        });
        c.runs += 1;
        let post_start = c.spec.post_start.as_deref().cloned();
        self.container_event(
            index,
            EventType::Normal,
            Reason::Created,
            Message::Created,
            None,
        );
        let tx = self.tx.clone();
        let main = sandbox.clone().run(stdout, stderr);
        crate::eager::spawn(async move {
            // The instance's future (and its sandbox) is dropped as the select ends.
            let exit = tokio::select! {
                exit = main => exit,
                code = kill_rx => Exit::code(code.unwrap_or(EXIT_KILLED)),
            };
            // When it stopped, not when the supervisor gets to it (busy with other pods).
            let at = jiff::Timestamp::now();
            // Reported once what it printed is in its log file.
            log.close().await;
            tx.send(Msg::Exited {
                index,
                id,
                exit,
                at,
            });
        });
        match post_start {
            // The container is not Running until its postStart hook returns.
            Some(handler) => {
                let timeout = self.spec.grace_period.max(MIN_GRACE);
                self.run_hook(index, HookKind::PostStart, handler, timeout);
            }
            None => self.running(index),
        }
    }

    pub(super) async fn load(&self, index: usize) -> Result<(Arc<Image>, Pull), LoadError> {
        let c = &self.containers[index];
        let path = c.spec.image.clone();
        let host = self.spec.host_network;
        if let Some(image) = self.node.engine_for(host).loaded(&path) {
            return Ok((image, Pull::Present));
        }
        let origin = match (&c.spec.pull, &c.pulled) {
            (None, _) => Origin::Local,
            (Some(_), pulled) => Origin::Pulled {
                machine_code: pulled.as_deref().is_some_and(|(r, _)| r.precompiled),
            },
        };
        let (node, life) = (self.node.clone(), self.life(index));
        match tokio::task::spawn_blocking(move || node.engine_for(host).load(&path, origin, life))
            .await
        {
            Ok(result) => result,
            Err(e) => Err(LoadError::Compile {
                path: self.containers[index].spec.image.clone(),
                message: e.to_string(),
            }),
        }
    }

    /// The container counts as Running (its postStart hook, if any, returned): it is started
    /// and ready unless probes say otherwise, and its probes begin.
    pub(super) fn running(&mut self, index: usize) {
        let c = &mut self.containers[index];
        if c.instance.is_none() {
            return;
        }
        c.run();
        self.container_event(
            index,
            EventType::Normal,
            Reason::Started,
            Message::Started,
            None,
        );
        if self.containers[index].spec.startup.is_some() {
            self.spawn_probes(index, &[ProbeKind::Startup]);
        } else {
            self.spawn_probes(index, &[ProbeKind::Liveness, ProbeKind::Readiness]);
        }
    }

    pub(super) fn spawn_probes(&mut self, index: usize, kinds: &[ProbeKind]) {
        let c = &mut self.containers[index];
        let Some(instance) = &mut c.instance else {
            return;
        };
        for &kind in kinds {
            let probe = match kind {
                ProbeKind::Startup => &c.spec.startup,
                ProbeKind::Liveness => &c.spec.liveness,
                ProbeKind::Readiness => &c.spec.readiness,
            };
            let Some(probe) = probe.as_deref().cloned() else {
                continue;
            };
            let target = probe::Target {
                index,
                id: instance.id,
                tx: self.tx.clone(),
            };
            let task = tokio::spawn(probe::worker(
                kind,
                probe,
                instance.sandbox.clone(),
                instance.started,
                target,
            ));
            instance.tasks.push(task.abort_handle());
        }
    }
}

pub(super) fn fmt_duration(d: Duration) -> String {
    if d.as_secs() >= 1 && d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else if d.as_millis() >= 1 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}µs", d.as_micros())
    }
}
