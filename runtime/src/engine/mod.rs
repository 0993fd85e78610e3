//! The one wasmtime engine of a node: configuration, the epoch ticker that drives time slices
//! and kills, the linkers, and loading `.wasm` files into ready-to-instantiate images.

pub(crate) mod activity;
#[cfg(feature = "compiler")]
mod cache;
mod compile;
mod link;
mod pool;
mod space;
mod stacks;
mod tier;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use wasmtime::{Config, InstancePre};
use wasmtime_wasi::p2::bindings::CommandPre;
#[cfg(feature = "http")]
use wasmtime_wasi_http::p2::bindings::ProxyPre;

use crate::host::{GuestSockets, Linkers, P1State, P2State};
pub(crate) use activity::Activity;
#[cfg(feature = "compiler")]
use cache::CompileCache;
pub use compile::CompileTarget;
#[cfg(feature = "compiler")]
pub use compile::compile;
pub(crate) use compile::{MachineCode, Origin};
use link::{Artefact, Kind, link, precompiled_kind};
use pool::{Pool, Twin};
pub use space::AddressSpace;
pub(crate) use tier::Life;
use tier::{Baseline, Optimized, Optimizing};

/// A loaded container image: a pre-linked module or component, shared by every pod that runs it.
pub(crate) enum Image {
    Module {
        pre: InstancePre<P1State>,
        handles_term: bool,
        twin: Twin,
        /// A baseline image's optimized one, once compiled.
        optimized: Option<Arc<Optimized>>,
    },
    Component {
        entry: Entry,
        /// The same component, for calling exports other than its entry point.
        instance: wasmtime::component::InstancePre<P2State>,
        handles_term: bool,
        twin: Twin,
        /// A baseline image's optimized one, once compiled.
        optimized: Option<Arc<Optimized>>,
    },
}

/// What running a component means.
pub(crate) enum Entry {
    /// A command: `wasi:cli/run`, once.
    Command(CommandPre<P2State>),
    /// A WASI 0.3 command: `wasi:cli/run@0.3`, once, on the component model's async ABI.
    CommandP3(wasmtime_wasi::p3::bindings::CommandPre<P2State>),
    /// An HTTP handler (`wasi:http/incoming-handler`, the `wasi:http/proxy` world, or 0.3's
    /// `wasi:http/handler`): a fresh instance for each request on the container's ports.
    #[cfg(feature = "http")]
    Http(HttpPre),
}

/// A pre-instantiated HTTP handler of either WASI version.
#[cfg(feature = "http")]
#[derive(Clone)]
pub(crate) enum HttpPre {
    P2(ProxyPre<P2State>),
    P3(wasmtime_wasi_http::p3::bindings::ServicePre<P2State>),
}

impl Entry {
    /// Whether it is an HTTP handler's.
    fn serves(&self) -> bool {
        #[cfg(feature = "http")]
        if let Entry::Http(_) = self {
            return true;
        }
        false
    }
}

#[cfg(feature = "http")]
impl HttpPre {
    /// Makes an instance (the first, which tells whether the handler can run at all).
    pub(crate) async fn instantiate(
        &self,
        store: &mut wasmtime::Store<P2State>,
    ) -> wasmtime::Result<()> {
        match self {
            HttpPre::P2(pre) => pre.instantiate_async(store).await.map(drop),
            HttpPre::P3(pre) => pre.instantiate_async(store).await.map(drop),
        }
    }
}

impl Image {
    pub(crate) fn handles_term(&self) -> bool {
        match self {
            Image::Module { handles_term, .. } | Image::Component { handles_term, .. } => {
                *handles_term
            }
        }
    }

    /// Whether it serves HTTP: its instances are each request's, however long its container
    /// lives.
    pub(crate) fn serves(&self) -> bool {
        matches!(self, Image::Component { entry, .. } if entry.serves())
    }

    fn optimized(&self) -> Option<&Optimized> {
        match self {
            Image::Module { optimized, .. } | Image::Component { optimized, .. } => {
                optimized.as_deref()
            }
        }
    }
}

/// How an image was obtained, for the `Pulled` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    not(feature = "compiler"),
    allow(dead_code, reason = "without a compiler nothing is compiled here")
)]
pub(crate) enum Pull {
    /// Already loaded in this process.
    Present,
    /// Read from the on-disk compile cache.
    Cached,
    /// Loaded from a precompiled artefact (a `.cwasm`).
    Precompiled,
    /// Compiled now (and stored in the cache).
    Compiled(Duration),
    /// Compiled now to baseline code, and being optimized in the background.
    Baseline(Duration),
}

