//! One process of a container: its entry point, or a command exec'd in it. Its state is an enum
//! with one method per transition (created → running → exited; a created process may also be
//! killed before it starts), and its end is a watch every waiter sees.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use containerd_shim::protos::types::task::Status;
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use wasmpod::task::TaskIo;

use crate::failure::Failure;
use crate::stdio::Stdio;

/// Exit code of a process ended by KILL.
const KILLED: u32 = 137;

/// How a process's guest ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) code: u32,
    /// It reached its memory limit.
    pub(crate) oom: bool,
}

impl Outcome {
    pub(crate) fn of(exit: &wasmpod::task::TaskExit) -> Outcome {
        Outcome {
            code: u32::try_from(exit.code).unwrap_or(KILLED),
            oom: exit.oom,
        }
    }
}

/// When a process ended, and its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exited {
    pub(crate) code: u32,
    pub(crate) at: SystemTime,
}

enum State {
    /// Made, its stdio open, not started.
    Created(TaskIo),
    /// Running on the shim's runtime; aborting its future is KILL.
    Running(AbortHandle),
    Exited(Exited),
}

/// A process of a container.
pub(crate) struct Process {
    /// The exec's id; empty for the container's entry point.
    pub(crate) exec_id: String,
    pub(crate) stdio: Stdio,
    state: Mutex<State>,
    exit: watch::Sender<Option<Exited>>,
    /// When containerd's `Start` was answered: the process's end is stamped after it.
    answered: watch::Sender<Option<SystemTime>>,
}

/// How long after `Start` was answered a container's entry point's end is stamped at the
/// earliest: containerd reads its clock for `started_at` once the answer reaches it (after its
/// own bookkeeping, which took more than a millisecond on a loaded 2-core machine), and the
/// kubelet computes a duration from the two, so an entry point that ends at once must not end
/// before that reading. Only one that ends within this time of its start is reported later, by
/// at most this. An exec'd process has no `started_at` (the CRI's `ExecSync` and `Exec` report
/// its output and code alone): its end is told as soon as `Start` was answered.
const AFTER_START: Duration = Duration::from_millis(25);
/// How long a process that ended waits for `Start`'s answer to be marked.
const ANSWER_WAIT: Duration = Duration::from_secs(1);

