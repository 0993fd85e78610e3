//! A new pod's first steps taken on the thread that creates it, when that thread is not one of
//! the runtime's workers (an embedder's `Runtime::block_on`, `wasmpod run`'s main thread).
//!
//! A task spawned from outside the workers is queued for them and a parked worker is woken (on a
//! VM, the wake of an idle vCPU), which wakes a second one to search for more work, and the pod's
//! end must then wake the caller back: a pod that ends at once spent most of its life in those
//! wake-ups. Within [`scope`], [`spawn`] keeps a task on the caller's thread instead: once the
//! scope's closure returns, its tasks are polled there for as long as one of them is woken by
//! another. A task that wakes itself while it is polled (it yields, as a guest does at the end of
//! its time slice) is spawned onto the runtime at once, and everything is handed over after a
//! bound of polls: the caller is never held for more than a pod's first steps. A task still
//! waiting when the scope ends is handed over *parked*: its waker holds it, and the first wake of
//! what it waits for spawns it (so a pod that has ended, or sleeps, costs no worker a wake-up
//! before something happens to it). A task that is spawned is polled again by the runtime, so a
//! wake that went to the scope is never lost; parked tasks are dropped as their runtime shuts
//! down, as its own tasks are.
//!
//! Elsewhere (on a worker, on a single-threaded runtime, on a thread outside any runtime) both
//! are what they would be without this: `spawn` is `tokio::spawn`, `scope` runs its closure.

use std::cell::RefCell;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Weak};
use std::task::{Context, Poll, Wake, Waker};

use tokio::runtime::{Handle, Id, RuntimeFlavor};

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The most polls a scope makes before it hands its tasks over.
const MAX_POLLS: usize = 64;

thread_local! {
    /// The tasks spawned in the scope open on this thread, if one is.
    static SPAWNED: RefCell<Option<Vec<Task>>> = const { RefCell::new(None) };
}

/// Spawns `task`: into the scope open on this thread, if one is, or onto the runtime.
pub(crate) fn spawn<F>(task: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let mut task = Some(task);
    SPAWNED.with(|spawned| {
        if let Some(spawned) = spawned.borrow_mut().as_mut() {
            spawned.extend(task.take().map(|t| Box::pin(t) as Task));
        }
    });
    if let Some(task) = task {
        drop(tokio::spawn(task));
    }
}

/// Runs `f`, then the tasks it spawned with [`spawn`] as far as they go on this thread, when
/// this thread is outside a multi-threaded runtime's workers; otherwise just runs `f`.
pub(crate) fn scope<R>(f: impl FnOnce() -> R) -> R {
    let open = outside_workers() && SPAWNED.with(|s| s.borrow().is_none());
    if !open {
        return f();
    }
    SPAWNED.with(|s| *s.borrow_mut() = Some(Vec::new()));
    // Closed again even if `f` or a task panics: a later spawn on this thread must not land in
    // a scope nobody drives.
    let _close = Close;
    let result = f();
    drive();
    result
}

/// On a thread of a multi-threaded runtime that is not running one of its tasks: the thread
/// `block_on` runs on (a worker's every poll is a task's).
fn outside_workers() -> bool {
    tokio::task::try_id().is_none()
        && Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread)
}

struct Close;

impl Drop for Close {
    fn drop(&mut self) {
        let left = SPAWNED.with(|s| s.borrow_mut().take()).unwrap_or_default();
        for task in left {
            drop(tokio::spawn(task));
        }
    }
}

/// The tasks handed over while they waited, by runtime: dropped when the runtime shuts down, as
/// it drops its own tasks (a parked task that nothing outside it can wake, such as a supervisor
/// that holds a sender of its own mailbox, is otherwise kept only by its own wakers).
static PARKED: Mutex<Vec<(Id, Arc<Parked>)>> = Mutex::new(Vec::new());

#[derive(Default)]
struct Parked {
    slots: Mutex<Vec<Weak<Slot>>>,
    /// The length of `slots` after it was last pruned.
    pruned: AtomicUsize,
}