/// Why a `.wasm` file could not be turned into an image.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's reason (shared: a load's result goes to every pod that waits
        /// for it).
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The file is not a WebAssembly module or component.
    #[error("{path} is not a WebAssembly module or component")]
    NotWasm {
        /// The file.
        path: PathBuf,
    },
    /// Compilation failed.
    #[error("{path} does not compile: {message}")]
    Compile {
        /// The file.
        path: PathBuf,
        /// wasmtime's reason.
        message: String,
    },
    /// A precompiled artefact made for another target, CPU, address-space mode, wasmpod or
    /// wasmtime than this node's.
    #[error("{path} was precompiled for another node: {message}")]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// What differs, and how to make one for this node.
        message: String,
    },
    /// A precompiled artefact (machine code) from where this node does not run machine code.
    #[error("{path} is machine code (a precompiled artefact), which this node runs only {allowed}")]
    MachineCode {
        /// The file.
        path: PathBuf,
        /// Where the node takes machine code from.
        allowed: String,
    },
    /// The module imports something wasmpod does not provide, or lacks the entry point.
    #[error("{path} cannot run in wasmpod: {message}")]
    Link {
        /// The file.
        path: PathBuf,
        /// What is missing.
        message: String,
    },
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct FileKey {
    path: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
}

impl FileKey {
    fn of(path: &Path) -> std::io::Result<FileKey> {
        let meta = std::fs::metadata(path)?;
        Ok(FileKey {
            path: path.to_owned(),
            len: meta.len(),
            modified: meta.modified().ok(),
        })
    }
}

/// The wasmtime configuration of every engine of this process (artefacts compiled by one load
/// in any other).
fn config() -> Config {
    config_for(AddressSpace::of_process())
}

/// The wasmtime configuration of a node whose instances use the address space as `space` says.
fn config_for(space: AddressSpace) -> Config {
    let mut config = Config::new();
    space.apply(&mut config);
    config.epoch_interruption(true);
    // The version string is short: wasmtime refuses only strings past 255 bytes.
    config
        .module_version(compile::version_strategy())
        .expect("a version string");
    // WASI 0.3 (p3) components use the component model's async ABI.
    config.wasm_component_model_async(true);
    #[cfg(feature = "compiler")]
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    // Each live instance costs memory mappings, and Linux caps a process at
    // `vm.max_map_count` (65,530 by default): without a guard region before each linear
    // memory an instance takes one mapping fewer, which is what lets 10,000 pods fit.
    // The guard after the memory, which the bounds checks rely on, stays.
    config.guard_before_linear_memory(false);
    config
}

pub(crate) struct Engine {
    pub(crate) wasmtime: wasmtime::Engine,
    /// Where local precompiled artefacts (machine code) may come from.
    machine_code: MachineCode,
    #[cfg(feature = "compiler")]
    cache: CompileCache,
    linkers: Arc<Linkers>,
    /// The engine of short-lived instances (probes, hooks, HTTP requests).
    pool: Arc<Pool>,
    /// The engine of baseline code, when this engine compiles in tiers.
    #[cfg_attr(
        not(feature = "compiler"),
        allow(dead_code, reason = "without a compiler nothing is compiled here")
    )]
    baseline: Option<Arc<Baseline>>,
    optimizing: Arc<Optimizing>,
    loaded: Mutex<HashMap<FileKey, Arc<Image>>>,
    stop_ticker: Arc<AtomicBool>,
    ticker: std::thread::Thread,
    activity: Arc<Activity>,
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
        self.ticker.unpark();
    }
}

