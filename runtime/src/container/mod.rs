//! Running one instance of a container: a fresh wasmtime store with the container's WASI
//! context (argv, env, volume mounts, captured stdio), driven to its end on the async runtime.
//!
//! A running guest yields to the scheduler at every epoch tick, so stopping it (TERM's default
//! action, KILL) is dropping its future: that works whether the guest computes or waits in a
//! host call.

mod meter;
mod term;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::cli::StdoutStream;
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::engine::Image;
use crate::network::PodNetwork;
use crate::network::wasi::{Sockets, SocketsView};
use crate::output::OutputSink;
pub(crate) use meter::{NodeMemory, PodMemory};
pub(crate) use term::{
    KillClock, TERM_INTERFACE, TERM_MODULE, TermSignal, add_p1_termination, add_p2_termination,
};

/// Exit code of a container whose guest trapped.
pub(crate) const EXIT_TRAP: i32 = 134;
/// Exit code of a container killed (KILL) or out of memory.
pub(crate) const EXIT_KILLED: i32 = 137;
/// Exit code of a container stopped by TERM's default action.
pub(crate) const EXIT_TERMINATED: i32 = 143;

pub(crate) struct P1State {
    pub(crate) wasi: WasiP1Ctx,
    pub(crate) term: TermSignal,
    limiter: MemoryLimiter,
}

pub(crate) struct P2State {
    ctx: WasiCtx,
    pub(crate) table: ResourceTable,
    net: Arc<PodNetwork>,
    pub(crate) term: TermSignal,
    limiter: MemoryLimiter,
}

impl WasiView for P2State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

impl SocketsView for P2State {
    fn sockets(&mut self) -> Sockets<'_> {
        Sockets {
            table: &mut self.table,
            net: &self.net,
        }
    }
}

/// Caps a container's linear memories, remembers whether the cap was hit, and charges what
/// they hold to the pod.
struct MemoryLimiter {
    limit: usize,
    hit: bool,
    charge: meter::Charge,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let ok = desired <= self.limit;
        self.hit |= !ok;
        if ok {
            self.charge.grew(current, desired);
        }
        Ok(ok)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// A directory the guest sees.
pub(crate) struct Preopen {
    /// The host directory, or why it cannot be mounted.
    pub(crate) host: Result<PathBuf, String>,
    pub(crate) guest: String,
    pub(crate) read_only: bool,
}

/// Everything a container's instances are made from: its image, argv, environment, mounts and
/// limits. The main instance runs the entry point; probes and hooks run in fresh instances made
/// from the same sandbox (Kubernetes' exec semantics: same volumes and env, not the same memory).
pub(crate) struct Sandbox {
    pub(crate) image: Arc<Image>,
    pub(crate) argv: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) preopens: Vec<Preopen>,
    pub(crate) working_dir: Option<String>,
    pub(crate) memory_limit: usize,
    /// The CPU limit as a share of one core, below 1.
    pub(crate) cpu_share: Option<f64>,
    pub(crate) term: TermSignal,
    /// The kill deadline, once TERM was sent.
    pub(crate) kill: KillClock,
    /// The pod's network namespace (components reach it through `wasi:sockets`).
    pub(crate) net: Arc<PodNetwork>,
    /// Where the instances' memory is counted.
    pub(crate) memory: Arc<PodMemory>,
}

/// How a container instance ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exit {
    pub(crate) code: i32,
    pub(crate) oom: bool,
    pub(crate) message: Option<String>,
}

impl Exit {
    pub(crate) fn code(code: i32) -> Exit {
        Exit {
            code,
            oom: false,
            message: None,
        }
    }

    /// The Kubernetes reason for this exit.
    pub(crate) fn reason(&self) -> &'static str {
        match (self.oom, self.code) {
            (true, _) => "OOMKilled",
            (false, 0) => "Completed",
            (false, _) => "Error",
        }
    }
}

/// The most output of an exec handler kept for its result message.
const EXEC_OUTPUT: usize = 1024;

/// What a handler's `exec.command[0]` resolves to in a preview1 module, besides its own name.
fn p1_export(name: &str) -> &str {
    match name {
        "liveness" => "wasmpod_probe_liveness",
        "readiness" => "wasmpod_probe_readiness",
        "startup" => "wasmpod_probe_startup",
        "post-start" | "post_start" => "wasmpod_post_start",
        "pre-stop" | "pre_stop" => "wasmpod_pre_stop",
        other => other,
    }
}

/// The interface of a component export a handler name resolves to.
fn p2_interface(name: &str) -> Option<&'static str> {
    match name {
        "liveness" | "readiness" | "startup" => Some("wasmpod:pod/probes@0.1.0"),
        "post-start" | "pre-stop" => Some("wasmpod:pod/hooks@0.1.0"),
        _ => None,
    }
}

