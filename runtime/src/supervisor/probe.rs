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
    sandbox: &Arc<Sandbox>,
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

/// Probes a running instance until its verdict ends the probing or the supervisor is gone.
pub(crate) async fn worker(
    kind: ProbeKind,
    probe: Probe,
    sandbox: Arc<Sandbox>,
    started: Instant,
    to: Target,
) {
    let attempt = || run_handler(&probe.handler, &sandbox, probe.timeout);
    probe_loop(kind, &probe, started, to, attempt).await;
}

/// The prober's timing, whatever an attempt runs: the first after the initial delay, then one
/// every period counted from the start of the last, each counted against the thresholds and
/// reported.
async fn probe_loop<F: Future<Output = Result<(), String>>>(
    kind: ProbeKind,
    probe: &Probe,
    started: Instant,
    to: Target,
    mut attempt: impl FnMut() -> F,
) {
    tokio::time::sleep_until(super::after(started, probe.initial_delay)).await;
    let mut count = Thresholds::new(probe, kind.initial());
    loop {
        let tick = Instant::now();
        let failure = attempt().await.err();
        let changed = count.observe(failure.is_none());
        // A success that changes nothing is not news: the supervisor is not woken for it.
        let sent = if failure.is_none() && changed.is_none() {
            !to.tx.is_closed()
        } else {
            to.tx.send(Msg::Probe {
                index: to.index,
                id: to.id,
                kind,
                failure,
                verdict: changed,
            })
        };
        if !sent {
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
    use crate::spec::Handler;

    fn probe(initial_delay: u64, period: u64, timeout: u64, success: u32, failure: u32) -> Probe {
        Probe {
            handler: Handler::TcpSocket(80),
            initial_delay: Duration::from_secs(initial_delay),
            period: Duration::from_secs(period),
            timeout: Duration::from_secs(timeout),
            success_threshold: success,
            failure_threshold: failure,
            grace: None,
        }
    }

    /// What a probe did in 60 s: when each attempt began (seconds after the container started),
    /// what the supervisor was told of each (failed, new verdict), and whether the worker ended.
    #[derive(Debug)]
    struct Probed {
        starts: Vec<u64>,
        reports: Vec<(bool, Option<bool>)>,
        ended: bool,
    }

    /// Runs a probe whose attempts take `takes` seconds each and give `results` in turn ('+'
    /// success, '-' failure, repeated), bounded by its timeout as the real handlers are.
    async fn probed(kind: ProbeKind, probe: Probe, takes: u64, results: &str) -> Probed {
        let (tx, mut rx) = super::super::Mailbox::new();
        let started = Instant::now();
        let starts = Arc::new(std::sync::Mutex::new(Vec::new()));
        let results: Vec<bool> = results.chars().map(|c| c == '+').collect();
        let mut next = results.into_iter().cycle();
        let (timeout, seen) = (probe.timeout, starts.clone());
        let attempt = move || {
            seen.lock().unwrap().push(started.elapsed().as_secs());
            let ok = next.next().unwrap_or(true);
            bounded(timeout, async move {
                tokio::time::sleep(Duration::from_secs(takes)).await;
                if ok {
                    Ok(())
                } else {
                    Err("refused".to_owned())
                }
            })
        };
        let to = Target {
            index: 0,
            id: 1,
            tx,
        };
        let worker =
            tokio::spawn(async move { probe_loop(kind, &probe, started, to, attempt).await });
        tokio::time::sleep(Duration::from_secs(60)).await;
        let ended = worker.is_finished();
        worker.abort();
        let mut reports = Vec::new();
        while let Ok(msg) = rx.try_recv() {
            if let Msg::Probe {
                failure, verdict, ..
            } = *msg
            {
                reports.push((failure.is_some(), verdict));
            }
        }
        let starts = starts.lock().unwrap().clone();
        Probed {
            starts,
            reports,
            ended,
        }
    }

    /// The prober's timing on a paused clock: when attempts begin, what each reports, when the
    /// worker ends.
    #[tokio::test(start_paused = true)]
    async fn probes_run_after_the_initial_delay_once_a_period_and_stop_on_their_verdict() {
        // Readiness every 5 s from 10 s, 1 s attempts: the first success makes it ready, a
        // failure in between changes nothing (threshold 3), and the worker goes on.
        let p = probed(ProbeKind::Readiness, probe(10, 5, 2, 1, 3), 1, "+-+").await;
        assert_eq!(p.starts, [10, 15, 20, 25, 30, 35, 40, 45, 50, 55]);
        // Reported: the verdict and each failure; a success that changes nothing is not.
        assert_eq!(&p.reports[..2], [(false, Some(true)), (true, None)]);
        assert!(p.reports[2..].iter().all(|r| *r == (true, None)), "{p:?}");
        assert_eq!(p.reports.len(), 4, "{p:?}");
        assert!(!p.ended);
        // Startup: the first success is its verdict, and it probes no more.
        let p = probed(ProbeKind::Startup, probe(0, 10, 1, 1, 3), 0, "--+").await;
        assert_eq!(p.starts, [0, 10, 20]);
        assert_eq!(p.reports, [(true, None), (true, None), (false, Some(true))]);
        assert!(p.ended);
        // Liveness: three failures in a row are its verdict; the worker then leaves the
        // container to be replaced.
        let p = probed(ProbeKind::Liveness, probe(0, 1, 1, 1, 3), 0, "-").await;
        assert_eq!(p.starts, [0, 1, 2]);
        assert_eq!(p.reports.last(), Some(&(true, Some(false))));
        assert!(p.ended);
        // An attempt longer than the timeout fails at the timeout; the next begins a period
        // after the last began.
        let p = probed(ProbeKind::Readiness, probe(0, 10, 2, 1, 1), 30, "+").await;
        assert_eq!(p.starts, [0, 10, 20, 30, 40, 50]);
        assert!(p.reports.iter().all(|(failed, _)| *failed), "{p:?}");
    }

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