impl Engine {
    /// An engine whose components reach the network through `sockets`; `tiered`: a module it
    /// compiles runs on baseline code first (`tier.rs`).
    pub(crate) fn new(
        cache_dir: Option<PathBuf>,
        sockets: GuestSockets,
        machine_code: MachineCode,
        tiered: bool,
    ) -> wasmtime::Result<Engine> {
        let mut config = config();
        config.with_host_stack(Arc::new(stacks::Stacks::default()));
        let wasmtime = wasmtime::Engine::new(&config)?;
        let linkers = Arc::new(Linkers::new(&wasmtime, sockets));
        let pool = Arc::new(Pool::new(sockets));
        let baseline = tiered.then(|| Arc::new(Baseline::new(sockets)));

        let stop_ticker = Arc::new(AtomicBool::new(false));
        let activity = Arc::new(Activity::default());
        let (engine, stop, active) = (wasmtime.clone(), stop_ticker.clone(), activity.clone());
        let pooled = pool.clone();
        let baseline_engine = baseline.clone();
        let ticker = std::thread::Builder::new()
            .name("wasmpod-epoch".into())
            .spawn(move || {
                let mut quiet = 0;
                while !stop.load(Ordering::Relaxed) {
                    active.wait_for_tick(&mut quiet);
                    engine.increment_epoch();
                    if let Some(pooled) = pooled.made() {
                        pooled.increment_epoch();
                    }
                    if let Some(baseline) = baseline_engine.as_ref().and_then(|b| b.made()) {
                        baseline.increment_epoch();
                    }
                }
            })?;
        let ticker = ticker.thread().clone();
        activity.set_ticker(ticker.clone());
        #[cfg(not(feature = "compiler"))]
        let _ = cache_dir;
        Ok(Engine {
            machine_code,
            #[cfg(feature = "compiler")]
            cache: CompileCache::new(cache_dir, &wasmtime),
            wasmtime,
            linkers,
            pool,
            baseline,
            optimizing: Arc::default(),
            loaded: Mutex::new(HashMap::new()),
            stop_ticker,
            ticker,
            activity,
        })
    }