impl Sandbox {
    fn wasi(
        &self,
        argv: &[String],
        stdout: impl StdoutStream + 'static,
        stderr: impl StdoutStream + 'static,
    ) -> std::io::Result<WasiCtxBuilder> {
        let mut b = WasiCtxBuilder::new();
        b.args(argv).envs(&self.env);
        b.stdout(stdout).stderr(stderr);
        for p in &self.preopens {
            let perms = if p.read_only {
                FsPerms::ReadOnly
            } else {
                FsPerms::ReadWrite
            };
            let host = p
                .host
                .as_ref()
                .map_err(|e| std::io::Error::other(format!("cannot mount at {}: {e}", p.guest)))?;
            b.preopened_dir(host, &p.guest, perms).map_err(|e| {
                std::io::Error::other(format!(
                    "cannot mount {} at {}: {e}",
                    host.display(),
                    p.guest
                ))
            })?;
        }
        if let Some(dir) = &self.working_dir {
            b.initial_cwd(dir);
        }
        Ok(b)
    }

    fn limiter(&self) -> MemoryLimiter {
        MemoryLimiter {
            limit: self.memory_limit,
            hit: false,
            charge: meter::Charge::new(self.memory.clone()),
        }
    }

    /// A fresh store for one instance of a preview1 module.
    fn p1_store(&self, engine: &wasmtime::Engine, wasi: &mut WasiCtxBuilder) -> Store<P1State> {
        let state = P1State {
            wasi: wasi.build_p1(),
            term: self.term.clone(),
            limiter: self.limiter(),
        };
        let mut store = Store::new(engine, state);
        prepare(
            &mut store,
            |s| &mut s.limiter,
            self.cpu_share,
            self.kill.clone(),
        );
        store
    }

    /// A fresh store for one instance of a component.
    fn p2_store(&self, engine: &wasmtime::Engine, wasi: &mut WasiCtxBuilder) -> Store<P2State> {
        let state = P2State {
            ctx: wasi.build(),
            table: ResourceTable::new(),
            net: self.net.clone(),
            term: self.term.clone(),
            limiter: self.limiter(),
        };
        let mut store = Store::new(engine, state);
        prepare(
            &mut store,
            |s| &mut s.limiter,
            self.cpu_share,
            self.kill.clone(),
        );
        store
    }

    /// Runs the container's entry point to its end and reports how it ended.
    pub(crate) async fn run(&self, stdout: OutputSink, stderr: OutputSink) -> Exit {
        match self.wasi(&self.argv, stdout, stderr) {
            Ok(wasi) => self.run_entry(wasi).await,
            Err(e) => Exit {
                code: 128,
                oom: false,
                message: Some(e.to_string()),
            },
        }
    }

    async fn run_entry(&self, mut wasi: WasiCtxBuilder) -> Exit {
        match &*self.image {
            Image::Module { pre, .. } => {
                let mut store = self.p1_store(pre.module().engine(), &mut wasi);
                let result = async {
                    let instance = pre.instantiate_async(&mut store).await?;
                    let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
                    start.call_async(&mut store, ()).await
                }
                .await;
                exit_of(result.map(|()| 0), store.data().limiter.hit)
            }
            Image::Component { pre, .. } => {
                let mut store = self.p2_store(pre.engine(), &mut wasi);
                let result = async {
                    let command = pre.instantiate_async(&mut store).await?;
                    command.wasi_cli_run().call_run(&mut store).await
                }
                .await;
                exit_of(
                    result.map(|r| if r.is_ok() { 0 } else { 1 }),
                    store.data().limiter.hit,
                )
            }
        }
    }

