//! The kubelet's crash-loop backoff (client-go `flowcontrol.Backoff` as the kubelet configures
//! it): the first restart is immediate, then the delay starts at `initial` and doubles up to
//! `max`; it starts over when the newest exit comes more than `reset` after the last restart.

use std::time::Duration;

use tokio::time::Instant;

/// The three backoff settings of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffOptions {
    /// The first delay (Kubernetes: 10 s).
    pub initial: Duration,
    /// The largest delay (Kubernetes: 300 s).
    pub max: Duration,
    /// A container that ran this long restarts with the initial delay again (Kubernetes: 600 s).
    pub reset: Duration,
}

impl Default for BackoffOptions {
    fn default() -> Self {
        BackoffOptions {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(300),
            reset: Duration::from_secs(600),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    delay: Duration,
    last_update: Instant,
}

/// The backoff state of one container.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Backoff {
    entry: Option<Entry>,
}

impl Backoff {
    fn expired(entry: &Entry, event: Instant, options: &BackoffOptions) -> bool {
        event.saturating_duration_since(entry.last_update) > options.reset
    }

    /// When the container that last exited at `finished` may start again, if that is later than
    /// `now` (kubelet: `IsInBackOffSince`).
    pub(crate) fn wait_until(
        &self,
        finished: Instant,
        now: Instant,
        options: &BackoffOptions,
    ) -> Option<Instant> {
        let entry = self.entry.as_ref()?;
        if Self::expired(entry, finished, options) {
            return None;
        }
        let until = super::after(finished, entry.delay);
        (until > now).then_some(until)
    }

    /// Records a restart after the exit at `finished` (kubelet: `Next`).
    pub(crate) fn restarted(&mut self, finished: Instant, now: Instant, options: &BackoffOptions) {
        let delay = match &self.entry {
            Some(entry) if !Self::expired(entry, finished, options) => {
                entry.delay.saturating_mul(2).min(options.max)
            }
            _ => options.initial.min(options.max),
        };
        self.entry = Some(Entry {
            delay,
            last_update: now,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kubernetes: delays 0, 10, 20, 40, 80, 160, 300, 300 s for a container exiting at once.
    #[test]
    fn crash_loop_delays_double_to_the_cap() {
        let options = BackoffOptions::default();
        let mut b = Backoff::default();
        let mut now = Instant::now();
        let mut delays = Vec::new();
        for _ in 0..8 {
            let finished = now;
            let delay = b
                .wait_until(finished, now, &options)
                .map_or(Duration::ZERO, |t| t - now);
            delays.push(delay.as_secs());
            now += delay;
            b.restarted(finished, now, &options);
        }
        assert_eq!(delays, [0, 10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn a_long_run_resets_the_delay() {
        let options = BackoffOptions::default();
        let mut b = Backoff::default();
        let t0 = Instant::now();
        b.restarted(t0, t0, &options);
        let t1 = t0 + Duration::from_secs(1);
        b.restarted(t1, t1 + Duration::from_secs(10), &options);
        // ran 11 minutes after its last restart: back to an immediate restart, then 10 s
        let finished = t1 + Duration::from_secs(10 + 660);
        assert_eq!(b.wait_until(finished, finished, &options), None);
        b.restarted(finished, finished, &options);
        let next = finished + Duration::from_secs(1);
        assert_eq!(
            b.wait_until(next, next, &options),
            Some(next + Duration::from_secs(10))
        );
    }
}