    /// Which of this engine's stores execute wasm (stores register with [`activity::track`]).
    pub(crate) fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }

    /// The image at `path` if this process has it loaded and the file is unchanged: one `stat`,
    /// cheap enough for the async runtime's threads.
    pub(crate) fn loaded(&self, path: &Path) -> Option<Arc<Image>> {
        let key = FileKey::of(path).ok()?;
        self.present(&key)
    }

    /// The loaded image of `key`, as instances are made from it now: once a baseline image is
    /// optimized, the optimized one takes its place here, and the baseline code is freed when
    /// the last instance running it ends.
    fn present(&self, key: &FileKey) -> Option<Arc<Image>> {
        let mut loaded = self.loaded.lock().unwrap();
        let image = loaded.get_mut(key)?;
        let current = image.current().clone();
        if !Arc::ptr_eq(&current, image) {
            *image = current.clone();
        }
        Some(current)
    }

    /// Loads the image at `path`: from memory when this process has it, else from the compile
    /// cache, else by compiling (on baseline code first for an instance that ends, when this
    /// engine compiles in tiers); a precompiled artefact only where `origin` allows machine
    /// code. Blocking; call from a blocking context.
    pub(crate) fn load(
        &self,
        path: &Path,
        origin: Origin,
        life: Life,
    ) -> Result<(Arc<Image>, Pull), LoadError> {
        let read_err = |e: std::io::Error| LoadError::Read {
            path: path.to_owned(),
            source: Arc::new(e),
        };
        let key = FileKey::of(path).map_err(read_err)?;
        if let Some(image) = self.present(&key) {
            return Ok((image, Pull::Present));
        }
        let mut file = std::fs::File::open(path).map_err(read_err)?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes).map_err(read_err)?;
        // Asked only of a precompiled artefact: where the file read is, after symbolic links
        // (what is checked is what was read).
        let machine_code = || match origin {
            Origin::Local => match opened_path(&file, path) {
                Some(real) if self.machine_code.allows(&real) => Ok(()),
                _ => Err(self.machine_code.sources()),
            },
            Origin::Pulled { machine_code: true } => Ok(()),
            Origin::Pulled {
                machine_code: false,
            } => Err(
                "from a precompiled layer of a registry it trusts with it (--precompiled-registry)"
                    .to_owned(),
            ),
        };
        let (image, pull) = self.compile(path, &bytes, machine_code, life)?;
        let image = Arc::new(image);
        self.loaded.lock().unwrap().insert(key, image.clone());
        Ok((image, pull))
    }

    /// The image of `bytes`: a precompiled artefact (`.cwasm`) as it is, a module or component
    /// from the compile cache or compiled now.
    fn compile(
        &self,
        path: &Path,
        bytes: &[u8],
        machine_code: impl FnOnce() -> Result<(), String>,
        life: Life,
    ) -> Result<(Image, Pull), LoadError> {
        if let Some(kind) = precompiled_kind(bytes) {
            if let Err(allowed) = machine_code() {
                return Err(LoadError::MachineCode {
                    path: path.to_owned(),
                    allowed,
                });
            }
            // SAFETY: a `.cwasm` is trusted as the node's binary is (docs/small-devices.md);
            // wasmtime checks its version, target, CPU features and settings.
            let image = unsafe { self.link(path, kind, Artefact::Bytes(bytes.into())) }.map_err(
                |e| match e {
                    LoadError::Compile { message, .. } => compile::mismatch(path, &message),
                    other => other,
                },
            )?;
            return Ok((image, Pull::Precompiled));
        }
        let kind = Kind::of(bytes).ok_or_else(|| LoadError::NotWasm {
            path: path.to_owned(),
        })?;
        let (artefact, pull) = match self.artefact(path, kind, bytes, life)? {
            (Compiled::Artefact(artefact), pull) => (artefact, pull),
            (Compiled::Linked(image), pull) => return Ok((image, pull)),
        };
        // SAFETY: the artefact was produced by `precompile_*` of an engine with the same
        // compatibility hash (it is part of the cache key) and passed its checksum.
        let image = unsafe { self.link(path, kind, artefact) }?;
        Ok((image, pull))
    }

    /// The compiled artefact of a module or component: from the cache, else compiled now; or,
    /// when this engine compiles in tiers, its baseline image, optimized in the background.
    #[cfg(feature = "compiler")]
    fn artefact(
        &self,
        path: &Path,
        kind: Kind,
        bytes: &[u8],
        life: Life,
    ) -> Result<(Compiled, Pull), LoadError> {
        let compile_err = |e: wasmtime::Error| LoadError::Compile {
            path: path.to_owned(),
            message: format!("{e:#}"),
        };
        let cached = self.cache.path_for(bytes);
        if let Some(file) = cached.as_ref().filter(|file| CompileCache::intact(file)) {
            return Ok((
                Compiled::Artefact(Artefact::File(file.clone())),
                Pull::Cached,
            ));
        }
        let start = std::time::Instant::now();
        if let Some(baseline) = self.baseline.as_ref().filter(|_| life == Life::Ends)
            && let Some((image, optimized)) = baseline.compile(path, kind, bytes)
        {
            let took = start.elapsed();
            self.optimizing.start(tier::Job {
                path: path.to_owned(),
                kind,
                bytes: bytes.to_vec(),
                cached,
                engine: self.wasmtime.clone(),
                linkers: self.linkers.clone(),
                twin: Twin::new(Some(self.pool.clone())),
                into: optimized,
            });
            return Ok((Compiled::Linked(image), Pull::Baseline(took)));
        }
        let artefact =
            optimize(&self.wasmtime, kind, bytes, cached.as_deref()).map_err(compile_err)?;
        Ok((
            Compiled::Artefact(Artefact::Bytes(artefact.into())),
            Pull::Compiled(start.elapsed()),
        ))
    }

    /// A build without a compiler runs only precompiled artefacts.
    #[cfg(not(feature = "compiler"))]
    fn artefact(
        &self,
        path: &Path,
        _: Kind,
        _: &[u8],
        _: Life,
    ) -> Result<(Compiled, Pull), LoadError> {
        Err(LoadError::Compile {
            path: path.to_owned(),
            message: format!(
                "this wasmpod has no compiler (built without the `compiler` feature) and runs \
                 only precompiled images: make one with `{}` where wasmpod has a compiler, and \
                 name the .cwasm as the image",
                compile::command_for_here(Some(path))
            ),
        })
    }

    /// Loads a module or component from its bytes (`name` is for messages), compiling it (a
    /// precompiled artefact is refused). Blocking.
    pub(crate) fn load_bytes(&self, name: &Path, bytes: &[u8]) -> Result<Image, LoadError> {
        let allowed = "from sources it trusts, not from a container image".to_owned();
        self.compile(name, bytes, || Err(allowed), Life::Ends)
            .map(|(image, _)| image)
    }

    /// Deserializes an artefact and links it.
    ///
    /// # Safety
    ///
    /// `artefact` must be a `precompile_*` output of an engine with this engine's configuration.
    unsafe fn link(
        &self,
        path: &Path,
        kind: Kind,
        artefact: Artefact<'_>,
    ) -> Result<Image, LoadError> {
        let twin = Twin::new(Some(self.pool.clone()));
        // SAFETY: as the caller promised.
        unsafe {
            link(
                &self.wasmtime,
                &self.linkers,
                path,
                kind,
                artefact,
                twin,
                None,
            )
        }
    }

    /// Waits until the optimizing compiles this engine started end, their artefacts in the
    /// compile cache. Blocking.
    pub(crate) fn wait_for_optimizing(&self) {
        self.optimizing.wait();
    }
}

