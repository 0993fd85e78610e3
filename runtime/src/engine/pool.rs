//! Short-lived instances from wasmtime's pooling allocator.
//!
//! A probe, a hook, a `kubectl exec` and each HTTP request run in a fresh instance that lives
//! for microseconds to seconds. With wasmtime's on-demand allocator each such instance maps its
//! linear memory and fiber stack and unmaps them when it ends, and every unmap of a
//! multi-threaded process costs a TLB shootdown on the other cores: that, not wasmpod's own
//! work, is most of a probe's CPU and of the gap to `wasmtime serve`. The pooling allocator keeps
//! those mappings and reuses them.
//!
//! Containers keep the on-demand allocator: a pool reserves its slots up front (4 GiB of address
//! space per memory, two mappings per fiber stack), which cannot be sized for the tens of
//! thousands of long-lived instances a node runs. So the node has a second engine, made the
//! first time a short-lived instance is wanted, whose pool holds [`SLOTS`] instances at once:
//!
//! - an image gets its twin in that engine (the same compiled code, deserialized again) the first
//!   time it runs a short-lived instance, in the background; until then, and for an image whose
//!   modules exceed the pool's per-instance limits, its instances are on demand as before;
//! - a container's main instance comes from the pool too once its image has a twin, while the
//!   pool has more than half its slots free: a pod that runs and ends, such as a Job's, then
//!   neither maps nor unmaps its memory (each unmapping of page tables interrupts the other
//!   cores). An image gets its twin when one of its main instances made on demand ends, so an
//!   image whose containers only ever serve, never ending, has none;
//! - an instance takes one of the pool's [`SLOTS`] permits, and the pool holds every permitted
//!   instance (each may use [`MEMORIES`] memories, [`TABLES`] tables and [`STACKS`] fiber stacks;
//!   an image that needs more has no twin), so the pool is never found exhausted; with every
//!   permit taken, an instance is made on demand;
//! - should the pool's engine not be made (the address space it reserves, ~1 TiB, not
//!   available), everything stays on demand.
//!
//! The pool's engine has the node's configuration otherwise (artefacts load in either), its
//! own linkers, and its epoch advanced by the node's ticker.
//!
//! A build without a compiler cannot serialize an image again for its twin: everything there is
//! on demand, as on a node with a compact address space.

#![cfg_attr(
    not(feature = "compiler"),
    allow(
        dead_code,
        unused_imports,
        reason = "without a compiler nothing makes the pool's engine"
    )
)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::{InstanceAllocationStrategy, PoolingAllocationConfig};

use super::{Artefact, Image, Kind, config, link};
use crate::host::{GuestSockets, Linkers};

/// Instances the pool holds at once.
pub(crate) const SLOTS: u32 = 128;
/// Of those, how many containers' main instances may hold: the rest stay for short-lived ones.
const LONG_LIVED_SLOTS: usize = SLOTS as usize / 2;
/// How long after an image's main instance ended on demand its twin is made.
const TWIN_AFTER_END: Duration = Duration::from_millis(50);
/// Linear memories an instance in the pool may have (a component's modules together).
const MEMORIES: u32 = 2;
/// Tables an instance in the pool may have (a component's modules together).
const TABLES: u32 = 16;
/// Fiber stacks an instance in the pool may use at once (a WASI 0.3 guest's concurrent tasks).
const STACKS: u32 = 4;

/// Bytes of a slot's linear memory, and of its tables, kept mapped between instances.
const KEEP_RESIDENT: usize = 1 << 20;

/// The pool's engine, made when first needed, and its permits.
pub(crate) struct Pool {
    sockets: GuestSockets,
    engine: OnceLock<Option<PoolEngine>>,
    slots: Arc<Semaphore>,
}

struct PoolEngine {
    wasmtime: wasmtime::Engine,
    linkers: Linkers,
}

impl Pool {
    /// A pool whose components reach the network through `sockets` (as the node's engine's do).
    pub(crate) fn new(sockets: GuestSockets) -> Pool {
        Pool {
            sockets,
            engine: OnceLock::new(),
            slots: Arc::new(Semaphore::new(SLOTS as usize)),
        }
    }

    /// The pool's engine, if it was made (for its epoch).
    pub(crate) fn made(&self) -> Option<&wasmtime::Engine> {
        self.engine.get()?.as_ref().map(|e| &e.wasmtime)
    }

    fn engine(&self) -> Option<&PoolEngine> {
        self.engine
            .get_or_init(|| {
                // A compact node reserves no slots up front.
                if !super::AddressSpace::of_process().pools() {
                    return None;
                }
                match PoolEngine::new(self.sockets) {
                    Ok(engine) => Some(engine),
                    Err(e) => {
                        tracing::warn!(
                            "no pooling allocator for probes, hooks and HTTP requests \
                         (they allocate on demand): {e:#}"
                        );
                        None
                    }
                }
            })
            .as_ref()
    }