impl Process {
    pub(crate) fn new(exec_id: String, stdio: Stdio, io: TaskIo) -> Arc<Process> {
        Arc::new(Process {
            exec_id,
            stdio,
            state: Mutex::new(State::Created(io)),
            exit: watch::channel(None).0,
            answered: watch::channel(None).0,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Created → running: `run` is driven on `rt` with the process's stdio; when it ends (or
    /// is killed: 137), `ended` is called with how, then the process is exited.
    pub(crate) fn start<F>(
        self: &Arc<Self>,
        rt: &Handle,
        run: impl FnOnce(TaskIo) -> F,
        ended: impl FnOnce(Outcome, Exited) + Send + 'static,
    ) -> Result<(), Failure>
    where
        F: Future<Output = Outcome> + Send + 'static,
    {
        let mut state = self.state();
        let io = match std::mem::replace(&mut *state, State::Exited(exited(KILLED))) {
            State::Created(io) => io,
            other => {
                *state = other;
                return Err(Failure::Precondition(
                    "the process was started already".into(),
                ));
            }
        };
        let running = rt.spawn(run(io));
        *state = State::Running(running.abort_handle());
        drop(state);
        let this = self.clone();
        rt.spawn(async move {
            let outcome = running.await.unwrap_or(Outcome {
                code: KILLED,
                oom: false,
            });
            this.after_start().await;
            let end = exited(outcome.code);
            // containerd hears of the end (`TaskOOM` first) before `Wait` returns it.
            let _ = tokio::task::spawn_blocking(move || ended(outcome, end)).await;
            this.exited(end);
        });
        Ok(())
    }

    /// Marks `Start` as answered (the service calls it as it answers).
    pub(crate) fn answered(&self) {
        self.answered.send_replace(Some(SystemTime::now()));
    }

    /// Waits until its end may be told: after `Start`'s answer, as runc's shim holds an exit
    /// until its `Start` returns, and for an entry point [`AFTER_START`] past it (one that ends
    /// before containerd has heard it started would show `finished_at` before `started_at`).
    async fn after_start(&self) {
        let mut answered = self.answered.subscribe();
        let at = match tokio::time::timeout(ANSWER_WAIT, answered.wait_for(Option::is_some)).await {
            Ok(Ok(at)) => *at,
            _ => None,
        };
        let Some(at) = at else { return };
        if !self.exec_id.is_empty() {
            return;
        }
        let floor = at + AFTER_START;
        if let Ok(left) = floor.duration_since(SystemTime::now()) {
            tokio::time::sleep(left).await;
        }
    }

    /// Running → exited.
    fn exited(&self, end: Exited) {
        *self.state() = State::Exited(end);
        self.exit.send_replace(Some(end));
    }

    /// KILL: a running process ends with 137 (its instance dropped at the next epoch tick); one
    /// not started never runs. A process that has ended is not found, as containerd expects.
    pub(crate) fn kill(&self) -> Result<(), Failure> {
        let mut state = self.state();
        match &*state {
            State::Running(abort) => {
                abort.abort();
                Ok(())
            }
            State::Created(_) => {
                let end = exited(KILLED);
                *state = State::Exited(end);
                drop(state);
                self.exit.send_replace(Some(end));
                Ok(())
            }
            State::Exited(_) => Err(Failure::NotFound("process already finished".into())),
        }
    }

    /// containerd's view of its state, and its end once it ended.
    pub(crate) fn status(&self) -> (Status, Option<Exited>) {
        match &*self.state() {
            State::Created(_) => (Status::CREATED, None),
            State::Running(_) => (Status::RUNNING, None),
            State::Exited(end) => (Status::STOPPED, Some(*end)),
        }
    }

    /// Whether it runs now.
    pub(crate) fn running(&self) -> bool {
        matches!(&*self.state(), State::Running(_))
    }

    /// Waits for its end.
    pub(crate) async fn wait(&self) -> Exited {
        let mut exit = self.exit.subscribe();
        match exit.wait_for(Option::is_some).await {
            Ok(end) => end.unwrap_or_else(|| exited(KILLED)),
            Err(_) => exited(KILLED),
        }
    }
}

fn exited(code: u32) -> Exited {
    Exited {
        code,
        at: SystemTime::now(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    fn process() -> Arc<Process> {
        Process::new("e".into(), Stdio::default(), TaskIo::new())
    }

    fn code(code: u32) -> Outcome {
        Outcome { code, oom: false }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_process_runs_once_and_its_end_is_told_before_waiters_see_it() {
        let p = process();
        assert_eq!(p.status().0, Status::CREATED);
        let (told, ended) = mpsc::channel();
        let (go, gate) = tokio::sync::oneshot::channel::<()>();
        p.start(
            &Handle::current(),
            |_io| async move {
                let _ = gate.await;
                code(5)
            },
            move |outcome, end| told.send((outcome, end)).unwrap(),
        )
        .unwrap();
        assert!(p.running());
        assert_eq!(p.status(), (Status::RUNNING, None));
        let again = p.start(&Handle::current(), |_| async { code(0) }, |_, _| {});
        assert!(matches!(again, Err(Failure::Precondition(_))));
        go.send(()).unwrap();
        let end = p.wait().await;
        assert_eq!(end.code, 5);
        // `ended` (containerd's TaskExit) ran before the end was visible.
        let (outcome, told_end) = ended.try_recv().expect("told before the wait returned");
        assert_eq!((outcome, told_end), (code(5), end));
        assert_eq!(p.status(), (Status::STOPPED, Some(end)));
        assert!(matches!(p.kill(), Err(Failure::NotFound(_))));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn kill_ends_a_running_process_with_137_and_a_created_one_without_running_it() {
        let running = process();
        let (told, ended) = mpsc::channel();
        running
            .start(
                &Handle::current(),
                |_io| std::future::pending(),
                move |outcome, _| told.send(outcome).unwrap(),
            )
            .unwrap();
        running.kill().unwrap();
        assert_eq!(running.wait().await.code, KILLED);
        assert_eq!(ended.recv().unwrap(), code(KILLED));

        let created = process();
        created.kill().unwrap();
        assert_eq!(created.status().0, Status::STOPPED);
        assert_eq!(created.wait().await.code, KILLED);
        let start = created.start(&Handle::current(), |_| async { code(0) }, |_, _| {});
        assert!(matches!(start, Err(Failure::Precondition(_))));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn an_entry_point_that_ends_at_once_is_stamped_after_its_start_was_answered() {
        let entry = Process::new(String::new(), Stdio::default(), TaskIo::new());
        let exec = process();
        for p in [&entry, &exec] {
            p.start(&Handle::current(), |_io| async { code(0) }, |_, _| {})
                .unwrap();
        }
        let answered = SystemTime::now();
        entry.answered();
        exec.answered();
        let (entry_end, exec_end) = tokio::join!(entry.wait(), exec.wait());
        assert!(
            entry_end.at >= answered + AFTER_START,
            "ended {:?} after the answer",
            entry_end.at.duration_since(answered)
        );
        // An exec's end is told once its start was answered, without the entry point's wait.
        assert!(
            exec_end.at >= answered,
            "an exec ended before its start was answered"
        );
        assert!(
            exec_end.at < entry_end.at,
            "an exec held as long as an entry point"
        );
    }
}
