//! Running one instance of a container: a fresh wasmtime store with the container's WASI
//! context (argv, env, volume mounts, captured stdio), driven to its end on the async runtime.
//!
//! A running guest yields to the scheduler at every epoch tick, so stopping it (TERM's default
//! action, KILL) is dropping its future: that works whether the guest computes or waits in a
//! host call.

use std::sync::Arc;

#[cfg(feature = "http")]
use tokio_util::either::Either;
use wasmtime::Store;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{AsyncStdinStream, StdoutStream};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

mod cpu;
mod exec;
mod exit;
#[cfg(feature = "http")]
mod http;
mod shared;
mod stdin;
mod trap;
mod usage;

pub(crate) use cpu::CpuLimit;
use cpu::prepare;
pub use exec::ExecOutput;
pub(crate) use exit::Exit;
use exit::{exit_of, not_started};
pub(crate) use shared::Shared;
pub use stdin::ContainerStdin;
pub(crate) use stdin::StdinPipe;
pub use usage::ContainerUsage;
pub(crate) use usage::{Meter, PodMeters};

use crate::engine::{Activity, Entry, Image};
#[cfg(feature = "http")]
use crate::host::Outgoing;
use crate::host::{KillClock, MemoryLimiter, P1State, P2State, TermSignal, ThreadRandom};
use crate::memory::{Budget, Charge, PodMemory};
use crate::network::PodNetwork;
use crate::volumes::MountDir;

/// The port an HTTP handler serves when its container declares no TCP port (`wasmtime serve`'s).
pub(crate) const DEFAULT_PORT: u16 = 8080;

/// Where and how a handler container serves.
#[cfg_attr(
    not(feature = "http"),
    expect(dead_code, reason = "read by HTTP handlers, which this build has not")
)]
pub(crate) struct HttpServe {
    /// The container's TCP `containerPort`s, or [`DEFAULT_PORT`].
    pub(crate) ports: Vec<u16>,
    pub(crate) serving: crate::spec::Serving,
}

/// Exit code of a container that could not be started (its sandbox could not be made).
pub(crate) const EXIT_START_ERROR: i32 = 128;
/// Exit code of a container whose guest trapped.
pub(crate) const EXIT_TRAP: i32 = 134;
/// Exit code of a container killed (KILL) or out of memory.
pub(crate) const EXIT_KILLED: i32 = 137;
/// Exit code of a container stopped by TERM's default action.
pub(crate) const EXIT_TERMINATED: i32 = 143;

/// A directory the guest sees.
pub(crate) struct Preopen {
    /// The host directory, opened once for every instance, or why it cannot be mounted.
    pub(crate) host: Result<MountDir, String>,
    pub(crate) guest: String,
    pub(crate) read_only: bool,
}

/// The thread an instance runs on, which decides how its file-system calls block and how soon
/// the epoch ticker hears that it executes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Thread {
    /// The runtime's workers, shared with every pod: each file-system call goes to tokio's
    /// blocking pool (a call blocked on a slow mount must not hold a worker), and the ticker
    /// is woken the moment the instance executes wasm, so that it yields within a tick.
    Worker,
    /// The runtime's workers, for a short-lived instance whose mounts are all on local file
    /// systems: its file-system calls are made inline (none waits on a server).
    WorkerLocalFs,
    /// A thread of its own: file-system calls are made inline, and the ticker is not woken
    /// for it (it delays no other pod; it is stopped and charged at the next tick, within
    /// the idle tick when nothing else runs).
    Own,
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
    /// The container's memory budget, shared by all its instances.
    pub(crate) budget: Arc<Budget>,
    /// The CPU limit (a share of one core, below 1), shared by all its instances.
    pub(crate) cpu: Option<Arc<CpuLimit>>,
    pub(crate) term: TermSignal,
    /// The kill deadline, once TERM was sent.
    pub(crate) kill: KillClock,
    /// The pod's network namespace (components reach it through `wasi:sockets`).
    pub(crate) net: Arc<PodNetwork>,
    /// The components' `wasi:sockets`, and an HTTP handler's ports, are the host's (the engine
    /// was made with [`crate::host::GuestSockets::Host`]), not `net`.
    pub(crate) host_sockets: bool,
    /// Where and how an HTTP handler component is served.
    #[cfg_attr(
        not(feature = "http"),
        expect(dead_code, reason = "read by HTTP handlers, which this build has not")
    )]
    pub(crate) http: HttpServe,
    /// The engine's count of stores executing wasm (its epoch ticker runs fast while any does).
    pub(crate) activity: Arc<Activity>,
    /// Where the instances' memory is counted.
    pub(crate) memory: Arc<PodMemory>,
    /// The CPU time the instances ran.
    pub(crate) meter: Meter,
    /// The main instance's stdin, for a container with `stdin: true`.
    pub(crate) stdin: Option<Arc<StdinPipe>>,
}

