//! Tiered compilation: a module or component this node compiles for the first time runs at
//! once on baseline code, and its later instances on optimized code compiled meanwhile.
//!
//! Cranelift, wasmtime's optimizing compiler, takes about 115 ms for a 190 KB module on two
//! cores; Winch, its baseline compiler, a quarter to a third of that, for code that does
//! ordinary work two to three times slower (docs/performance.md). On a compile-cache miss the
//! node compiles with Winch in a third engine of its own ([`Baseline`], made when first
//! needed), returns that image, and queues the same bytes for Cranelift, compiled one module at
//! a time on a thread of their own ([`Optimizing`]). When that is done the
//! artefact goes to the compile cache and the baseline image points to the optimized one
//! ([`Image::current`]): every instance made after that (a new pod, a restart, a probe, an
//! `exec`, an HTTP request) runs Cranelift's code, and the engine's table of loaded images
//! holds the optimized image in its place. An instance keeps the code it started with
//! (wasmtime cannot replace the code of a running instance), and the baseline code (half as
//! large again as Cranelift's) is freed when the last instance running it ends. So what would
//! keep it for long does not take it: a module loaded for a container that lives as long as its
//! pod (a sidecar, a regular container under `restartPolicy: Always`) is compiled by Cranelift
//! first ([`Life`]), and such a container whose module another one loaded as baseline code waits
//! for the optimized code ([`Image::for_long_life`]), unless it is an HTTP handler, whose
//! instances are each request's (its later requests run the optimized code). Containers that
//! end (a Job's, init containers) and short-lived instances start at once.
//!
//! Winch generates code for x86-64 only, and not for every proposal (tail calls, exceptions,
//! GC): elsewhere, and for a module it refuses, the node compiles with Cranelift before it runs,
//! as without tiers. Artefacts from `wasmpod compile` and from the cache are Cranelift's.

#![cfg_attr(
    not(feature = "compiler"),
    allow(
        dead_code,
        unused_imports,
        reason = "without a compiler nothing is compiled here"
    )
)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Instant;

use super::link::{Artefact, Kind, link};
use super::{Image, Twin};
use crate::host::{GuestSockets, Linkers};

/// How long the instance a load is for will live, which decides whether it may start on
/// baseline code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Life {
    /// It ends (a Job's container, an init container): baseline code at once.
    Ends,
    /// As long as its pod (a sidecar, a container under `restartPolicy: Always`): it waits for
    /// Cranelift, compiled first.
    AsLongAsItsPod,
}

impl Life {
    /// The life of a container that does or does not live as long as its pod.
    pub(crate) fn of(as_long_as_its_pod: bool) -> Life {
        match as_long_as_its_pod {
            true => Life::AsLongAsItsPod,
            false => Life::Ends,
        }
    }
}

/// The engine of baseline code, made the first time a module is compiled with it.
pub(crate) struct Baseline {
    sockets: GuestSockets,
    engine: OnceLock<Option<BaselineEngine>>,
}

struct BaselineEngine {
    wasmtime: wasmtime::Engine,
    linkers: Linkers,
}

impl Baseline {
    /// A baseline engine whose components reach the network through `sockets`.
    pub(crate) fn new(sockets: GuestSockets) -> Baseline {
        Baseline {
            sockets,
            engine: OnceLock::new(),
        }
    }

    /// The engine, if it was made (for its epoch).
    pub(crate) fn made(&self) -> Option<&wasmtime::Engine> {
        self.engine.get()?.as_ref().map(|e| &e.wasmtime)
    }

    #[cfg(feature = "compiler")]
    fn engine(&self) -> Option<&BaselineEngine> {
        self.engine
            .get_or_init(|| {
                if !cfg!(target_arch = "x86_64") {
                    return None;
                }
                let mut config = super::config();
                config.strategy(wasmtime::Strategy::Winch);
                match wasmtime::Engine::new(&config) {
                    Ok(wasmtime) => Some(BaselineEngine {
                        linkers: Linkers::new(&wasmtime, self.sockets),
                        wasmtime,
                    }),
                    Err(e) => {
                        tracing::warn!("no baseline compiler (modules wait for Cranelift): {e:#}");
                        None
                    }
                }
            })
            .as_ref()
    }

    /// `bytes` compiled with Winch and linked, with the slot its optimized image will fill;
    /// `None` when Winch cannot compile them (the caller compiles with Cranelift). Blocking.
    #[cfg(feature = "compiler")]
    pub(super) fn compile(
        &self,
        path: &Path,
        kind: Kind,
        bytes: &[u8],
    ) -> Option<(Image, Arc<Optimized>)> {
        let engine = self.engine()?;
        let artefact = kind
            .precompile(&engine.wasmtime, bytes)
            .inspect_err(|e| tracing::debug!(path = %path.display(), "not on Winch: {e:#}"))
            .ok()?;
        let optimized = Arc::new(Optimized::default());
        // SAFETY: the artefact was just made by this engine.
        let image = unsafe {
            link(
                &engine.wasmtime,
                &engine.linkers,
                path,
                kind,
                Artefact::Bytes(artefact.into()),
                Twin::new(None),
                Some(optimized.clone()),
            )
        }
        .inspect_err(|e| tracing::debug!("not on Winch: {e}"))
        .ok()?;
        Some((image, optimized))
    }
}

