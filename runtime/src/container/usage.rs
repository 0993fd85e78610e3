//! What a container uses, as the kubelet reports it for `kubectl top` and its metrics endpoints:
//! the CPU time its instances ran and the memory they hold now.
//!
//! CPU is counted where the runtime runs a guest: each poll of an instance's future (the entry
//! point, an HTTP request's instance, a probe, a hook, an `exec`) adds the time the poll took,
//! read from the monotonic clock (about 20 ns a read, where the thread's CPU clock is a system
//! call of about 400 ns). A poll is wasm running and the host calls made for it, up to the next
//! epoch tick or wait; time waiting (sleeps, I/O, a CPU limit's pauses) is outside any poll. A
//! thread the OS preempts mid-poll counts that time too, so on an oversubscribed machine the
//! figure is an upper bound, as the CPU limit (which counts wasm time the same way) is.
//!
//! Memory is the container's budget in use: its instances' linear memories and tables and the
//! buffers of its sockets.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use super::Sandbox;

/// One run of a container: when it started and the CPU time its instances have run since.
#[derive(Debug)]
pub(crate) struct Meter {
    started: SystemTime,
    cpu_nanos: AtomicU64,
}

impl Meter {
    pub(crate) fn new() -> Meter {
        Meter {
            started: SystemTime::now(),
            cpu_nanos: AtomicU64::new(0),
        }
    }

    /// Runs `f`, counting the time each of its polls takes.
    pub(crate) fn run<F: Future>(&self, f: F) -> Metered<'_, F> {
        Metered { meter: self, f }
    }

    pub(crate) fn cpu(&self) -> Duration {
        Duration::from_nanos(self.cpu_nanos.load(Ordering::Relaxed))
    }
}

pin_project_lite::pin_project! {
    /// A future whose polls a [`Meter`] counts. A type of its own rather than an `async fn`:
    /// an async fn keeps its argument twice (as passed, and as moved into its body), and the
    /// future metered is a guest's whole run, which each sleeping pod holds.
    pub(crate) struct Metered<'a, F> {
        meter: &'a Meter,
        #[pin]
        f: F,
    }
}

impl<F: Future> Future for Metered<'_, F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = self.project();
        let at = Instant::now();
        let polled = this.f.poll(cx);
        let took = u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX);
        this.meter.cpu_nanos.fetch_add(took, Ordering::Relaxed);
        polled
    }
}

/// What one running container uses now ([`crate::PodHandle::usage`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ContainerUsage {
    /// The container's name.
    pub name: String,
    /// When this run of the container started (a restart starts a new run).
    pub started: SystemTime,
    /// The CPU time its instances have run since it started: wasm and the host calls made for
    /// it, summed over the polls of their futures (time waiting is not counted).
    pub cpu: Duration,
    /// Bytes its instances hold now: linear memories, tables, socket buffers (what its memory
    /// limit counts).
    pub memory: u64,
}

/// A pod's running containers, for reading their usage without asking the supervisor: each
/// container's current sandbox, held weakly (a container that ended drops out).
#[derive(Debug, Default)]
pub(crate) struct PodMeters(Mutex<Vec<(String, Weak<Sandbox>)>>);

impl PodMeters {
    /// Container `index`, named `name`, runs in `sandbox` now.
    pub(crate) fn running(&self, index: usize, name: &str, sandbox: &Arc<Sandbox>) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if all.len() <= index {
            all.resize_with(index + 1, || (String::new(), Weak::new()));
        }
        all[index] = (name.to_owned(), Arc::downgrade(sandbox));
    }

    /// Container `index`'s instance ended: it is no longer listed, even while a task that
    /// ran it still holds its sandbox for a moment.
    pub(crate) fn ended(&self, index: usize) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = all.get_mut(index) {
            entry.1 = Weak::new();
        }
    }

    /// The usage of every container that runs now, in the pod's order.
    pub(crate) fn usage(&self) -> Vec<ContainerUsage> {
        let all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.iter()
            .filter_map(|(name, sandbox)| {
                let sandbox = sandbox.upgrade()?;
                Some(ContainerUsage {
                    name: name.clone(),
                    started: sandbox.meter.started,
                    cpu: sandbox.meter.cpu(),
                    memory: sandbox.budget.used(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn polls_are_counted_and_waits_are_not() {
        let meter = Meter::new();
        meter
            .run(async {
                let until = Instant::now() + Duration::from_millis(30);
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            })
            .await;
        let cpu = meter.cpu();
        assert!(cpu >= Duration::from_millis(30), "{cpu:?}");
        assert!(
            cpu < Duration::from_millis(100),
            "the sleep counted: {cpu:?}"
        );
    }
}
