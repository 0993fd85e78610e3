//! Which stores are executing wasm right now, so that the epoch ticker runs at full rate only
//! while some guest computes. A node of sleeping pods then costs next to no CPU.
//!
//! A store is inside wasm from `CallingWasm` or `ReturningFromHost` to `ReturningFromWasm` or
//! `CallingHost` (wasmtime's call hooks, which also fire around component host functions); a
//! guest paused at an epoch yield stays inside, since it is runnable. Each store counts once,
//! and a store dropped while inside (a killed guest) leaves on drop. Should the count ever be
//! wrong, the ticker still ticks every 50 ms, so no guest escapes preemption for longer.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::Thread;

use wasmtime::{CallHook, Store};

static RUNNING: AtomicUsize = AtomicUsize::new(0);
static TICKERS: Mutex<Vec<Thread>> = Mutex::new(Vec::new());

/// Is any store executing wasm?
pub(crate) fn running() -> bool {
    RUNNING.load(Ordering::Acquire) > 0
}

/// Registers an epoch ticker to wake when a guest starts executing.
pub(crate) fn add_ticker(thread: Thread) {
    TICKERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(thread);
}

/// Forgets a ticker whose engine is gone.
pub(crate) fn remove_ticker(thread: &Thread) {
    TICKERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|t| t.id() != thread.id());
}

fn enter() {
    if RUNNING.fetch_add(1, Ordering::AcqRel) == 0 {
        for t in TICKERS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            t.unpark();
        }
    }
}

fn leave() {
    RUNNING.fetch_sub(1, Ordering::AcqRel);
}

/// One store's part in the count.
struct Presence {
    inside: bool,
}

impl Presence {
    fn set(&mut self, inside: bool) {
        if inside != self.inside {
            self.inside = inside;
            if inside { enter() } else { leave() }
        }
    }
}

impl Drop for Presence {
    fn drop(&mut self) {
        self.set(false);
    }
}

/// Makes `store` count in [`running`] while it executes wasm, and tells `on_change` each time it
/// enters (`true`) or leaves (`false`) wasm. (A store has one call hook: this is it.)
pub(crate) fn track<T: 'static>(
    store: &mut Store<T>,
    mut on_change: impl FnMut(bool) + Send + Sync + 'static,
) {
    let mut presence = Presence { inside: false };
    store.call_hook(move |_, hook| {
        let inside = matches!(hook, CallHook::CallingWasm | CallHook::ReturningFromHost);
        if inside != presence.inside {
            on_change(inside);
        }
        presence.set(inside);
        Ok(())
    });
}