impl Parked {
    /// The record of `runtime`'s parked tasks; the first use starts the task that drops them as
    /// the runtime shuts down.
    fn of(runtime: &Handle) -> Arc<Parked> {
        let mut all = lock(&PARKED);
        let id = runtime.id();
        if let Some((_, parked)) = all.iter().find(|(i, _)| *i == id) {
            return parked.clone();
        }
        let parked = Arc::<Parked>::default();
        all.push((id, parked.clone()));
        let keeper = Keeper(id, parked.clone());
        drop(runtime.spawn(async move {
            let _keeper = keeper;
            std::future::pending::<()>().await;
        }));
        parked
    }

    fn add(&self, slot: &Arc<Slot>) {
        let mut slots = lock(&self.slots);
        if slots.len() >= 2 * self.pruned.load(Ordering::Relaxed).max(64) {
            slots.retain(|s| {
                s.upgrade()
                    .is_some_and(|s| matches!(*s.lock(), State::Parked(_)))
            });
            self.pruned.store(slots.len(), Ordering::Relaxed);
        }
        slots.push(Arc::downgrade(slot));
    }
}

/// Drops a runtime's parked tasks when the runtime drops it, at its shutdown.
struct Keeper(Id, Arc<Parked>);

impl Drop for Keeper {
    fn drop(&mut self) {
        lock(&PARKED).retain(|(id, _)| *id != self.0);
        let slots = std::mem::take(&mut *lock(&self.1.slots));
        for slot in slots.iter().filter_map(Weak::upgrade) {
            let parked = std::mem::replace(&mut *slot.lock(), State::Spawned);
            drop(parked);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A scope's task as its wakers see it: driven by the scope (and whether it was woken since it
/// was last polled), parked (handed over while it waits: its first wake spawns it onto the
/// runtime, so that a task that waits costs no worker's wake-up at the hand-over), or spawned.
struct Slot {
    state: Mutex<State>,
    runtime: Handle,
}

enum State {
    Driven { woken: bool },
    Parked(Task),
    Spawned,
}

impl Slot {
    fn take_woken(&self) -> bool {
        match &mut *self.lock() {
            State::Driven { woken } => std::mem::replace(woken, false),
            _ => false,
        }
    }

    fn woken(&self) -> bool {
        matches!(*self.lock(), State::Driven { woken: true })
    }

    /// Hands `task` over: spawned now if it was woken, else on its first wake.
    fn park(self: &Arc<Self>, task: Task, parked: &Parked) {
        let mut state = self.lock();
        if matches!(*state, State::Driven { woken: true }) {
            *state = State::Spawned;
            drop(state);
            drop(self.runtime.spawn(task));
        } else {
            *state = State::Parked(task);
            drop(state);
            parked.add(self);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }
}

impl Wake for Slot {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut state = self.lock();
        match &mut *state {
            State::Driven { woken } => *woken = true,
            State::Parked(_) => {
                let State::Parked(task) = std::mem::replace(&mut *state, State::Spawned) else {
                    unreachable!()
                };
                drop(state);
                drop(self.runtime.spawn(task));
            }
            State::Spawned => {}
        }
    }
}

struct Entry {
    task: Task,
    slot: Arc<Slot>,
}

/// Polls the scope's tasks while any is woken, then hands what is left to the runtime.
fn drive() {
    let runtime = Handle::current();
    let mut tasks: Vec<Entry> = Vec::new();
    for _ in 0..MAX_POLLS {
        let spawned = SPAWNED.with(|s| s.borrow_mut().as_mut().map(std::mem::take));
        tasks.extend(spawned.into_iter().flatten().map(|task| Entry {
            task,
            slot: Arc::new(Slot {
                state: Mutex::new(State::Driven { woken: true }),
                runtime: runtime.clone(),
            }),
        }));
        let Some(i) = tasks.iter().position(|e| e.slot.take_woken()) else {
            break;
        };
        let entry = &mut tasks[i];
        let waker = Waker::from(entry.slot.clone());
        let mut cx = Context::from_waker(&waker);
        // The scope's polls are not the caller's: they do not spend its task budget.
        let mut task = tokio::task::unconstrained(entry.task.as_mut());
        let polled =
            std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(&mut task).poll(&mut cx)));
        match polled {
            Ok(Poll::Pending) if !entry.slot.woken() => {}
            Ok(Poll::Pending) => {
                let entry = tasks.swap_remove(i);
                *entry.slot.lock() = State::Spawned;
                drop(runtime.spawn(entry.task));
            }
            Ok(Poll::Ready(())) => drop(tasks.swap_remove(i)),
            Err(_) => {
                // As the runtime does with a task that panics: it is dropped, the rest go on.
                tracing::error!("a pod's task panicked");
                drop(tasks.swap_remove(i));
            }
        }
    }
    if !tasks.is_empty() {
        let parked = Parked::of(&runtime);
        for entry in tasks {
            entry.slot.park(entry.task, &parked);
        }
    }
    // What the last poll spawned goes to the runtime as the scope closes.
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::thread::ThreadId;

    fn multi_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// From `block_on`'s thread, tasks that wake each other run there to their end before the
    /// scope returns; one that waits for something outside them is handed over and still ends.
    #[test]
    fn tasks_run_on_the_callers_thread_until_they_wait() {
        let runtime = multi_thread();
        let here = std::thread::current().id();
        let (ran_on, waited_on) = runtime.block_on(async {
            let ran_on: Arc<std::sync::Mutex<Vec<ThreadId>>> = Arc::default();
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let (later_tx, later_rx) = tokio::sync::oneshot::channel::<ThreadId>();
            let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
            scope(|| {
                let r = ran_on.clone();
                spawn(async move {
                    r.lock().unwrap().push(std::thread::current().id());
                    // A task it spawns lands in the scope too.
                    spawn(async move {
                        let _ = tx.send(());
                    });
                });
                let r = ran_on.clone();
                spawn(async move {
                    rx.await.unwrap();
                    r.lock().unwrap().push(std::thread::current().id());
                    go_rx.await.unwrap();
                    let _ = later_tx.send(std::thread::current().id());
                });
            });
            let ran_on = ran_on.lock().unwrap().clone();
            go_tx.send(()).unwrap();
            (ran_on, later_rx.await.unwrap())
        });
        assert_eq!(ran_on, [here, here]);
        // Handed over while it waited: it ends on a worker.
        assert_ne!(waited_on, here);
    }

    /// A task that yields is handed over at once.
    #[test]
    fn a_yielding_task_is_handed_over() {
        let runtime = multi_thread();
        let polls = Arc::new(AtomicUsize::new(0));
        let done = runtime.block_on({
            let polls = polls.clone();
            async move {
                let (tx, rx) = tokio::sync::oneshot::channel();
                let counted = polls.clone();
                scope(|| {
                    spawn(async move {
                        for _ in 0..1000 {
                            counted.fetch_add(1, Ordering::Relaxed);
                            tokio::task::yield_now().await;
                        }
                        let _ = tx.send(());
                    })
                });
                // Polled once here, then the runtime's.
                assert_eq!(polls.load(Ordering::Relaxed), 1);
                rx.await.is_ok()
            }
        });
        assert!(done);
        assert_eq!(polls.load(Ordering::Relaxed), 1000);
    }

    /// A task handed over while it waits for what only it holds is dropped with the runtime,
    /// as the runtime's own tasks are.
    #[test]
    fn a_parked_task_is_dropped_with_the_runtime() {
        struct Dropped(Arc<AtomicBool>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let runtime = multi_thread();
        let dropped = Arc::new(AtomicBool::new(false));
        runtime.block_on(async {
            let held = Dropped(dropped.clone());
            scope(|| {
                spawn(async move {
                    let (_tx, rx) = tokio::sync::oneshot::channel::<()>();
                    let _held = held;
                    let _ = rx.await;
                })
            });
        });
        assert!(!dropped.load(Ordering::Relaxed));
        drop(runtime);
        assert!(dropped.load(Ordering::Relaxed));
    }

    /// On a single-threaded runtime a scope's task waits for the caller to yield, as any task.
    #[tokio::test]
    async fn a_single_threaded_runtime_spawns_as_usual() {
        let ran = Arc::new(AtomicBool::new(false));
        let (tx, rx) = tokio::sync::oneshot::channel();
        scope(|| {
            let ran = ran.clone();
            spawn(async move {
                ran.store(true, Ordering::Relaxed);
                let _ = tx.send(());
            })
        });
        assert!(!ran.load(Ordering::Relaxed));
        rx.await.unwrap();
        assert!(ran.load(Ordering::Relaxed));
    }
}
