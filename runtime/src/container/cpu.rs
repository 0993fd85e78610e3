//! A guest's time: what an instance's store does at each epoch tick (yield to the runtime, stop
//! at the kill deadline, pay its container's CPU limit) and the limit itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{ResourceLimiter, Store, UpdateDeadline};

use super::Thread;
use crate::engine::Activity;
use crate::host::{KillClock, Killed, MemoryLimiter};

/// Makes `store` ready to run a guest: its memory counted by the limiter `limiter` finds in it,
/// its wasm time by `cpu` and the node's `activity`, its end by `kill`.
pub(super) fn prepare<T: 'static>(
    store: &mut Store<T>,
    limiter: fn(&mut T) -> &mut MemoryLimiter,
    cpu: Option<Arc<CpuLimit>>,
    kill: KillClock,
    activity: Arc<Activity>,
    thread: Thread,
) {
    store.limiter(move |s| limiter(s) as &mut dyn ResourceLimiter);
    // At every epoch tick the guest yields through tokio's `yield_now`, which lets the runtime
    // poll its timers and I/O before the guest runs again: a busy guest cannot delay a kill
    // deadline, a probe or a neighbour's wake-up by more than one tick.
    //
    // A guest with a CPU limit charges the wasm time it ran to its container's `CpuLimit` at
    // each tick, and pauses while the container owes more than THROTTLE_PAUSE. Only time inside
    // wasm counts (the call hooks say when the guest enters and leaves it): time blocked in host
    // calls, sleeping or waiting for I/O, is not CPU.
    let clock = Arc::new(std::sync::Mutex::new(WasmClock::default()));
    let hook = cpu.as_ref().map(|_| clock.clone());
    let counted = (thread != Thread::Own).then_some(activity);
    crate::engine::activity::track(store, counted, move |inside| {
        if let Some(clock) = &hook {
            let mut c = clock.lock().unwrap_or_else(|e| e.into_inner());
            if inside {
                c.entered = Some(Instant::now());
            } else if let Some(at) = c.entered.take() {
                c.ran += at.elapsed().as_secs_f64();
            }
        }
    });
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if kill.passed() {
            return Err(Killed.into());
        }
        // An unlimited guest only yields; a limited one pays its container's debt once it is
        // large enough.
        let Some(cpu) = &cpu else {
            return Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(tokio::task::yield_now()),
            ));
        };
        let now = Instant::now();
        let spent = {
            let mut c = clock.lock().unwrap_or_else(|e| e.into_inner());
            let mut spent = std::mem::take(&mut c.ran);
            if let Some(at) = c.entered.replace(now) {
                spent += now.saturating_duration_since(at).as_secs_f64();
            }
            spent
        };
        let Some(pause) = cpu.charge(spent, now) else {
            return Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(tokio::task::yield_now()),
            ));
        };
        let clock = clock.clone();
        let slice = async move {
            tokio::time::sleep(pause).await;
            // The pause was not wasm time.
            clock.lock().unwrap_or_else(|e| e.into_inner()).entered = Some(Instant::now());
        };
        Ok(UpdateDeadline::YieldCustom(1, Box::pin(slice)))
    });
}

/// The shortest pause of a CPU-limited guest; shorter ones would be mostly timer rounding.
const THROTTLE_PAUSE: Duration = Duration::from_millis(10);

/// One instance's wasm time: since when it executes wasm (if it does), and the seconds it ran
/// since the last tick.
#[derive(Default)]
struct WasmClock {
    entered: Option<Instant>,
    ran: f64,
}

/// A container's CPU limit, shared by every instance of it (the entry point, probes, hooks,
/// exec, an HTTP handler's requests) as a cgroup's quota is by its processes: a bucket that
/// fills with `share` seconds of CPU each second (holding at most [`THROTTLE_PAUSE`] of credit)
/// and that each instance draws the wasm time it ran from. An instance that finds the container
/// owing more than [`THROTTLE_PAUSE`] sleeps until the bucket is full again, so that together
/// the instances use `share` of a core.
///
/// A pod with a pod-level CPU limit has one of its own, which its containers' limits draw from
/// too (or which its containers without one draw from alone): a container pauses for the
/// longer of what it and its pod owe.
#[derive(Debug)]
pub(crate) struct CpuLimit {
    /// The share of a core, as the bits of an `f64` (a running container's resize changes it).
    share: std::sync::atomic::AtomicU64,
    /// Seconds of CPU the container may still use (negative: owes), as of an instant.
    bucket: std::sync::Mutex<(f64, Instant)>,
    /// The pod's limit, when it has one.
    pod: Option<Arc<CpuLimit>>,
}

impl CpuLimit {
    pub(crate) fn new(share: f64) -> Arc<CpuLimit> {
        CpuLimit::within(share, None)
    }

    /// A container's limit inside its pod's.
    pub(crate) fn within(share: f64, pod: Option<Arc<CpuLimit>>) -> Arc<CpuLimit> {
        Arc::new(CpuLimit {
            share: std::sync::atomic::AtomicU64::new(share.to_bits()),
            bucket: std::sync::Mutex::new((0.0, Instant::now())),
            pod,
        })
    }

    /// The share of one core it allows.
    pub(crate) fn share(&self) -> f64 {
        f64::from_bits(self.share.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Changes the share (positive; a running container's resize).
    pub(crate) fn set_share(&self, share: f64) {
        self.share
            .store(share.to_bits(), std::sync::atomic::Ordering::Relaxed);
    }

    /// Draws `spent` seconds of CPU at `now`; how long to pause, if the container (or its pod)
    /// owes enough.
    fn charge(&self, spent: f64, now: Instant) -> Option<Duration> {
        let share = self.share();
        let own = {
            let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
            let (tokens, updated) = &mut *bucket;
            let refill = now.saturating_duration_since(*updated).as_secs_f64() * share;
            *tokens = (*tokens + refill).min(THROTTLE_PAUSE.as_secs_f64()) - spent;
            *updated = now;
            let owed = -*tokens / share;
            (owed >= THROTTLE_PAUSE.as_secs_f64()).then(|| Duration::from_secs_f64(owed))
        };
        let pod = self.pod.as_ref().and_then(|p| p.charge(spent, now));
        own.max(pod)
    }
}
