//! Resource metrics, as a kubelet and metrics-server keep them: every resolution (15 s by
//! default, metrics-server's) the sampler reads each running container's CPU time and memory
//! and the agent process's own, and keeps the last two readings of each. A rate is the CPU
//! time between the two over the time between them; the memory is the last reading.
//!
//! What is kept is bounded by what runs: two readings per running container, dropped with the
//! container (a restart starts a new window) or its pod.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use jiff::Timestamp;
use tokio::sync::watch;
use wasmpod::PodHandle;

use crate::kubelet::Kubelet;

/// metrics-server's default resolution.
pub(crate) const RESOLUTION: Duration = Duration::from_secs(15);

/// One reading of a cumulative CPU counter and a memory gauge.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reading {
    pub(crate) at: Instant,
    pub(crate) time: Timestamp,
    pub(crate) cpu: Duration,
    pub(crate) memory: u64,
}

/// The last two readings of a container (or of the node).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub(crate) started: SystemTime,
    pub(crate) previous: Option<Reading>,
    pub(crate) last: Reading,
}

impl Window {
    fn new(started: SystemTime, reading: Reading) -> Window {
        Window {
            started,
            previous: None,
            last: reading,
        }
    }

    fn push(&mut self, reading: Reading) {
        self.previous = Some(std::mem::replace(&mut self.last, reading));
    }

    /// CPU cores used over the window (nanocores), and the window's length; `None` until two
    /// readings were taken.
    pub(crate) fn rate(&self) -> Option<(u64, Duration)> {
        let previous = self.previous?;
        let span = self.last.at.saturating_duration_since(previous.at);
        if span.is_zero() {
            return None;
        }
        let used = self.last.cpu.saturating_sub(previous.cpu);
        let nanocores = used.as_nanos().saturating_mul(1_000_000_000) / span.as_nanos();
        Some((u64::try_from(nanocores).unwrap_or(u64::MAX), span))
    }
}

/// The windows of every running container, by pod uid and container name, and the node's.
#[derive(Debug, Default)]
struct Windows {
    pods: HashMap<String, HashMap<String, Window>>,
    node: Option<Window>,
}

/// The sampler's state, read by the API.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    windows: Mutex<Windows>,
}

impl Metrics {
    /// Takes one reading of every pod in `pods` and of the process; pods and containers no
    /// longer running are forgotten.
    pub(crate) fn sample(&self, pods: &[PodHandle]) {
        let (at, time) = (Instant::now(), Timestamp::now());
        let node = process_usage();
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let mut kept = HashMap::with_capacity(pods.len());
        for pod in pods {
            let mut before = windows.pods.remove(pod.uid()).unwrap_or_default();
            let mut now = HashMap::new();
            for usage in pod.usage() {
                let reading = Reading {
                    at,
                    time,
                    cpu: usage.cpu,
                    memory: usage.memory,
                };
                let window = match before.remove(&usage.name) {
                    Some(mut w) if w.started == usage.started => {
                        w.push(reading);
                        w
                    }
                    _ => Window::new(usage.started, reading),
                };
                now.insert(usage.name, window);
            }
            if !now.is_empty() {
                kept.insert(pod.uid().to_owned(), now);
            }
        }
        windows.pods = kept;
        if let Some((cpu, memory)) = node {
            let reading = Reading {
                at,
                time,
                cpu,
                memory,
            };
            match &mut windows.node {
                Some(w) => w.push(reading),
                None => windows.node = Some(Window::new(SystemTime::UNIX_EPOCH, reading)),
            }
        }
    }

    /// The windows of a pod's running containers, by name.
    pub(crate) fn pod(&self, uid: &str) -> Option<HashMap<String, Window>> {
        let windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        windows.pods.get(uid).cloned()
    }

    /// The node's (the agent process's) window.
    pub(crate) fn node(&self) -> Option<Window> {
        self.windows.lock().unwrap_or_else(|e| e.into_inner()).node
    }
}

/// Samples the node's pods every `every` until `stop`.
pub(crate) async fn sample(
    metrics: Arc<Metrics>,
    kubelet: Arc<Kubelet>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => metrics.sample(&kubelet.node().pods()),
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// The process's CPU time (user and system, all threads) and resident memory; `None` where
/// the OS does not say.
pub(crate) fn process_usage() -> Option<(Duration, u64)> {
    // SAFETY: getrusage writes the struct it is given and nothing else.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        (libc::getrusage(libc::RUSAGE_SELF, &mut usage) == 0).then_some(usage)
    }?;
    let time = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    let cpu = time(usage.ru_utime) + time(usage.ru_stime);
    // `statm`'s second field: resident pages.
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    Some((cpu, pages.saturating_mul(page)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(at: Instant, cpu_ms: u64) -> Reading {
        Reading {
            at,
            time: Timestamp::now(),
            cpu: Duration::from_millis(cpu_ms),
            memory: 0,
        }
    }

    #[test]
    fn a_rate_is_the_cpu_between_two_readings_over_their_distance() {
        let t0 = Instant::now();
        let mut w = Window::new(SystemTime::now(), reading(t0, 1_000));
        assert_eq!(w.rate(), None, "one reading has no rate");
        w.push(reading(t0 + Duration::from_secs(2), 2_000));
        // 1 s of CPU in 2 s: half a core.
        assert_eq!(w.rate(), Some((500_000_000, Duration::from_secs(2))));
        w.push(reading(t0 + Duration::from_secs(4), 2_000));
        assert_eq!(w.rate(), Some((0, Duration::from_secs(2))));
        // A counter that went back (it cannot; saturates) and a zero span give no nonsense.
        w.push(reading(t0 + Duration::from_secs(4), 1_000));
        assert_eq!(w.rate(), None);
    }

    #[test]
    fn the_process_reports_its_cpu_and_memory() {
        let (cpu, rss) = process_usage().expect("Linux says");
        assert!(rss > 1 << 20, "{rss}");
        assert!(cpu < Duration::from_secs(3600), "{cpu:?}");
    }
}
