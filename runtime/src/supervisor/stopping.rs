//! Where a running instance is in being stopped, as one type with a method per transition: the
//! kubelet's `killContainer` (preStop hook, then TERM, then KILL at the end of the grace period,
//! never sooner than 2 s after TERM), with the sidecars' preStop hooks that start early, when the
//! pod's shutdown begins. A combination that cannot happen (TERM sent without a deadline, a kill
//! time without TERM) cannot be written.

use std::time::Duration;

use tokio::time::Instant;

use super::{MIN_GRACE, after};

/// The stopping state of one instance.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Stopping {
    /// Not asked to stop.
    #[default]
    No,
    /// A sidecar whose preStop hook started with the pod's shutdown, before its turn to stop:
    /// the hook runs (or has returned, `done`) within the pod's deadline.
    EarlyPreStop { deadline: Instant, done: bool },
    /// Asked to stop; its preStop hook runs. TERM follows when it returns, or at the deadline.
    PreStop {
        deadline: Instant,
        reason: Option<String>,
    },
    /// Asked to stop, with no hook to wait for: TERM is due now.
    Asked {
        deadline: Instant,
        reason: Option<String>,
    },
    /// TERM was delivered at `sent` (or its default action taken, then no `kill_at`); KILL at
    /// `kill_at`.
    Term {
        deadline: Instant,
        reason: Option<String>,
        sent: Instant,
        kill_at: Option<Instant>,
    },
    /// Killed at once (a zero grace period).
    Killed { reason: Option<String> },
}

/// What the supervisor does after a stop request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Kill now, without TERM or hooks.
    Kill,
    /// Run the preStop hook; TERM follows it.
    StartPreStop,
    /// The preStop hook runs already: TERM follows it.
    WaitForHook,
    /// Send TERM now.
    SendTerm,
    /// TERM was sent: KILL moves earlier, to this time.
    KillAt(Instant),
    /// Nothing more to do.
    Nothing,
}

