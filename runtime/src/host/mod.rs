//! The host side of a guest's store: the state each store holds (its WASI context, sockets, TERM
//! signal, memory limiter) and the linkers that give guests their imports. The engine builds the
//! linkers once; a container fills a fresh state for each instance.

#[cfg(feature = "http")]
mod http;
mod random;
mod sockets;
mod term;

use std::sync::{Arc, OnceLock};

use wasmtime::component::{Linker as ComponentLinker, ResourceTable};
use wasmtime::{Linker, ResourceLimiter};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
#[cfg(feature = "http")]
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::memory::{Budget, Charge};
use crate::network::PodNetwork;
#[cfg(feature = "http")]
pub(crate) use http::Outgoing;
pub(crate) use random::ThreadRandom;
use sockets::{Sockets, SocketsView};
pub(crate) use term::{KillClock, Killed, PodExport, TERM_INTERFACE, TERM_MODULE, TermSignal};

/// The linkers of an engine: what preview1 modules and components may import. Each is built the
/// first time an image of its kind is linked (a component's linker, with WASI 0.2 and 0.3, the
/// pod network and `wasi:http`, was a sixth of the CPU of a `wasmpod run` of a preview1 module).
pub(crate) struct Linkers {
    engine: wasmtime::Engine,
    sockets: GuestSockets,
    p1: OnceLock<Linker<P1State>>,
    p2: OnceLock<ComponentLinker<P2State>>,
}

impl Linkers {
    /// Linkers for `engine`'s guests, with `wasi:sockets` as `sockets` says.
    pub(crate) fn new(engine: &wasmtime::Engine, sockets: GuestSockets) -> Linkers {
        Linkers {
            engine: engine.clone(),
            sockets,
            p1: OnceLock::new(),
            p2: OnceLock::new(),
        }
    }

    /// WASI preview1 and `wasmpod:pod/termination`.
    pub(crate) fn p1(&self) -> wasmtime::Result<&Linker<P1State>> {
        if let Some(linker) = self.p1.get() {
            return Ok(linker);
        }
        let mut p1 = Linker::new(&self.engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut p1, |s: &mut P1State| &mut s.wasi)?;
        term::add_p1_termination(&mut p1)?;
        Ok(self.p1.get_or_init(|| p1))
    }

    /// WASI preview2 (wasmtime-wasi's), with `wasi:sockets` as `sockets` says, WASI 0.3,
    /// `wasi:http` (wasmtime-wasi-http's) and `wasmpod:pod/termination`.
    pub(crate) fn p2(&self) -> wasmtime::Result<&ComponentLinker<P2State>> {
        if let Some(linker) = self.p2.get() {
            return Ok(linker);
        }
        let mut p2 = ComponentLinker::new(&self.engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut p2)?;
        wasmtime_wasi::p3::add_to_linker(&mut p2)?;
        if self.sockets == GuestSockets::Pod {
            sockets::p2::add_to_linker(&mut p2)?;
            sockets::p3::add_to_linker(&mut p2)?;
        }
        #[cfg(feature = "http")]
        {
            wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut p2)?;
            wasmtime_wasi_http::p3::add_to_linker(&mut p2)?;
        }
        term::add_p2_termination(&mut p2)?;
        Ok(self.p2.get_or_init(|| p2))
    }
}

/// What `wasi:sockets` is for an engine's components.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GuestSockets {
    /// The pod network (wasmpod's in-process namespaces): what a node's pods use.
    Pod,
    /// The host's sockets (wasmtime-wasi's), in whatever network namespace the process is:
    /// a task run by the containerd shim, whose namespace is the pod's.
    Host,
}

pub(crate) struct P1State {
    pub(crate) wasi: WasiP1Ctx,
    pub(crate) term: TermSignal,
    pub(crate) limiter: MemoryLimiter,
}

pub(crate) struct P2State {
    pub(crate) ctx: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) net: Arc<PodNetwork>,
    pub(crate) budget: Arc<Budget>,
    pub(crate) term: TermSignal,
    pub(crate) limiter: MemoryLimiter,
    #[cfg(feature = "http")]
    pub(crate) http: WasiHttpCtx,
    #[cfg(feature = "http")]
    pub(crate) outgoing: Outgoing,
}

#[cfg(feature = "http")]
impl WasiHttpView for P2State {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.outgoing,
        }
    }
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
            budget: &self.budget,
        }
    }
}

/// What the host holds for one table element (a pointer).
const TABLE_ELEMENT_BYTES: u64 = 8;

/// The most core instances, memories and tables one store may have: a component of a few
/// modules needs a handful of each; the defaults (10,000) would let a guest make thousands.
const MAX_INSTANCES: usize = 64;

const MAX_MEMORIES: usize = 16;

const MAX_TABLES: usize = 64;

/// Grows a store's linear memories and tables only within its container's budget, remembers
/// whether the budget was hit, and counts what they hold for the pod and node.
pub(crate) struct MemoryLimiter {
    pub(crate) hit: bool,
    charge: Charge,
}

impl MemoryLimiter {
    pub(crate) fn new(charge: Charge) -> MemoryLimiter {
        MemoryLimiter { hit: false, charge }
    }

    fn grow(&mut self, bytes: u64) -> bool {
        let ok = self.charge.grow(bytes);
        self.hit |= !ok;
        ok
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(self.grow(desired.saturating_sub(current) as u64))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let elements = desired.saturating_sub(current) as u64;
        Ok(self.grow(elements.saturating_mul(TABLE_ELEMENT_BYTES)))
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }
}