impl Sandbox {
    fn wasi(
        &self,
        argv: &[String],
        stdout: impl StdoutStream + 'static,
        stderr: impl StdoutStream + 'static,
        thread: Thread,
    ) -> std::io::Result<WasiCtxBuilder> {
        let mut b = WasiCtxBuilder::new();
        b.args(argv).envs(&self.env);
        b.secure_random(ThreadRandom);
        b.stdout(stdout).stderr(stderr);
        // wasmtime-wasi reads this when a directory is added (its files and directories block
        // inline or not) and, for the context, when a preview1 guest sleeps (with it, on the
        // calling thread): so it is on only while the mounts are added.
        b.allow_blocking_current_thread(thread != Thread::Worker);
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
            b.preopened_dir(host.path(), &p.guest, perms).map_err(|e| {
                std::io::Error::other(format!(
                    "cannot mount {} at {}: {e}",
                    host.shown().display(),
                    p.guest
                ))
            })?;
        }
        b.allow_blocking_current_thread(false);
        if let Some(dir) = &self.working_dir {
            b.initial_cwd(dir);
        }
        if self.host_sockets {
            b.inherit_network()
                .allow_tcp(true)
                .allow_udp(true)
                .allow_ip_name_lookup(true);
        }
        Ok(b)
    }

    fn limiter(&self, budget: Arc<Budget>) -> MemoryLimiter {
        MemoryLimiter::new(Charge::new(self.memory.clone(), budget))
    }

    /// A fresh store for one instance of a preview1 module.
    fn p1_store(
        &self,
        engine: &wasmtime::Engine,
        wasi: &mut WasiCtxBuilder,
        thread: Thread,
    ) -> Store<P1State> {
        let state = P1State {
            wasi: wasi.build_p1(),
            term: self.term.clone(),
            limiter: self.limiter(self.budget.clone()),
        };
        self.store(engine, state, |s| &mut s.limiter, thread)
    }

    /// A fresh store for one instance of a component, its memory counted against `budget`.
    fn p2_store(
        &self,
        engine: &wasmtime::Engine,
        wasi: &mut WasiCtxBuilder,
        budget: Arc<Budget>,
        thread: Thread,
    ) -> Store<P2State> {
        let state = P2State {
            ctx: wasi.build(),
            table: ResourceTable::new(),
            net: self.net.clone(),
            term: self.term.clone(),
            limiter: self.limiter(budget.clone()),
            budget,
            #[cfg(feature = "http")]
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            #[cfg(feature = "http")]
            outgoing: if self.host_sockets {
                Outgoing::Host
            } else {
                Outgoing::Pod(self.net.clone())
            },
        };
        self.store(engine, state, |s| &mut s.limiter, thread)
    }

    /// A fresh store holding `state` (a module's or a component's): its memory counted by the
    /// limiter `limiter` finds in it, its wasm time by the container's CPU limit and the node's
    /// activity count, its end by the kill clock.
    fn store<T: 'static>(
        &self,
        engine: &wasmtime::Engine,
        state: T,
        limiter: fn(&mut T) -> &mut MemoryLimiter,
        thread: Thread,
    ) -> Store<T> {
        let mut store = Store::new(engine, state);
        prepare(
            &mut store,
            limiter,
            self.cpu.clone(),
            self.kill.clone(),
            self.activity.clone(),
            thread,
        );
        store
    }

    /// Runs the container's entry point to its end (serves an HTTP handler until TERM) and
    /// reports how it ended.
    pub(crate) fn run<O, E>(
        self: Arc<Self>,
        stdout: O,
        stderr: E,
    ) -> impl Future<Output = Exit> + Send + use<O, E>
    where
        O: StdoutStream + 'static,
        E: StdoutStream + 'static,
    {
        let stdin = self.stdin.as_ref().and_then(|pipe| pipe.reader());
        self.run_with_stdin(stdout, stderr, stdin.map(AsyncStdinStream::new))
    }

    /// Runs the entry point as [`Sandbox::run`] does, reading `stdin` (empty when `None`).
    ///
    /// A command's streams go into its WASI context before the future is made: a future keeps
    /// what it is given for as long as it runs (a sleeping guest's whole life), and they are
    /// needed only to build the context.
    pub(crate) fn run_with_stdin<O, E>(
        self: Arc<Self>,
        stdout: O,
        stderr: E,
        stdin: Option<AsyncStdinStream>,
    ) -> impl Future<Output = Exit> + Send + use<O, E>
    where
        O: StdoutStream + 'static,
        E: StdoutStream + 'static,
    {
        #[cfg(feature = "http")]
        if let Image::Component {
            entry: Entry::Http(pre),
            ..
        } = &*self.image
        {
            // A server's streams are shared by the instances of its requests: it keeps them.
            let pre = pre.clone();
            return Either::Left(async move {
                self.meter
                    .run(Box::pin(self.serve(&pre, stdout, stderr)))
                    .await
            });
        }
        let wasi = self
            .wasi(&self.argv, stdout, stderr, Thread::Worker)
            .map(|mut wasi| {
                if let Some(stdin) = stdin {
                    wasi.stdin(stdin);
                }
                Box::new(wasi)
            });
        let command = async move {
            let wasi = match wasi {
                Ok(wasi) => wasi,
                Err(e) => return Exit::start_error(e.to_string()),
            };
            // The instance's place in the pool, if it has one: dropped after its store.
            let lease = self.image.long_lived();
            let exit = self.meter.run(self.run_entry(&lease.image, wasi)).await;
            if !lease.pooled() {
                self.image.ended();
            }
            exit
        };
        #[cfg(feature = "http")]
        let command = Either::Right(command);
        command
    }

    /// Runs the image's entry point in a store built from `wasi`. The builder comes boxed and
    /// is dropped once the store is made: an async fn keeps its arguments for as long as it runs
    /// (a guest's whole run), and a builder that has built keeps a fresh context's RNGs.
    async fn run_entry(&self, image: &Image, mut wasi: Box<WasiCtxBuilder>) -> Exit {
        match image {
            Image::Module { pre, .. } => {
                let mut store = self.p1_store(pre.module().engine(), &mut wasi, Thread::Worker);
                drop(wasi);
                let instance = match Box::pin(pre.instantiate_async(&mut store)).await {
                    Ok(instance) => instance,
                    Err(e) => return not_started(e, store.data().limiter.hit),
                };
                let result = async {
                    let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
                    start.call_async(&mut store, ()).await
                }
                .await;
                exit_of(result.map(|()| 0), store.data().limiter.hit)
            }
            Image::Component {
                entry: Entry::Command(pre),
                ..
            } => {
                let mut store =
                    self.p2_store(pre.engine(), &mut wasi, self.budget.clone(), Thread::Worker);
                drop(wasi);
                let command = match Box::pin(pre.instantiate_async(&mut store)).await {
                    Ok(command) => command,
                    Err(e) => return not_started(e, store.data().limiter.hit),
                };
                let result = Box::pin(command.wasi_cli_run().call_run(&mut store)).await;
                exit_of(
                    result.map(|r| if r.is_ok() { 0 } else { 1 }),
                    store.data().limiter.hit,
                )
            }
            Image::Component {
                entry: Entry::CommandP3(pre),
                ..
            } => {
                let mut store =
                    self.p2_store(pre.engine(), &mut wasi, self.budget.clone(), Thread::Worker);
                drop(wasi);
                let command = match Box::pin(pre.instantiate_async(&mut store)).await {
                    Ok(command) => command,
                    Err(e) => return not_started(e, store.data().limiter.hit),
                };
                let result =
                    Box::pin(store.run_concurrent(async |store| {
                        command.wasi_cli_run().call_run(store).await
                    }))
                    .await
                    .and_then(|r| r);
                exit_of(
                    result.map(|r| if r.is_ok() { 0 } else { 1 }),
                    store.data().limiter.hit,
                )
            }
            // An exec in a handler container names an export or nothing: there is no `main`.
            #[cfg(feature = "http")]
            Image::Component {
                entry: Entry::Http(_),
                ..
            } => Exit::start_error("an HTTP handler component has no command to run"),
        }
    }
}
