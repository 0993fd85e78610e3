//! Probe workers and hook runs: the kubelet's prober, one task per probe of a running instance.
//!
//! A worker waits for the probe's initial delay (counted from the container's start), then runs
//! the handler every period in a fresh instance bounded by the timeout, counts consecutive
//! successes and failures against the thresholds, and reports every attempt to the supervisor,
//! with the new verdict when it changes. A timed-out handler's instance is dropped, so a hung
//! probe never piles up instances.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Mailbox, Msg};
use crate::container::Sandbox;
use crate::network::client;
use crate::spec::{Handler, Probe};

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProbeKind {
    Startup,
    Liveness,
    Readiness,
}

impl ProbeKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ProbeKind::Startup => "Startup",
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
        }
    }

    /// The kubelet's initial result: readiness Failure, liveness Success, startup Unknown.
    fn initial(self) -> Option<bool> {
        match self {
            ProbeKind::Startup => None,
            ProbeKind::Liveness => Some(true),
            ProbeKind::Readiness => Some(false),
        }
    }
}

/// Which hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HookKind {
    PostStart,
    PreStop,
}

/// Runs a handler once, bounded by `timeout`.
pub(crate) async fn run_handler(
    handler: &Handler,
    sandbox: &Sandbox,
    timeout: Duration,
) -> Result<(), String> {
    match handler {
        Handler::Sleep(d) => {
            tokio::time::sleep((*d).min(timeout)).await;
            Ok(())
        }
        Handler::Exec(command) => bounded(timeout, sandbox.exec(command)).await,
        Handler::HttpGet(get) => bounded(timeout, client::http_get(&sandbox.net, get)).await,
        Handler::TcpSocket(port) => bounded(timeout, client::tcp_check(&sandbox.net, *port)).await,
        Handler::Grpc { port, service } => {
            bounded(timeout, client::grpc_check(&sandbox.net, *port, service)).await
        }
    }
}

async fn bounded(
    timeout: Duration,
    run: impl Future<Output = Result<(), String>>,
) -> Result<(), String> {
    match tokio::time::timeout(timeout, run).await {
        Ok(result) => result,
        Err(_) => Err(format!("timed out after {}s", timeout.as_secs())),
    }
}

/// Where a worker reports.
pub(crate) struct Target {
    pub index: usize,
    pub id: u64,
    pub tx: Mailbox,
}

/// The kubelet's threshold counting: a verdict changes after `success_threshold` successes or
/// `failure_threshold` failures in a row.
#[derive(Debug, Clone)]
struct Thresholds {
    success_threshold: u32,
    failure_threshold: u32,
    successes: u32,
    failures: u32,
    verdict: Option<bool>,
}

impl Thresholds {
    fn new(probe: &Probe, initial: Option<bool>) -> Thresholds {
        Thresholds {
            success_threshold: probe.success_threshold,
            failure_threshold: probe.failure_threshold,
            successes: 0,
            failures: 0,
            verdict: initial,
        }
    }

    /// Counts one result; the new verdict, if it changed.
    fn observe(&mut self, ok: bool) -> Option<bool> {
        if ok {
            self.successes = self.successes.saturating_add(1);
            self.failures = 0;
        } else {
            self.failures = self.failures.saturating_add(1);
            self.successes = 0;
        }
        let reached = if self.successes >= self.success_threshold {
            Some(true)
        } else if self.failures >= self.failure_threshold {
            Some(false)
        } else {
            None
        };
        let changed = reached.filter(|r| Some(*r) != self.verdict);
        if changed.is_some() {
            self.verdict = changed;
        }
        changed
    }
}

pub(crate) async fn worker(
    kind: ProbeKind,
    probe: Probe,
    sandbox: Arc<Sandbox>,
    started: Instant,
    to: Target,
) {
    tokio::time::sleep_until(super::after(started, probe.initial_delay)).await;
    let mut count = Thresholds::new(&probe, kind.initial());
    loop {
        let tick = Instant::now();
        let failure = run_handler(&probe.handler, &sandbox, probe.timeout)
            .await
            .err();
        let changed = count.observe(failure.is_none());
        let msg = Msg::Probe {
            index: to.index,
            id: to.id,
            kind,
            failure,
            verdict: changed,
        };
        if !to.tx.send(msg) {
            return;
        }
        // Startup probing ends with its verdict; after a liveness failure the worker holds
        // until the container is replaced.
        if changed.is_some()
            && (kind == ProbeKind::Startup || changed == Some(false) && kind == ProbeKind::Liveness)
        {
            return;
        }
        tokio::time::sleep_until(super::after(tick, probe.period)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counting(success: u32, failure: u32, initial: Option<bool>) -> Thresholds {
        Thresholds {
            success_threshold: success,
            failure_threshold: failure,
            successes: 0,
            failures: 0,
            verdict: initial,
        }
    }

    /// Threshold counting as a table: results in, verdict changes out.
    #[test]
    fn thresholds_change_the_verdict_after_runs_in_a_row() {
        /// Success and failure thresholds, the verdict before, results, verdict changes.
        type Row<'a> = (u32, u32, Option<bool>, &'a str, &'a [Option<bool>]);
        let rows: &[Row] = &[
            // readiness: starts false; one success makes it ready (1 / 3)
            (1, 3, Some(false), "+", &[Some(true)]),
            // three failures in a row make it unready; a success in between resets the count
            (1, 3, Some(true), "--+--", &[None, None, None, None, None]),
            (1, 3, Some(true), "---", &[None, None, Some(false)]),
            // success threshold 2: one success is not enough, two in a row are
            (2, 1, Some(false), "+-++", &[None, None, None, Some(true)]),
            // liveness: no verdict at first; a failure with threshold 1 is the verdict at once
            (1, 1, None, "+-", &[Some(true), Some(false)]),
            // no repeated verdicts
            (1, 3, Some(false), "+++", &[Some(true), None, None]),
        ];
        for (success, failure, initial, results, expected) in rows {
            let mut t = counting(*success, *failure, *initial);
            let got: Vec<Option<bool>> = results.chars().map(|c| t.observe(c == '+')).collect();
            assert_eq!(
                &got, expected,
                "{success}/{failure} from {initial:?}: {results}"
            );
        }
    }
}
