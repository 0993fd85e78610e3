//! Which stores are executing wasm right now, so that the epoch ticker runs at full rate only
//! while some guest computes. A node of sleeping pods then costs next to no CPU.
//!
//! A store is inside wasm from `CallingWasm` or `ReturningFromHost` to `ReturningFromWasm` or
//! `CallingHost` (wasmtime's call hooks, which also fire around component host functions); a
//! guest paused at an epoch yield stays inside, since it is runnable. Each store counts once,
//! and a store dropped while inside (a killed guest) leaves on drop. Should the count ever be
//! wrong, the ticker still ticks every 50 ms, so no guest escapes preemption for longer. Each
//! engine keeps its own count, so nodes in one process do not wake each other's tickers.
//!
//! Waking the ticker is a system call and a thread switch, so a store wakes it only when it is
//! parked: a guest that calls the host many times (each return from a host call enters wasm
//! again) while the ticker counts down its tick costs nothing more. A store on a thread of its
//! own (a probe's, a hook's, an exec's instance) is not counted and wakes nothing: computing
//! there holds up no other guest, and it is stopped or charged at the next tick, the idle one at
//! the latest. (Were it counted without waking, a guest on the workers entering after it would
//! find the count above zero and not wake the parked ticker either.)

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;

use wasmtime::{CallHook, Store};

/// How many stores of one engine execute wasm, and the engine's ticker, woken when the first
/// starts.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    running: AtomicUsize,
    /// The ticker is parked, or about to be: the first store to enter wakes it.
    parked: AtomicBool,
    ticker: OnceLock<Thread>,
}

impl Activity {
    /// Is any store executing wasm?
    pub(crate) fn running(&self) -> bool {
        self.running.load(Ordering::Acquire) > 0
    }

    /// The ticker to wake when a guest starts executing.
    pub(crate) fn set_ticker(&self, thread: Thread) {
        let _ = self.ticker.set(thread);
    }

    /// Called by the ticker when it has nothing to do: parks it until a store enters wasm, or
    /// `timeout`.
    pub(crate) fn park(&self, timeout: std::time::Duration) {
        // Announce the park, then look once more: a store that entered before the announcement
        // is seen here, one that enters after it sees the announcement and wakes us (both
        // sides store, then load, sequentially consistent).
        self.parked.store(true, Ordering::SeqCst);
        if self.running.load(Ordering::SeqCst) == 0 {
            std::thread::park_timeout(timeout);
        }
        self.parked.store(false, Ordering::SeqCst);
    }

    fn enter(&self) {
        if self.running.fetch_add(1, Ordering::SeqCst) == 0
            && self.parked.swap(false, Ordering::SeqCst)
            && let Some(t) = self.ticker.get()
        {
            t.unpark();
        }
    }

    fn leave(&self) {
        self.running.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One store's part in the count.
struct Presence {
    /// `None` for a store that is not counted.
    activity: Option<Arc<Activity>>,
    inside: bool,
}

impl Presence {
    fn set(&mut self, inside: bool) {
        if inside != self.inside {
            self.inside = inside;
            match &self.activity {
                Some(activity) if inside => activity.enter(),
                Some(activity) => activity.leave(),
                None => {}
            }
        }
    }
}

impl Drop for Presence {
    fn drop(&mut self) {
        self.set(false);
    }
}

/// Makes `store` count in `activity` while it executes wasm, and tells `on_change` each time it
/// enters (`true`) or leaves (`false`) wasm. (A store has one call hook: this is it.) With
/// `activity` `None` the store is not counted: the ticker reaches it at its idle tick (for
/// stores on threads of their own, which hold up no other guest meanwhile).
pub(crate) fn track<T: 'static>(
    store: &mut Store<T>,
    activity: Option<Arc<Activity>>,
    mut on_change: impl FnMut(bool) + Send + Sync + 'static,
) {
    let mut presence = Presence {
        activity,
        inside: false,
    };
    store.call_hook(move |_, hook| {
        let inside = matches!(hook, CallHook::CallingWasm | CallHook::ReturningFromHost);
        if inside != presence.inside {
            on_change(inside);
        }
        presence.set(inside);
        Ok(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store on a thread of its own neither counts nor wakes the ticker, and so does not keep
    /// a guest on the workers that enters after it from waking the parked ticker.
    #[test]
    fn an_uncounted_store_leaves_the_ticker_to_the_counted_ones() {
        let activity = Arc::new(Activity::default());
        activity.set_ticker(std::thread::current());
        activity.parked.store(true, Ordering::SeqCst);
        let mut own = Presence {
            activity: None,
            inside: false,
        };
        own.set(true);
        assert!(!activity.running());
        assert!(activity.parked.load(Ordering::SeqCst), "woken for nothing");
        let mut worker = Presence {
            activity: Some(activity.clone()),
            inside: false,
        };
        worker.set(true);
        assert!(activity.running());
        assert!(
            !activity.parked.load(Ordering::SeqCst),
            "the ticker slept on"
        );
        drop(worker);
        assert!(!activity.running());
    }
}