/// Where a baseline image finds its optimized twin once it is compiled.
pub(crate) struct Optimized {
    image: OnceLock<Arc<Image>>,
    /// `true` once the optimizing compile ended, with an image or not.
    ended: tokio::sync::watch::Sender<bool>,
}

impl Default for Optimized {
    fn default() -> Self {
        Optimized {
            image: OnceLock::new(),
            ended: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl Optimized {
    /// The optimizing compile ended, with `image` when it succeeded.
    fn finish(&self, image: Option<Image>) {
        if let Some(image) = image {
            let _ = self.image.set(Arc::new(image));
        }
        self.ended.send_replace(true);
    }
}

impl Image {
    /// The image new instances are made from: the optimized one once a baseline image has it,
    /// else this one.
    pub(crate) fn current(self: &Arc<Image>) -> &Arc<Image> {
        match self.optimized().and_then(|o| o.image.get()) {
            Some(optimized) => optimized,
            None => self,
        }
    }

    /// What an instance that lives as long as its pod is made from: the optimized image, waited
    /// for while a baseline image's optimizing compile is under way (the instance would keep
    /// the baseline code for its whole life); this image when it is not a baseline one, or its
    /// optimizing compile failed.
    pub(crate) async fn for_long_life(self: &Arc<Image>) -> Arc<Image> {
        if let Some(optimized) = self.optimized() {
            let mut ended = optimized.ended.subscribe();
            let _ = ended.wait_for(|ended| *ended).await;
        }
        self.current().clone()
    }
}

/// The optimizing compiles waiting and running: one at a time, on a thread that runs while
/// there are any (Cranelift compiles a module's functions in parallel itself): a flood of new
/// modules costs the node one compile's threads and memory at a time, however many there are.
#[derive(Default)]
pub(crate) struct Optimizing {
    state: Mutex<Queue>,
    idle: Condvar,
}

#[derive(Default)]
struct Queue {
    #[cfg(feature = "compiler")]
    jobs: std::collections::VecDeque<Job>,
    /// A thread is compiling, or about to.
    working: bool,
}

/// What an optimizing compile needs of the node's engine.
#[cfg(feature = "compiler")]
pub(super) struct Job {
    pub(super) path: PathBuf,
    pub(super) kind: Kind,
    pub(super) bytes: Vec<u8>,
    pub(super) cached: Option<PathBuf>,
    pub(super) engine: wasmtime::Engine,
    pub(super) linkers: Arc<Linkers>,
    pub(super) twin: Twin,
    pub(super) into: Arc<Optimized>,
}

impl Optimizing {
    /// Queues `job`: compiled with Cranelift, stored in the cache and made the image of later
    /// instances. A compile that fails leaves the baseline image in place.
    #[cfg(feature = "compiler")]
    pub(super) fn start(self: &Arc<Self>, job: Job) {
        let mut state = self.state.lock().unwrap();
        state.jobs.push_back(job);
        if state.working {
            return;
        }
        state.working = true;
        drop(state);
        let this = self.clone();
        let spawned = std::thread::Builder::new()
            .name("wasmpod-optimize".into())
            .spawn(move || this.work());
        if let Err(e) = spawned {
            tracing::warn!("cannot start optimizing compiles (modules keep baseline code): {e}");
            let mut state = self.state.lock().unwrap();
            for job in state.jobs.drain(..) {
                job.into.finish(None);
            }
            state.working = false;
            self.idle.notify_all();
        }
    }

    /// Runs the queued compiles until there are none.
    #[cfg(feature = "compiler")]
    fn work(&self) {
        loop {
            let job = {
                let mut state = self.state.lock().unwrap();
                match state.jobs.pop_front() {
                    Some(job) => job,
                    None => {
                        state.working = false;
                        self.idle.notify_all();
                        return;
                    }
                }
            };
            // A compiler's panic (a bug, met by some module) costs that module its optimized
            // code, not the queue its worker.
            let (path, into) = (job.path.clone(), job.into.clone());
            let image = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run()))
                .unwrap_or_else(|_| {
                    tracing::error!(path = %path.display(), "the optimizing compile panicked");
                    None
                });
            into.finish(image);
        }
    }

    /// Waits until no optimizing compile waits or runs. Blocking.
    pub(crate) fn wait(&self) {
        let state = self.state.lock().unwrap();
        drop(self.idle.wait_while(state, |s| s.working).unwrap());
    }
}

#[cfg(feature = "compiler")]
impl Job {
    /// Compiles, stores the artefact in the cache and links it: the optimized image, if all
    /// went well.
    fn run(self) -> Option<Image> {
        let start = Instant::now();
        let optimized =
            super::optimize(&self.engine, self.kind, &self.bytes, self.cached.as_deref());
        let artefact = match optimized {
            Ok(artefact) => artefact,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), "optimizing compile failed: {e:#}");
                return None;
            }
        };
        // SAFETY: the artefact was just made by this engine.
        let image = unsafe {
            link(
                &self.engine,
                &self.linkers,
                &self.path,
                self.kind,
                Artefact::Bytes(artefact.into()),
                self.twin,
                None,
            )
        };
        match image {
            Ok(image) => {
                tracing::debug!(path = %self.path.display(), took = ?start.elapsed(), "optimized");
                Some(image)
            }
            Err(e) => {
                tracing::warn!("the optimized image does not link: {e}");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tests::engine_of;
    use crate::engine::{Engine, Origin, Pull};

    fn tiered(cache: &Path) -> Engine {
        Engine::new(
            Some(cache.to_owned()),
            GuestSockets::Pod,
            Default::default(),
            true,
        )
        .unwrap()
    }

    /// A module new to the node runs on Winch's code at once, and can still be stopped at an
    /// epoch deadline; once Cranelift is done its instances are the optimized image's, and the
    /// optimized code is what the compile cache holds for the next node.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_new_module_starts_on_baseline_code_and_later_instances_are_optimized() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("spin.wasm");
        let wasm = wat::parse_str(
            r#"(module (memory (export "memory") 1)
                 (func (export "_start") (i32.store (i32.const 0) (i32.const 7)))
                 (func (export "spin") (loop (br 0))))"#,
        )
        .unwrap();
        std::fs::write(&file, wasm).unwrap();
        let cache = dir.path().join("cache");
        let engine = tiered(&cache);

        let (image, pull) = engine.load(&file, Origin::Local, Life::Ends).unwrap();
        assert!(matches!(pull, Pull::Baseline(_)), "{pull:?}");
        // (Its instances may already be optimized: Cranelift takes microseconds for this one.)
        let baseline = engine.baseline.as_ref().unwrap().made().unwrap();
        assert!(wasmtime::Engine::same(engine_of(&image), baseline));
        let Image::Module { pre, .. } = &*image else {
            unreachable!()
        };
        crate::engine::tests::start_then_interrupt_spin(pre).await;
        // What lives as long as its pod waits for the optimized code.
        let long = image.for_long_life().await;
        assert!(wasmtime::Engine::same(engine_of(&long), &engine.wasmtime));

        engine.wait_for_optimizing();
        let later = image.long_lived();
        assert!(wasmtime::Engine::same(
            engine_of(&later.image),
            &engine.wasmtime
        ));
        assert!(wasmtime::Engine::same(
            engine_of(&image.short_lived().image),
            &engine.wasmtime
        ));
        let Image::Module { pre, .. } = &*later.image else {
            unreachable!()
        };
        crate::engine::tests::start_then_interrupt_spin(pre).await;
        // The same image again in this process; from the cache in the next.
        let (again, pull) = engine.load(&file, Origin::Local, Life::Ends).unwrap();
        assert!(matches!(pull, Pull::Present) && Arc::ptr_eq(&again, image.current()));
        // The baseline image is held only by what holds it, no longer by the engine.
        let baseline = Arc::downgrade(&image);
        drop(image);
        assert!(baseline.upgrade().is_none());
        let (_, pull) = tiered(&cache)
            .load(&file, Origin::Local, Life::Ends)
            .unwrap();
        assert!(matches!(pull, Pull::Cached), "{pull:?}");
    }

    /// A module Winch does not compile (tail calls) waits for Cranelift, as without tiers, and
    /// so does one loaded for an instance that lives as long as its pod; a node without tiers
    /// never uses Winch.
    #[test]
    fn what_winch_refuses_is_compiled_by_cranelift() {
        let dir = tempfile::tempdir().unwrap();
        let tail_call = wat::parse_str(
            r#"(module (func $f (return_call $g)) (func $g) (func (export "_start") (call $f)))"#,
        )
        .unwrap();
        let plain = wat::parse_str(r#"(module (func (export "_start")))"#).unwrap();
        for (name, wasm) in [("tail.wasm", &tail_call), ("plain.wasm", &plain)] {
            std::fs::write(dir.path().join(name), wasm).unwrap();
        }
        let engine = tiered(&dir.path().join("cache"));
        let (_, pull) = engine
            .load(&dir.path().join("tail.wasm"), Origin::Local, Life::Ends)
            .unwrap();
        assert!(matches!(pull, Pull::Compiled(_)), "{pull:?}");
        let (image, pull) = engine
            .load(
                &dir.path().join("plain.wasm"),
                Origin::Local,
                Life::AsLongAsItsPod,
            )
            .unwrap();
        assert!(matches!(pull, Pull::Compiled(_)), "{pull:?}");
        assert!(wasmtime::Engine::same(engine_of(&image), &engine.wasmtime));

        let untiered = Engine::new(None, GuestSockets::Pod, Default::default(), false).unwrap();
        let (image, pull) = untiered
            .load(&dir.path().join("plain.wasm"), Origin::Local, Life::Ends)
            .unwrap();
        assert!(matches!(pull, Pull::Compiled(_)), "{pull:?}");
        assert!(wasmtime::Engine::same(
            engine_of(&image),
            &untiered.wasmtime
        ));
    }
}