    /// `image` in the pool's engine, or `None` when it cannot be there (or this build, having
    /// no compiler, cannot serialize it again). Blocking.
    #[cfg(not(feature = "compiler"))]
    fn twin_of(&self, _: &Image) -> Option<Image> {
        None
    }

    /// `image` in the pool's engine, or `None` when it cannot be there. Blocking.
    #[cfg(feature = "compiler")]
    fn twin_of(&self, image: &Image) -> Option<Image> {
        let engine = self.engine()?;
        let (kind, artefact) = match image {
            Image::Module { pre, .. } => (Kind::Module, pre.module().serialize()),
            Image::Component { instance, .. } => {
                (Kind::Component, instance.component().serialize())
            }
        };
        let twin = artefact.and_then(|artefact| {
            // SAFETY: the artefact was just serialized from a module of the node's engine, whose
            // configuration the pool's engine shares but for the allocator.
            unsafe {
                link(
                    &engine.wasmtime,
                    &engine.linkers,
                    Path::new("(pooled)"),
                    kind,
                    Artefact::Bytes(artefact.into()),
                    Twin::new(None),
                    None,
                )
            }
            .map_err(|e| wasmtime::format_err!("{e}"))
        });
        twin.inspect_err(|e| tracing::debug!("an image stays on demand: {e:#}"))
            .ok()
    }
}

impl PoolEngine {
    fn new(sockets: GuestSockets) -> wasmtime::Result<PoolEngine> {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(SLOTS)
            // Core instances are only counted, not reserved.
            .total_core_instances(SLOTS * 64)
            .max_memories_per_component(MEMORIES)
            .total_memories(SLOTS * MEMORIES)
            .max_tables_per_component(TABLES)
            .total_tables(SLOTS * TABLES)
            .total_stacks(SLOTS * STACKS)
            .total_gc_heaps(SLOTS)
            // A slot's memory and tables are reset with a copy of what the instance changed
            // (found with PAGEMAP_SCAN where the kernel has it) instead of `madvise`: the next
            // instance takes no page faults and the process no TLB shootdown for them.
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(KEEP_RESIDENT)
            .pagemap_scan(wasmtime::Enabled::Auto);
        let mut config = config();
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let wasmtime = wasmtime::Engine::new(&config)?;
        let linkers = Linkers::new(&wasmtime, sockets);
        Ok(PoolEngine { wasmtime, linkers })
    }
}

/// An image's twin in the pool's engine, made the first time the image runs a short-lived
/// instance.
pub(crate) struct Twin {
    /// `None` for a twin itself.
    pool: Option<Arc<Pool>>,
    making: AtomicBool,
    image: OnceLock<Option<Arc<Image>>>,
}

impl Twin {
    /// The slot for an image's twin in `pool`; `None` for a twin itself.
    pub(crate) fn new(pool: Option<Arc<Pool>>) -> Twin {
        Twin {
            pool,
            making: AtomicBool::new(false),
            image: OnceLock::new(),
        }
    }
}

/// The image an instance is made from, and its place in the pool (held until the instance's
/// store is gone: drop this after the store).
pub(crate) struct Lease {
    pub(crate) image: Arc<Image>,
    slot: Option<OwnedSemaphorePermit>,
}

impl Lease {
    /// Is the instance from the pool?
    pub(crate) fn pooled(&self) -> bool {
        self.slot.is_some()
    }
}

impl Image {
    /// What a short-lived instance of this image is made from: its twin in the pool when it has
    /// one and the pool has room, else this image (on demand; the twin is made meanwhile); of
    /// its optimized image once a baseline image has one.
    pub(crate) fn short_lived(self: &Arc<Image>) -> Lease {
        let image = self.current();
        image.make_twin(Duration::ZERO);
        image.lease(0)
    }

    /// What a container's main instance is made from: its twin when it has one and the pool
    /// has more than half its slots free, else this image (on demand).
    pub(crate) fn long_lived(self: &Arc<Image>) -> Lease {
        self.current().lease(SLOTS as usize - LONG_LIVED_SLOTS)
    }

    /// Tells that a main instance of this image, made on demand, ended: its later ones will
    /// come from the pool, once the twin is made [`TWIN_AFTER_END`] from now (a process that
    /// ends with its pod, `wasmpod run`, makes none).
    pub(crate) fn ended(self: &Arc<Image>) {
        self.current().make_twin(TWIN_AFTER_END);
    }

