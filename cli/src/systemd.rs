//! `wasmpod serve` as a systemd service (`Type=notify`, `deploy/systemd/wasmpod.service`): when
//! systemd gives it `NOTIFY_SOCKET`, the agent says `READY=1` once it does its work (its stored
//! pods run again and the API answers a client's request), keeps a `STATUS=` line a person reads
//! in `systemctl status`, pings the watchdog (`WatchdogSec=`) only after that same request
//! succeeds again, and says `STOPPING=1` when it shuts down.

use std::time::Duration;

use sd_notify::NotifyState;
use wasmpod_agent::Agent;

/// How long `READY=1` waits for the stored pods to run again: below systemd's default start
/// timeout (90 s), so that a pod whose image is slow to come does not get the agent killed.
const RESTORE_WAIT: Duration = Duration::from_secs(60);
/// How often the status line is renewed when there is no watchdog.
const STATUS_EVERY: Duration = Duration::from_secs(10);
/// The longest a single check of the API may take before systemd learns of it.
const CHECK_LIMIT: Duration = Duration::from_secs(5);

/// The service manager, when the agent runs under one.
pub(crate) struct Systemd {
    /// Half of `WATCHDOG_USEC`: how often the watchdog is pinged.
    watchdog: Option<Duration>,
    status: String,
}

impl Systemd {
    /// `Some` when systemd waits for the agent's notifications (`NOTIFY_SOCKET` is set).
    pub(crate) fn from_env() -> Option<Systemd> {
        std::env::var_os("NOTIFY_SOCKET")?;
        Some(Systemd {
            watchdog: sd_notify::watchdog_enabled().map(|d| (d / 2).max(Duration::from_millis(1))),
            status: String::new(),
        })
    }

    /// Waits until the agent does its work, then says `READY=1`.
    pub(crate) async fn ready(&mut self, agent: &Agent) {
        self.send(&[NotifyState::Status("bringing the stored pods back")]);
        let starting = agent.restored(RESTORE_WAIT).await;
        if starting > 0 {
            tracing::warn!("{starting} stored pods do not run again after {RESTORE_WAIT:?}");
        }
        loop {
            match agent.answers(CHECK_LIMIT).await {
                Ok(()) => break,
                Err(why) => {
                    tracing::warn!("the API does not answer yet: {why}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        let status = self.status_line(agent);
        self.send(&[NotifyState::Ready, NotifyState::Status(&status)]);
        self.status = status;
    }

    /// How long until [`Systemd::tick`] should run again.
    pub(crate) fn period(&self) -> Duration {
        self.watchdog.unwrap_or(STATUS_EVERY)
    }

    /// Renews the status line and, when the API answered, pings the watchdog: an agent whose
    /// API or store is wedged stops pinging and systemd restarts it.
    pub(crate) async fn tick(&mut self, agent: &Agent) {
        if let Some(period) = self.watchdog {
            match agent.answers(period.min(CHECK_LIMIT)).await {
                Ok(()) => self.send(&[NotifyState::Watchdog]),
                Err(why) => tracing::warn!("no watchdog ping: the API does not answer: {why}"),
            }
        }
        let status = self.status_line(agent);
        if status != self.status {
            self.send(&[NotifyState::Status(&status)]);
            self.status = status;
        }
    }

    /// Says `STOPPING=1`.
    pub(crate) fn stopping(&self) {
        self.send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
    }

    fn status_line(&self, agent: &Agent) -> String {
        let pods = agent.pod_count();
        let source = agent
            .source_status()
            .map(|s| format!("; {s}"))
            .unwrap_or_default();
        format!(
            "serving the API on https://{}; {pods} pod{} on the node{source}",
            agent.local_addr(),
            if pods == 1 { "" } else { "s" }
        )
    }

    fn send(&self, states: &[NotifyState]) {
        if let Err(e) = sd_notify::notify(states) {
            tracing::warn!("cannot notify systemd: {e}");
        }
    }
}
