//! Probe workers and hook runs: the kubelet's prober, one task per probe of a running instance.
//!
//! A worker waits for the probe's initial delay (counted from the container's start), then runs
//! the handler every period in a fresh instance bounded by the timeout, counts consecutive
//! successes and failures against the thresholds, and reports every attempt to the supervisor,
//! with the new verdict when it changes. A timed-out handler's instance is dropped, so a hung
//! probe never piles up instances.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::Msg;
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
    pub tx: mpsc::UnboundedSender<Msg>,
}

pub(crate) async fn worker(
    kind: ProbeKind,
    probe: Probe,
    sandbox: Arc<Sandbox>,
    started: Instant,
    to: Target,
) {
    tokio::time::sleep_until(super::after(started, probe.initial_delay).into()).await;
    let (mut successes, mut failures) = (0, 0);
    let mut verdict = kind.initial();
    loop {
        let tick = Instant::now();
        let failure = run_handler(&probe.handler, &sandbox, probe.timeout)
            .await
            .err();
        if failure.is_none() {
            successes += 1;
            failures = 0;
        } else {
            failures += 1;
            successes = 0;
        }
        let reached = if successes >= probe.success_threshold {
            Some(true)
        } else if failures >= probe.failure_threshold {
            Some(false)
        } else {
            None
        };
        let changed = reached.filter(|r| Some(*r) != verdict);
        if changed.is_some() {
            verdict = changed;
        }
        let msg = Msg::Probe {
            index: to.index,
            id: to.id,
            kind,
            failure,
            verdict: changed,
        };
        if to.tx.send(msg).is_err() {
            return;
        }
        // Startup probing ends with its verdict; after a liveness failure the worker holds
        // until the container is replaced.
        if changed.is_some()
            && (kind == ProbeKind::Startup || changed == Some(false) && kind == ProbeKind::Liveness)
        {
            return;
        }
        tokio::time::sleep_until(super::after(tick, probe.period).into()).await;
    }
}