    /// The twin and a slot, when the twin is made and the pool has more than `reserved` slots
    /// free; else this image.
    fn lease(self: &Arc<Image>, reserved: usize) -> Lease {
        let twin = self.twin();
        if let (Some(pool), Some(Some(image))) = (&twin.pool, twin.image.get())
            && pool.slots.available_permits() > reserved
            && let Ok(slot) = pool.slots.clone().try_acquire_owned()
        {
            return Lease {
                image: image.clone(),
                slot: Some(slot),
            };
        }
        Lease {
            image: self.clone(),
            slot: None,
        }
    }

    /// Makes this image's twin, once, `after` from now, off the async runtime's threads (it
    /// compiles nothing, but deserializes and links, which takes milliseconds). A runtime shut
    /// down before that drops it; one shut down while it is made waits for it.
    fn make_twin(self: &Arc<Image>, after: Duration) {
        let twin = self.twin();
        if let Some(pool) = &twin.pool
            && twin.image.get().is_none()
            && !twin.making.swap(true, Ordering::AcqRel)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let (image, pool) = (self.clone(), pool.clone());
            let make = move || {
                let made = pool.twin_of(&image).map(Arc::new);
                let _ = image.twin().image.set(made);
            };
            if after.is_zero() {
                runtime.spawn_blocking(make);
            } else {
                runtime.spawn(async move {
                    tokio::time::sleep(after).await;
                    let _ = tokio::task::spawn_blocking(make).await;
                });
            }
        }
    }

    fn twin(&self) -> &Twin {
        match self {
            Image::Module { twin, .. } | Image::Component { twin, .. } => twin,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::engine::Engine;
    use crate::engine::tests::engine_of;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn short_lived_instances_come_from_the_pool_while_it_has_room() {
        let engine = Engine::new(None, GuestSockets::Pod, Default::default(), false).unwrap();
        let wasm = wat::parse_str(
            r#"(module (memory (export "memory") 1)
                 (func (export "_start") (i32.store (i32.const 0) (i32.const 7)))
                 (func (export "spin") (loop (br 0))))"#,
        )
        .unwrap();
        let image = Arc::new(engine.load_bytes(Path::new("t.wasm"), &wasm).unwrap());
        let pooled =
            |lease: &Lease| !wasmtime::Engine::same(engine_of(&lease.image), &engine.wasmtime);

        // The first is on demand; the twin is made meanwhile.
        assert!(!pooled(&image.short_lived()));
        let start = Instant::now();
        let lease = loop {
            let lease = image.short_lived();
            if pooled(&lease) {
                break lease;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "no twin made");
            tokio::time::sleep(Duration::from_millis(1)).await;
        };

        // The twin runs in a store of the pool's engine, whose epoch the node's ticker advances:
        // a guest spinning past its deadline is stopped there too.
        let Image::Module { pre, .. } = &*lease.image else {
            unreachable!()
        };
        crate::engine::tests::start_then_interrupt_spin(pre).await;
        drop(lease);

        // Every slot taken: the next instance is on demand; one given back, pooled again.
        let mut leases: Vec<Lease> = (0..SLOTS).map(|_| image.short_lived()).collect();
        assert!(leases.iter().all(pooled));
        assert!(!pooled(&image.short_lived()));
        leases.pop();
        assert!(pooled(&image.short_lived()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn main_instances_come_from_the_pool_once_their_image_ended_one() {
        let engine = Engine::new(None, GuestSockets::Pod, Default::default(), false).unwrap();
        let wasm = wat::parse_str(r#"(module (memory 1) (func (export "_start")))"#).unwrap();
        let image = Arc::new(engine.load_bytes(Path::new("t.wasm"), &wasm).unwrap());

        // Until one of its main instances ended, an image has no twin.
        assert!(!image.long_lived().pooled());
        tokio::time::sleep(TWIN_AFTER_END * 2).await;
        assert!(image.twin().image.get().is_none());

        // Its twin is made a moment after one ended.
        image.ended();
        let ended = Instant::now();
        let first = loop {
            let lease = image.long_lived();
            if lease.pooled() {
                break lease;
            }
            assert!(ended.elapsed() < Duration::from_secs(10), "no twin made");
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        assert!(ended.elapsed() >= TWIN_AFTER_END);

        // Main instances hold at most half the slots; short-lived ones have the rest.
        let mut held = vec![first];
        held.extend((1..LONG_LIVED_SLOTS).map(|_| image.long_lived()));
        assert!(held.iter().all(Lease::pooled));
        assert!(!image.long_lived().pooled());
        assert!(image.short_lived().pooled());
        held.pop();
        assert!(image.long_lived().pooled());
    }
}