    /// Runs an exec handler in a fresh instance: the export `command[0]` names when the module
    /// has it, else the entry point with argv = `command`. `Ok` on success; the error says why
    /// not, with what the handler printed.
    pub(crate) async fn exec(&self, command: &[String]) -> Result<(), String> {
        let name = command.first().map(String::as_str).unwrap_or_default();
        let output = MemoryOutputPipe::new(EXEC_OUTPUT);
        let mut wasi = self
            .wasi(command, output.clone(), output.clone())
            .map_err(|e| e.to_string())?;
        let with_output = |message: String| {
            let out = String::from_utf8_lossy(&output.contents())
                .trim()
                .to_owned();
            if out.is_empty() {
                message
            } else {
                format!("{message}: {out}")
            }
        };
        let called = match &*self.image {
            Image::Module { pre, .. } => {
                let export = p1_export(name);
                let Some(wasmtime::ExternType::Func(_)) = pre.module().get_export(export) else {
                    return self.exec_entry(wasi, with_output).await;
                };
                let mut store = self.p1_store(pre.module().engine(), &mut wasi);
                let result = async {
                    let instance = pre.instantiate_async(&mut store).await?;
                    let f = instance.get_typed_func::<(), i32>(&mut store, export)?;
                    f.call_async(&mut store, ()).await
                }
                .await;
                result.map(|code| {
                    if code == 0 {
                        Ok(())
                    } else {
                        Err(format!("{export} returned {code}"))
                    }
                })
            }
            Image::Component { instance: pre, .. } => {
                let component = pre.component();
                let index = p2_interface(name)
                    .and_then(|i| component.get_export_index(None, i))
                    .and_then(|i| component.get_export_index(Some(&i), name));
                let Some(index) = index else {
                    return self.exec_entry(wasi, with_output).await;
                };
                let mut store = self.p2_store(pre.engine(), &mut wasi);
                let result = async {
                    let instance = pre.instantiate_async(&mut store).await?;
                    let f =
                        instance.get_typed_func::<(), (Result<(), String>,)>(&mut store, &index)?;
                    f.call_async(&mut store, ()).await
                }
                .await;
                result.map(|(r,)| r)
            }
        };
        match called {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(with_output(message)),
            Err(e) => Err(with_output(format!("{name} trapped: {}", e.root_cause()))),
        }
    }

    async fn exec_entry(
        &self,
        wasi: WasiCtxBuilder,
        with_output: impl Fn(String) -> String,
    ) -> Result<(), String> {
        let exit = self.run_entry(wasi).await;
        match (exit.code, exit.message) {
            (0, _) => Ok(()),
            (code, None) => Err(with_output(format!("command exited with {code}"))),
            (code, Some(m)) => Err(with_output(format!("command exited with {code} ({m})"))),
        }
    }
}

fn prepare<T: 'static>(
    store: &mut Store<T>,
    limiter: fn(&mut T) -> &mut MemoryLimiter,
    cpu_share: Option<f64>,
    kill: KillClock,
) {
    store.limiter(move |s| limiter(s) as &mut dyn ResourceLimiter);
    crate::engine::activity::track(store);
    // At every epoch tick the guest yields through tokio's `yield_now`, which lets the runtime
    // poll its timers and I/O before the guest runs again: a busy guest cannot delay a kill
    // deadline, a probe or a neighbour's wake-up by more than one tick.
    //
    // A guest with a CPU limit (a share f of one core) owes ran × (1 − f) / f of idle time for
    // every slice it runs; it pays once the debt reaches THROTTLE_PAUSE, and time overslept is
    // credited back, so that over a few pauses it uses f of a core.
    let throttle = Arc::new(std::sync::Mutex::new(Throttle {
        resumed: std::time::Instant::now(),
        debt: 0.0,
    }));
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if kill.passed() {
            return Err(term::Killed.into());
        }
        let pause = {
            let mut t = throttle.lock().unwrap();
            if let Some(f) = cpu_share {
                t.debt += t.resumed.elapsed().as_secs_f64() * (1.0 - f) / f;
            }
            (t.debt >= THROTTLE_PAUSE.as_secs_f64()).then(|| Duration::from_secs_f64(t.debt))
        };
        let throttle = throttle.clone();
        let slice = async move {
            let start = std::time::Instant::now();
            match pause {
                Some(pause) => tokio::time::sleep(pause).await,
                None => tokio::task::yield_now().await,
            }
            let mut t = throttle.lock().unwrap();
            if pause.is_some() {
                t.debt =
                    (t.debt - start.elapsed().as_secs_f64()).max(-THROTTLE_PAUSE.as_secs_f64());
            }
            t.resumed = std::time::Instant::now();
        };
        Ok(UpdateDeadline::YieldCustom(1, Box::pin(slice)))
    });
}

/// The shortest pause of a CPU-limited guest; shorter ones would be mostly timer rounding.
const THROTTLE_PAUSE: Duration = Duration::from_millis(10);

/// CPU accounting of a CPU-limited guest: when it last resumed, and the idle time it owes
/// (seconds; negative when it overslept).
struct Throttle {
    resumed: std::time::Instant,
    debt: f64,
}

fn exit_of(result: wasmtime::Result<i32>, oom: bool) -> Exit {
    match result {
        Ok(code) => Exit {
            code,
            oom: false,
            message: None,
        },
        Err(e) => {
            if let Some(exit) = e.downcast_ref::<I32Exit>() {
                return Exit::code(exit.0);
            }
            if e.downcast_ref::<term::Killed>().is_some() {
                return Exit::code(EXIT_KILLED);
            }
            let cause = e.root_cause().to_string();
            if oom {
                return Exit {
                    code: EXIT_KILLED,
                    oom: true,
                    message: Some(format!("memory limit reached: {cause}")),
                };
            }
            Exit {
                code: EXIT_TRAP,
                oom: false,
                message: Some(cause),
            }
        }
    }
}
