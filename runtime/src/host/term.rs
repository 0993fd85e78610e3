//! The host side of `wasmpod:pod/termination` (components) and `wasmpod::termination_requested`
//! (preview1 modules): how a guest that asked for it learns that TERM was delivered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use wasmtime::Store;
use wasmtime::component::{
    HasData, Instance, InstancePre, Linker as ComponentLinker, Resource, ResourceTable,
};
use wasmtime::{Caller, Linker};
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use super::{P1State, P2State};
use crate::signal::Signal;

pub(crate) const TERM_MODULE: &str = "wasmpod";
pub(crate) const TERM_INTERFACE: &str = "wasmpod:pod/termination";

/// An instance's TERM signal: delivered by its supervisor once, seen by the guest (a poll, or
/// a pollable it waits on) and by the host serving it.
#[derive(Debug, Clone, Default)]
pub(crate) struct TermSignal(Arc<Signal>);

impl TermSignal {
    /// Delivers TERM.
    pub(crate) fn deliver(&self) {
        if !self.requested() {
            self.0.bump();
        }
    }

    /// Whether TERM was delivered.
    pub(crate) fn requested(&self) -> bool {
        self.0.version() > 0
    }

    /// Waits until TERM is delivered.
    pub(crate) async fn delivered(&self) {
        if !self.requested() {
            self.0.changed(0).await;
        }
    }
}

/// When the container is to be killed, read by its instances at every epoch tick: a guest that
/// computes stops itself at the first tick past the deadline, without waiting for the
/// supervisor's timer (which may queue behind busy guests on a loaded node).
#[derive(Clone, Default)]
pub(crate) struct KillClock(Arc<AtomicU64>);

/// The instant kill deadlines are counted from (nanoseconds, 0 = no deadline).
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

impl KillClock {
    pub(crate) fn set(&self, at: Instant) {
        let nanos = at.saturating_duration_since(base()).as_nanos().max(1);
        self.0
            .store(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub(crate) fn passed(&self) -> bool {
        match self.0.load(Ordering::Relaxed) {
            0 => false,
            at => base().elapsed().as_nanos() >= u128::from(at),
        }
    }
}

/// The error a killed guest stops with.
#[derive(Debug)]
pub(crate) struct Killed;

impl std::fmt::Display for Killed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("killed at the end of the grace period")
    }
}

impl std::error::Error for Killed {}

struct TermPollable(TermSignal);

#[wasmtime_wasi::async_trait]
impl Pollable for TermPollable {
    async fn ready(&mut self) {
        self.0.delivered().await;
    }
}

pub(crate) fn add_p1_termination(linker: &mut Linker<P1State>) -> wasmtime::Result<()> {
    linker.func_wrap(
        TERM_MODULE,
        "termination_requested",
        |caller: Caller<'_, P1State>| i32::from(caller.data().term.requested()),
    )?;
    Ok(())
}

/// The host side of the `wasmpod:pod` package, generated from `wit/`.
mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "wasmpod:pod/container",
        imports: { default: trappable },
        exports: { default: async },
        require_store_data_send: true,
        with: {
            "wasi:io": wasmtime_wasi::p2::bindings::io,
        },
    });
}

use bindings::exports::wasmpod::pod::{hooks, probes};
use bindings::wasmpod::pod::termination;

/// A function of the `wasmpod:pod` exports (`probes`, `hooks`) that a handler's name picks,
/// found in a component: called in a fresh instance by an exec probe or hook.
pub(crate) enum PodExport {
    Liveness(probes::GuestIndices),
    Readiness(probes::GuestIndices),
    Startup(probes::GuestIndices),
    PostStart(hooks::GuestIndices),
    PreStop(hooks::GuestIndices),
}

impl PodExport {
    /// The export `name` (`liveness`, `readiness`, `startup`, `post-start`, `pre-stop`) of the
    /// component, if it exports that interface.
    pub(crate) fn find<T>(pre: &InstancePre<T>, name: &str) -> Option<PodExport> {
        let probes = || probes::GuestIndices::new(pre).ok();
        let hooks = || hooks::GuestIndices::new(pre).ok();
        Some(match name {
            "liveness" => PodExport::Liveness(probes()?),
            "readiness" => PodExport::Readiness(probes()?),
            "startup" => PodExport::Startup(probes()?),
            "post-start" => PodExport::PostStart(hooks()?),
            "pre-stop" => PodExport::PreStop(hooks()?),
            _ => return None,
        })
    }

    /// Calls it in `instance`: `Err` is a trap, `Ok(Err)` the guest's own failure.
    pub(crate) async fn call(
        &self,
        store: &mut Store<P2State>,
        instance: &Instance,
    ) -> wasmtime::Result<Result<(), String>> {
        match self {
            PodExport::Liveness(i) => i.load(&mut *store, instance)?.call_liveness(store).await,
            PodExport::Readiness(i) => i.load(&mut *store, instance)?.call_readiness(store).await,
            PodExport::Startup(i) => i.load(&mut *store, instance)?.call_startup(store).await,
            PodExport::PostStart(i) => i.load(&mut *store, instance)?.call_post_start(store).await,
            PodExport::PreStop(i) => i.load(&mut *store, instance)?.call_pre_stop(store).await,
        }
    }
}

/// What the termination interface sees of a store: its TERM signal and its resource table.
struct Term<'a> {
    signal: &'a TermSignal,
    table: &'a mut ResourceTable,
}

struct HasTerm;

impl HasData for HasTerm {
    type Data<'a> = Term<'a>;
}

impl termination::Host for Term<'_> {
    fn requested(&mut self) -> wasmtime::Result<bool> {
        Ok(self.signal.requested())
    }

    fn subscribe(&mut self) -> wasmtime::Result<Resource<DynPollable>> {
        let pollable = self.table.push(TermPollable(self.signal.clone()))?;
        subscribe(self.table, pollable)
    }
}

pub(crate) fn add_p2_termination(linker: &mut ComponentLinker<P2State>) -> wasmtime::Result<()> {
    termination::add_to_linker::<P2State, HasTerm>(linker, |state| Term {
        signal: &state.term,
        table: &mut state.table,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn kill_clock_passes_at_its_deadline_and_not_before() {
        let clock = KillClock::default();
        assert!(!clock.passed(), "no deadline, never passed");
        clock.set(Instant::now() + Duration::from_secs(3600));
        assert!(!clock.passed());
        let shared = clock.clone();
        clock.set(Instant::now());
        assert!(shared.passed(), "a clone sees the shortened deadline");
    }
}
