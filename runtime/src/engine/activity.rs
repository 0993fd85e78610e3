//! Which stores are executing wasm right now, so that the epoch ticker runs at full rate only
//! while some guest computes (and for [`GRACE_TICKS`] after). A node of sleeping pods then costs
//! next to no CPU.
//!
//! A store is inside wasm from `CallingWasm` or `ReturningFromHost` to `ReturningFromWasm` or
//! `CallingHost` (wasmtime's call hooks, which also fire around component host functions); a
//! guest paused at an epoch yield stays inside, since it is runnable. Each store counts once,
//! and a store dropped while inside (a killed guest) leaves on drop. Should the count ever be
//! wrong, the ticker still ticks every 50 ms, so no guest escapes preemption for longer. Each
//! engine keeps its own count, so nodes in one process do not wake each other's tickers.
//!
//! Waking the ticker is a system call and a thread switch (and the ticker, running on another
//! core, makes each unmapping there, such as a store's linear memory at its end, interrupt that
//! core to flush its TLB), so a store wakes it only when it is parked, and the ticker parks only
//! after [`GRACE_TICKS`] ticks without a guest: a guest that calls the host many times (each
//! return from a host call enters wasm again), or a run of short pods, costs nothing more. A
//! woken ticker gives the guest that woke it a whole tick before it advances the epoch. A store on
//! a thread of its own (a probe's, a hook's, an exec's instance) is not counted and wakes nothing:
//! computing there holds up no other guest, and it is stopped or charged at the next tick, the idle
//! one at the latest. (Were it counted without waking, a guest on the workers entering after it
//! would find the count above zero and not wake the parked ticker either.)

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use wasmtime::{CallHook, Store};

/// How often the epoch advances: the longest a guest runs before yielding to the scheduler.
const EPOCH_TICK: Duration = Duration::from_millis(1);
/// The tick while no guest executes wasm: a safety net only, since a guest entering wasm wakes
/// the ticker at once.
const IDLE_TICK: Duration = Duration::from_millis(50);
/// Ticks the ticker keeps after the last guest left wasm before it parks: enough for a run of
/// short pods, few for a guest that computes now and then (each tick costs the process tens of
/// µs of CPU on a VM, where a timer's wake-up is an exit to the hypervisor).
const GRACE_TICKS: u32 = 2;

/// How many stores of one engine execute wasm, and the engine's ticker, woken when the first
/// starts.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    running: AtomicUsize,
    /// A store entered wasm since the ticker last looked (it may have left again already).
    entered: AtomicBool,
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

    /// Called by the ticker between two advances of the epoch: waits a tick while a store
    /// executes wasm or did within the last [`GRACE_TICKS`] (`quiet` counts the ticks without
    /// one), else parks until a store enters (and then waits a whole tick more) or
    /// [`IDLE_TICK`] passes.
    pub(crate) fn wait_for_tick(&self, quiet: &mut u32) {
        loop {
            let busy = self.running() || self.entered.swap(false, Ordering::Relaxed);
            *quiet = if busy { 0 } else { quiet.saturating_add(1) };
            if *quiet <= GRACE_TICKS {
                std::thread::sleep(EPOCH_TICK);
                return;
            }
            self.park(IDLE_TICK);
            if !self.running() && !self.entered.load(Ordering::Relaxed) {
                return;
            }
        }
    }

    /// Parks the ticker until a store enters wasm, or `timeout`.
    fn park(&self, timeout: Duration) {
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
        if self.running.fetch_add(1, Ordering::SeqCst) == 0 {
            self.entered.store(true, Ordering::Relaxed);
            if self.parked.swap(false, Ordering::SeqCst)
                && let Some(t) = self.ticker.get()
            {
                t.unpark();
            }
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

    /// After the last guest leaves, the ticker ticks [`GRACE_TICKS`] more without parking (a
    /// guest entering then wakes nothing), then parks until the idle tick; a guest entering
    /// while it is parked wakes it, and gets a whole tick before the epoch advances.
    #[test]
    fn the_ticker_parks_after_its_grace_ticks_and_a_guest_wakes_it() {
        let activity = Arc::new(Activity::default());
        activity.set_ticker(std::thread::current());
        let mut quiet = 0;
        let mut guest = Presence {
            activity: Some(activity.clone()),
            inside: false,
        };
        guest.set(true);
        guest.set(false);
        let t0 = std::time::Instant::now();
        for _ in 0..=GRACE_TICKS {
            activity.wait_for_tick(&mut quiet);
        }
        let grace = t0.elapsed();
        assert!(grace >= EPOCH_TICK * (GRACE_TICKS + 1), "{grace:?}");
        assert!(
            grace < IDLE_TICK,
            "parked during its grace ticks: {grace:?}"
        );
        assert!(!activity.parked.load(Ordering::SeqCst));

        // Nothing entered: the next wait parks until the idle tick.
        let t0 = std::time::Instant::now();
        activity.wait_for_tick(&mut quiet);
        assert!(t0.elapsed() >= IDLE_TICK, "{:?}", t0.elapsed());

        // A guest entering while the ticker is parked wakes it; the ticker then waits a tick.
        let entered = Arc::new(std::sync::Mutex::new(None));
        let waker = std::thread::spawn({
            let (activity, entered) = (activity.clone(), entered.clone());
            move || {
                while !activity.parked.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                let mut guest = Presence {
                    activity: Some(activity),
                    inside: false,
                };
                *entered.lock().unwrap() = Some(std::time::Instant::now());
                guest.set(true);
                guest
            }
        });
        let t0 = std::time::Instant::now();
        activity.wait_for_tick(&mut quiet);
        let woke = t0.elapsed();
        let guest = waker.join().unwrap();
        let entered = entered.lock().unwrap().unwrap();
        assert!(woke < IDLE_TICK, "not woken: {woke:?}");
        assert!(
            entered.elapsed() >= EPOCH_TICK,
            "the epoch advanced within the guest's tick"
        );
        assert_eq!(quiet, 0);
        drop(guest);
    }
}
