//! The host side of `wasmpod:pod/termination` (components) and `wasmpod::termination_requested`
//! (preview1 modules): how a guest that asked for it learns that TERM was delivered.

use tokio::sync::watch;
use wasmtime::component::{Linker as ComponentLinker, Resource};
use wasmtime::{Caller, Linker};
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use super::{P1State, P2State};

pub(crate) const TERM_MODULE: &str = "wasmpod";
pub(crate) const TERM_INTERFACE: &str = "wasmpod:pod/termination";

/// The guest's view of the TERM signal.
#[derive(Clone)]
pub(crate) struct TermSignal(pub(crate) watch::Receiver<bool>);

impl TermSignal {
    fn requested(&self) -> bool {
        *self.0.borrow()
    }
}

struct TermPollable(watch::Receiver<bool>);

#[wasmtime_wasi::async_trait]
impl Pollable for TermPollable {
    async fn ready(&mut self) {
        // An error means the supervisor is gone: the guest is about to be dropped anyway.
        let _ = self.0.wait_for(|term| *term).await;
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

pub(crate) fn add_p2_termination(linker: &mut ComponentLinker<P2State>) -> wasmtime::Result<()> {
    let mut instance = linker.instance(&format!("{TERM_INTERFACE}@0.1.0"))?;
    instance.func_wrap("requested", |store, (): ()| {
        Ok((store.data().term.requested(),))
    })?;
    instance.func_wrap("subscribe", |mut store, (): ()| {
        let state: &mut P2State = store.data_mut();
        let pollable = state.table.push(TermPollable(state.term.0.clone()))?;
        let dynamic: Resource<DynPollable> = subscribe(&mut state.table, pollable)?;
        Ok((dynamic,))
    })?;
    Ok(())
}
