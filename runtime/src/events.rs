//! The pod event stream: what happened to a pod and its containers, in order, as the contract's
//! JSON Lines records.

use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::sync::watch;

/// `Normal` or `Warning`, as Kubernetes events are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EventType {
    /// Something expected.
    Normal,
    /// Something that went wrong.
    Warning,
}

/// Why an event was recorded. The names are the contract's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
#[allow(missing_docs)] // The contract documents each reason.
pub enum Reason {
    Pulled,
    Failed,
    Created,
    Started,
    PostStartHook,
    FailedPostStartHook,
    StartupSucceeded,
    Ready,
    NotReady,
    Unhealthy,
    PreStopHook,
    FailedPreStopHook,
    Killing,
    Exited,
    BackOff,
    PhaseChanged,
    Initialized,
    Terminating,
    DeadlineExceeded,
    /// The pod does not fit on the node (yet); the message says why, as the scheduler does.
    FailedScheduling,
    Preempted,
    Evicted,
    Deleted,
}

/// One record of the event stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Event {
    /// RFC 3339 UTC time with microseconds.
    pub time: String,
    /// The pod's name.
    pub pod: String,
    /// The container's name; `None` for pod-level events.
    pub container: Option<String>,
    /// `init`, `sidecar` or `regular`; `None` for pod-level events.
    pub role: Option<&'static str>,
    /// Normal or Warning.
    #[serde(rename = "type")]
    pub kind: EventType,
    /// Why it was recorded.
    pub reason: Reason,
    /// Human-readable detail.
    pub message: String,
    /// The exit code, on `Exited`.
    pub exit_code: Option<i32>,
    /// The container's restart count, on container events.
    pub restart_count: Option<i32>,
    /// The new phase, on `PhaseChanged`.
    pub phase: Option<&'static str>,
}

pub(crate) fn now_micros() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// A pod's events so far; readers follow it without missing any.
#[derive(Default)]
pub(crate) struct Journal {
    events: Mutex<Vec<Event>>,
    /// Number of events and whether the journal is closed.
    version: watch::Sender<(usize, bool)>,
}

impl Journal {
    pub(crate) fn push(&self, event: Event) {
        tracing::debug!(pod = %event.pod, container = ?event.container, reason = ?event.reason, "{}", event.message);
        let mut events = self.events.lock().unwrap();
        events.push(event);
        let len = events.len();
        drop(events);
        self.version.send_modify(|v| v.0 = len);
    }

    pub(crate) fn close(&self) {
        self.version.send_modify(|v| v.1 = true);
    }

    pub(crate) fn stream(self: &Arc<Self>) -> EventStream {
        EventStream {
            journal: self.clone(),
            next: 0,
            version: self.version.subscribe(),
        }
    }
}

/// The events of one pod, from its first to its last (`Deleted`).
///
/// Every reader sees every event, in order, however late it starts reading.
pub struct EventStream {
    journal: Arc<Journal>,
    next: usize,
    version: watch::Receiver<(usize, bool)>,
}

impl EventStream {
    /// The next event, waiting for it if needed; `None` once the pod is gone and all were read.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            // Mark the version seen *before* looking at the journal: an event recorded after
            // this line changes the version, so `changed` below cannot miss it.
            let (_, closed) = *self.version.borrow_and_update();
            if let Some(event) = self.journal.events.lock().unwrap().get(self.next) {
                self.next += 1;
                return Some(event.clone());
            }
            if closed {
                return None;
            }
            if self.version.changed().await.is_err() {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(i: usize) -> Event {
        Event {
            time: now_micros(),
            pod: "p".into(),
            container: None,
            role: None,
            kind: EventType::Normal,
            reason: Reason::PhaseChanged,
            message: i.to_string(),
            exit_code: None,
            restart_count: None,
            phase: None,
        }
    }

    /// Readers racing a writer on another thread see every event, in order: a wake-up lost
    /// between looking at the journal and waiting for a change would hang a reader here.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn readers_racing_the_writer_see_every_event() {
        for _ in 0..200 {
            let journal = Arc::new(Journal::default());
            let mut readers = Vec::new();
            for _ in 0..4 {
                let mut stream = journal.stream();
                readers.push(tokio::spawn(async move {
                    let mut n = 0;
                    while let Some(e) = stream.next().await {
                        assert_eq!(e.message, n.to_string());
                        n += 1;
                    }
                    n
                }));
            }
            let writer = journal.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    writer.push(event(i));
                    std::hint::spin_loop();
                }
                writer.close();
            });
            for r in readers {
                let n = tokio::time::timeout(std::time::Duration::from_secs(5), r)
                    .await
                    .expect("a reader missed a wake-up")
                    .unwrap();
                assert_eq!(n, 50);
            }
        }
    }
}