/// What loading found or made of a module or component: an artefact to link, or an image
/// already linked (baseline code).
#[cfg_attr(
    not(feature = "compiler"),
    allow(dead_code, reason = "without a compiler nothing is compiled here")
)]
enum Compiled {
    Artefact(Artefact<'static>),
    Linked(Image),
}

/// Where the file `file` (opened as `path`) is, after symbolic links: the kernel's name for the
/// descriptor, else `path` resolved.
fn opened_path(file: &std::fs::File, path: &Path) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .ok()
        .filter(|p| p.is_absolute())
        .or_else(|| std::fs::canonicalize(path).ok())
}

/// Compiles `bytes` with `engine`'s Cranelift, gives the compiler's scratch memory back, and
/// stores the artefact in the compile cache at `cached`. Blocking.
#[cfg(feature = "compiler")]
fn optimize(
    engine: &wasmtime::Engine,
    kind: Kind,
    bytes: &[u8],
    cached: Option<&Path>,
) -> wasmtime::Result<Vec<u8>> {
    let artefact = kind.precompile(engine, bytes)?;
    release_compile_scratch();
    if let Some(file) = cached
        && let Err(e) = CompileCache::write(file, &artefact)
    {
        tracing::warn!(file = %file.display(), "cannot write the compile cache: {e}");
    }
    Ok(artefact)
}

/// Gives what a compile freed back to the system. Cranelift's scratch memory is spread over the
/// C allocator's per-thread arenas (the functions compile in parallel), which keep freed memory
/// for their threads' next allocations, while a node compiles a module once and then runs it for
/// days (3.5 MiB of an agent's 43 with 100 pods: docs/performance.md). A trim walks the arenas
/// once, far less than the compile it follows.
#[cfg(feature = "compiler")]
fn release_compile_scratch() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only returns the allocator's free memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use wasmtime::InstancePre;

    use super::Image;
    use crate::host::P1State;

    /// The engine an image's instances are made in.
    pub(crate) fn engine_of(image: &Image) -> &wasmtime::Engine {
        match image {
            Image::Module { pre, .. } => pre.module().engine(),
            Image::Component { instance, .. } => instance.engine(),
        }
    }

    /// Runs `_start` of an instance of `pre`, then its `spin` (a loop) with an epoch deadline of
    /// one tick: the engine's epoch must advance, and the guest stop with an interrupt.
    pub(crate) async fn start_then_interrupt_spin(pre: &InstancePre<P1State>) {
        let memory =
            crate::memory::PodMemory::new(Arc::new(crate::memory::NodeMemory::new(u64::MAX)));
        let charge = crate::memory::Charge::new(memory, crate::memory::Budget::new(64 << 20));
        let state = P1State {
            wasi: wasmtime_wasi::WasiCtxBuilder::new().build_p1(),
            term: crate::host::TermSignal::default(),
            limiter: crate::host::MemoryLimiter::new(charge),
        };
        let mut store = wasmtime::Store::new(pre.module().engine(), state);
        store.set_epoch_deadline(u64::MAX / 2);
        store.epoch_deadline_trap();
        let instance = pre.instantiate_async(&mut store).await.unwrap();
        let start_fn = instance
            .get_typed_func::<(), ()>(&mut store, "_start")
            .unwrap();
        start_fn.call_async(&mut store, ()).await.unwrap();
        let spin = instance
            .get_typed_func::<(), ()>(&mut store, "spin")
            .unwrap();
        store.set_epoch_deadline(1);
        // On a thread of its own, left behind should the guest never stop.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let _ = tx.send(runtime.block_on(spin.call_async(&mut store, ())));
        });
        let trap = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the engine's epoch never advanced")
            .unwrap_err();
        assert_eq!(
            trap.downcast_ref::<wasmtime::Trap>(),
            Some(&wasmtime::Trap::Interrupt)
        );
    }
}