impl Stopping {
    /// The end of the grace period, once there is one.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match self {
            Stopping::No | Stopping::Killed { .. } => None,
            Stopping::EarlyPreStop { deadline, .. }
            | Stopping::PreStop { deadline, .. }
            | Stopping::Asked { deadline, .. }
            | Stopping::Term { deadline, .. } => Some(*deadline),
        }
    }

    /// Why the instance is stopped (a failed probe or hook), for the `Killing` event.
    pub(crate) fn reason(&self) -> Option<&str> {
        match self {
            Stopping::PreStop { reason, .. }
            | Stopping::Asked { reason, .. }
            | Stopping::Term { reason, .. }
            | Stopping::Killed { reason } => reason.as_deref(),
            Stopping::No | Stopping::EarlyPreStop { .. } => None,
        }
    }

    /// When the instance is to be killed, once TERM was sent.
    pub(crate) fn kill_at(&self) -> Option<Instant> {
        match self {
            Stopping::Term { kill_at, .. } => *kill_at,
            _ => None,
        }
    }

    /// When TERM must be sent even though the preStop hook has not returned.
    pub(crate) fn term_due(&self) -> Option<Instant> {
        match self {
            Stopping::PreStop { deadline, .. } | Stopping::Asked { deadline, .. } => {
                Some(*deadline)
            }
            _ => None,
        }
    }

    /// A sidecar's preStop hook starts with the pod's shutdown, before its turn; `false` (and
    /// no change) unless the instance was not stopping at all.
    pub(crate) fn start_early_pre_stop(&mut self, deadline: Instant) -> bool {
        if *self != Stopping::No {
            return false;
        }
        *self = Stopping::EarlyPreStop {
            deadline,
            done: false,
        };
        true
    }

    /// Asked to stop by `deadline` (a later request can only shorten the grace period), for
    /// `reason`; `force` kills at once. Says what to do next.
    pub(crate) fn request(
        &mut self,
        deadline: Instant,
        reason: Option<String>,
        has_pre_stop: bool,
        force: bool,
    ) -> Step {
        let deadline = self.deadline().map_or(deadline, |d| d.min(deadline));
        let reason = reason.or_else(|| self.reason().map(str::to_owned));
        if force {
            *self = Stopping::Killed { reason };
            return Step::Kill;
        }
        let (next, step) = match std::mem::take(self) {
            Stopping::Term { sent, kill_at, .. } => {
                let kill_at = kill_at.map(|k| k.min(deadline.max(after(sent, MIN_GRACE))));
                let step = kill_at.map_or(Step::Nothing, Step::KillAt);
                let next = Stopping::Term {
                    deadline,
                    reason,
                    sent,
                    kill_at,
                };
                (next, step)
            }
            Stopping::Killed { .. } => (Stopping::Killed { reason }, Step::Nothing),
            Stopping::PreStop { .. } | Stopping::EarlyPreStop { done: false, .. } => {
                (Stopping::PreStop { deadline, reason }, Step::WaitForHook)
            }
            Stopping::No if has_pre_stop => {
                (Stopping::PreStop { deadline, reason }, Step::StartPreStop)
            }
            Stopping::No | Stopping::EarlyPreStop { done: true, .. } | Stopping::Asked { .. } => {
                (Stopping::Asked { deadline, reason }, Step::SendTerm)
            }
        };
        *self = next;
        step
    }

    /// The preStop hook returned: whether TERM is due now (the instance was asked to stop; a
    /// sidecar whose hook ran early still waits for its turn).
    pub(crate) fn pre_stop_done(&mut self) -> bool {
        match std::mem::take(self) {
            Stopping::EarlyPreStop { deadline, .. } => {
                *self = Stopping::EarlyPreStop {
                    deadline,
                    done: true,
                };
                false
            }
            Stopping::PreStop { deadline, reason } => {
                *self = Stopping::Asked { deadline, reason };
                true
            }
            other => {
                *self = other;
                false
            }
        }
    }

    /// TERM is delivered at `now` to a guest that handles it (it is killed at the deadline,
    /// never sooner than 2 s later), or its default action is taken: the grace left, or `None`
    /// when TERM is not due.
    pub(crate) fn term(&mut self, now: Instant, handles_term: bool) -> Option<Duration> {
        let (Stopping::Asked { deadline, reason } | Stopping::PreStop { deadline, reason }) =
            std::mem::take(self)
        else {
            return None;
        };
        let remaining = deadline.saturating_duration_since(now);
        *self = Stopping::Term {
            deadline,
            reason,
            sent: now,
            kill_at: handles_term.then(|| after(now, remaining.max(MIN_GRACE))),
        };
        Some(remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn pre_stop_then_term_then_kill_at_the_deadline() {
        let t0 = Instant::now();
        let mut s = Stopping::No;
        assert_eq!(
            s.request(t0 + secs(30), None, true, false),
            Step::StartPreStop
        );
        assert_eq!(s.term_due(), Some(t0 + secs(30)));
        assert!(s.kill_at().is_none());
        assert!(s.pre_stop_done(), "TERM follows the hook");
        assert_eq!(s.term(t0 + secs(1), true), Some(secs(29)));
        assert_eq!(s.kill_at(), Some(t0 + secs(30)));
        assert_eq!(s.term(t0 + secs(2), true), None, "TERM is sent once");
    }

    #[test]
    fn kill_comes_at_least_two_seconds_after_term() {
        let t0 = Instant::now();
        let mut s = Stopping::No;
        assert_eq!(s.request(t0 + secs(1), None, false, false), Step::SendTerm);
        s.term(t0 + secs(1), true);
        assert_eq!(s.kill_at(), Some(t0 + secs(3)));
        // A shorter grace period later moves KILL earlier, but not before TERM + 2 s.
        assert_eq!(
            s.request(t0 + secs(1), None, false, false),
            Step::KillAt(t0 + secs(3))
        );
        let mut s = Stopping::No;
        s.request(t0 + secs(60), None, false, false);
        s.term(t0, true);
        assert_eq!(
            s.request(t0 + secs(10), None, false, false),
            Step::KillAt(t0 + secs(10))
        );
        assert_eq!(s.kill_at(), Some(t0 + secs(10)));
    }

    #[test]
    fn the_grace_period_can_be_shortened_never_lengthened() {
        let t0 = Instant::now();
        let mut s = Stopping::No;
        s.request(t0 + secs(10), None, true, false);
        assert_eq!(
            s.request(t0 + secs(60), None, true, false),
            Step::WaitForHook
        );
        assert_eq!(s.deadline(), Some(t0 + secs(10)));
        s.request(t0 + secs(5), None, true, false);
        assert_eq!(s.deadline(), Some(t0 + secs(5)));
    }

    #[test]
    fn a_sidecar_hook_started_early_waits_for_its_turn() {
        let t0 = Instant::now();
        let mut s = Stopping::No;
        assert!(s.start_early_pre_stop(t0 + secs(30)));
        assert!(!s.start_early_pre_stop(t0 + secs(30)), "once");
        assert!(!s.pre_stop_done(), "not its turn yet: no TERM");
        assert_eq!(s.term_due(), None);
        assert_eq!(s.request(t0 + secs(20), None, true, false), Step::SendTerm);
        assert_eq!(s.deadline(), Some(t0 + secs(20)));
        // Its turn comes while the hook still runs: TERM waits for it.
        let mut s = Stopping::No;
        s.start_early_pre_stop(t0 + secs(30));
        assert_eq!(
            s.request(t0 + secs(30), None, true, false),
            Step::WaitForHook
        );
        assert!(s.pre_stop_done());
    }

    #[test]
    fn force_kills_at_once_and_keeps_the_reason() {
        let t0 = Instant::now();
        let mut s = Stopping::No;
        s.request(t0 + secs(30), Some("Liveness".into()), true, false);
        assert_eq!(s.request(t0, None, true, true), Step::Kill);
        assert_eq!(s.reason(), Some("Liveness"));
        assert_eq!(s.request(t0, None, true, false), Step::Nothing);
        // A guest that does not handle TERM: no KILL time, its default action stopped it.
        let mut s = Stopping::No;
        s.request(t0 + secs(30), None, false, false);
        assert_eq!(s.term(t0, false), Some(secs(30)));
        assert_eq!(s.kill_at(), None);
        assert_eq!(s.request(t0 + secs(1), None, false, false), Step::Nothing);
    }
}
