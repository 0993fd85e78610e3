//! The pod event stream: what happened to a pod and its containers, in order, as the contract's
//! JSON Lines records.

use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::signal::Signal;

/// A pod's phase (`status.phase`, and the event stream's `phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum Phase {
    /// Admitted or not yet, its containers not all started.
    Pending,
    /// Its containers started; one at least runs or will run again.
    Running,
    /// Every container ended with success and none restarts.
    Succeeded,
    /// Every container ended, one at least in failure, or the pod was stopped for good
    /// (deadline, eviction).
    Failed,
}

impl Phase {
    /// The phase as Kubernetes writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }
}

/// `Normal` or `Warning`, as Kubernetes events are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EventType {
    /// Something expected.
    Normal,
    /// Something that went wrong.
    Warning,
}

/// Why an event was recorded. The names are the kubelet's and the event stream's contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum Reason {
    /// The container's module was loaded, compiled, taken from the compile cache, or pulled.
    Pulled,
    /// A registry image is being pulled.
    Pulling,
    /// The container's module could not be loaded or pulled, or its instance could not be made
    /// (a warning; the message says why).
    Failed,
    /// The container's instance was made.
    Created,
    /// The container runs (its postStart hook, if any, returned).
    Started,
    /// The postStart hook ran.
    PostStartHook,
    /// The postStart hook failed: the container is killed (a warning).
    FailedPostStartHook,
    /// The startup probe passed.
    StartupSucceeded,
    /// The container turned ready.
    Ready,
    /// The container turned unready.
    NotReady,
    /// A probe failed; the message names the probe and why (a warning).
    Unhealthy,
    /// The preStop hook ran.
    PreStopHook,
    /// The preStop hook failed or was cut off at the grace period (a warning).
    FailedPreStopHook,
    /// TERM was sent; the message gives the grace period.
    Killing,
    /// The container's instance ended: `exitCode`, and the Kubernetes reason as the message
    /// (`Completed`, `Error`, `OOMKilled`, ...).
    Exited,
    /// The container waits to restart; the message gives the delay (a warning).
    BackOff,
    /// The pod's phase changed (the event's `phase`).
    PhaseChanged,
    /// Every init container completed.
    Initialized,
    /// The pod's deletion was asked; the message gives the grace period.
    Terminating,
    /// `activeDeadlineSeconds` passed: the pod fails.
    DeadlineExceeded,
    /// The pod does not fit on the node (yet); the message says why, as the scheduler does.
    FailedScheduling,
    /// A pull goes on without `imagePullSecrets` the pod names but was not given (a warning).
    FailedToRetrieveImagePullSecret,
    /// A volume is mounted without part of what it names; the message says what (a warning;
    /// the pod runs).
    FailedMount,
    /// The pod was preempted for a pod of higher priority.
    Preempted,
    /// The pod was evicted under node memory pressure (it fails).
    Evicted,
    /// The pod is gone: its last event.
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
    pub role: Option<crate::ContainerRole>,
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
    pub phase: Option<Phase>,
}

/// An event's time: RFC 3339 in UTC with microseconds.
pub(crate) fn micros(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// An event as a pod's journal keeps it: the pod's name is the journal's, the container's name
/// is shared with the pod's records, the time is a timestamp; the record becomes an [`Event`]
/// when it is read. A sleeping pod keeps its first events for good, so each one counts.
#[derive(Debug)]
pub(crate) struct Record {
    pub at: jiff::Timestamp,
    /// The container's name and role; `None` for pod-level events.
    pub container: Option<(Arc<str>, crate::ContainerRole)>,
    pub kind: EventType,
    pub reason: Reason,
    pub message: Message,
    pub exit_code: Option<i32>,
    pub restart_count: Option<i32>,
    pub phase: Option<Phase>,
}

/// An event's message as its record keeps it: the sentences every pod that starts records (its
/// phases, its init containers done, each container created and started) are written when the
/// event is read, from the record's phase and container.
#[derive(Debug)]
pub(crate) enum Message {
    /// As it is.
    Text(Box<str>),
    /// `Pod is <phase>`.
    Phase,
    /// `All init containers have completed`.
    Initialized,
    /// `Created container <name>`.
    Created,
    /// `Started container <name>`.
    Started,
}

impl From<String> for Message {
    fn from(text: String) -> Message {
        Message::Text(text.into())
    }
}

impl From<&str> for Message {
    fn from(text: &str) -> Message {
        Message::Text(text.into())
    }
}

impl Record {
    fn message(&self) -> String {
        let container = || self.container.as_ref().map_or("", |(name, _)| name);
        match &self.message {
            Message::Text(text) => text.to_string(),
            Message::Phase => format!("Pod is {}", self.phase.map_or("", Phase::as_str)),
            Message::Initialized => "All init containers have completed".to_owned(),
            Message::Created => format!("Created container {}", container()),
            Message::Started => format!("Started container {}", container()),
        }
    }

    fn event(&self, pod: &str) -> Event {
        Event {
            time: micros(self.at),
            pod: pod.to_owned(),
            container: self.container.as_ref().map(|(name, _)| name.to_string()),
            role: self.container.as_ref().map(|&(_, role)| role),
            kind: self.kind,
            reason: self.reason,
            message: self.message(),
            exit_code: self.exit_code,
            restart_count: self.restart_count,
            phase: self.phase,
        }
    }
}

/// The first events of a pod, always kept (how it started).
const KEPT_FIRST: usize = 128;
/// The most recent events kept after the first ones: a pod that restarts or fails probes for
/// weeks keeps a bounded journal, as Kubernetes keeps events for a while, not forever.
const KEPT_LAST: usize = 1024;

/// A pod's events so far, bounded; readers follow it without missing any while they keep up.
pub(crate) struct Journal {
    /// The pod's name, which each of its events shows.
    pod: Box<str>,
    events: Mutex<Kept>,
    /// Changes with each event recorded and when the journal is closed.
    changes: Signal,
}

/// The first [`KEPT_FIRST`] events and the last [`KEPT_LAST`] of the rest.
#[derive(Default)]
struct Kept {
    first: Vec<Record>,
    last: std::collections::VecDeque<Record>,
    /// How many events were recorded in all.
    total: usize,
    /// No event follows.
    closed: bool,
}

impl Kept {
    fn push(&mut self, record: Record) {
        if self.first.len() < KEPT_FIRST {
            if self.first.len() == self.first.capacity() {
                // Grown by half, not doubled: a pod that starts and runs records six events,
                // and a sleeping pod keeps its journal for as long as it lives.
                let more = (self.first.len() / 2).max(2);
                self.first
                    .reserve_exact(more.min(KEPT_FIRST - self.first.len()));
            }
            self.first.push(record);
        } else {
            if self.last.len() == KEPT_LAST {
                self.last.pop_front();
            }
            self.last.push_back(record);
        }
        self.total += 1;
    }

    /// The event at position `at`, or the next one still kept if it was dropped: (its
    /// position, the record).
    fn get(&self, at: usize) -> Option<(usize, &Record)> {
        if let Some(e) = self.first.get(at) {
            return Some((at, e));
        }
        let base = self.total - self.last.len();
        let at = at.max(base);
        self.last.get(at - base).map(|e| (at, e))
    }
}

impl Journal {
    /// The journal of the pod named `pod`.
    pub(crate) fn new(pod: &str) -> Journal {
        Journal {
            pod: pod.into(),
            events: Mutex::default(),
            changes: Signal::default(),
        }
    }

    pub(crate) fn push(&self, record: Record) {
        tracing::debug!(pod = %self.pod, container = ?record.container, reason = ?record.reason, "{}", record.message());
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(record);
        self.changes.bump();
    }

    pub(crate) fn close(&self) {
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        if !std::mem::replace(&mut events.closed, true) {
            drop(events);
            self.changes.bump();
        }
    }

    pub(crate) fn stream(self: &Arc<Self>) -> EventStream {
        EventStream {
            journal: self.clone(),
            next: 0,
        }
    }
}

/// The events of one pod, from its first to its last (`Deleted`).
///
/// A reader sees every event, in order, however late it starts reading, unless the pod has
/// recorded very many: a journal keeps a pod's first 128 events and its last 1,024, and a reader
/// that falls further behind skips to the oldest event still kept.
pub struct EventStream {
    journal: Arc<Journal>,
    next: usize,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl EventStream {
    /// The next event, waiting for it if needed; `None` once the pod is gone and all were read.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            // The version is read *before* looking at the journal: an event recorded after
            // this line changes it, so `changed` below cannot miss the event.
            let seen = self.journal.changes.version();
            let (found, closed) = {
                let kept = self
                    .journal
                    .events
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                let found = kept
                    .get(self.next)
                    .map(|(at, record)| (at, record.event(&self.journal.pod)));
                (found, kept.closed)
            };
            if let Some((at, event)) = found {
                self.next = at + 1;
                return Some(event);
            }
            if closed {
                return None;
            }
            self.journal.changes.changed(seen).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(i: usize) -> Record {
        Record {
            at: jiff::Timestamp::now(),
            container: None,
            kind: EventType::Normal,
            reason: Reason::PhaseChanged,
            message: i.to_string().into(),
            exit_code: None,
            restart_count: None,
            phase: None,
        }
    }

    /// A journal keeps the first and the last events of a long life, and a late reader reads
    /// those, in order.
    #[tokio::test]
    async fn the_journal_is_bounded_and_keeps_the_first_and_last_events() {
        let journal = Arc::new(Journal::new("p"));
        let total = KEPT_FIRST + KEPT_LAST * 3;
        for i in 0..total {
            journal.push(event(i));
        }
        journal.close();
        {
            let kept = journal.events.lock().unwrap();
            assert_eq!(kept.first.len() + kept.last.len(), KEPT_FIRST + KEPT_LAST);
        }
        let mut stream = journal.stream();
        let mut seen = Vec::new();
        while let Some(e) = stream.next().await {
            seen.push(e.message.parse::<usize>().unwrap());
        }
        let expected: Vec<usize> = (0..KEPT_FIRST).chain(total - KEPT_LAST..total).collect();
        assert_eq!(seen, expected);
    }

    /// A pod that starts and runs records six events, and its journal keeps room for six, not
    /// the eight a doubling vector would; it still grows by half at each step after that.
    #[test]
    fn the_journal_grows_by_half() {
        let journal = Journal::new("p");
        let mut rooms = Vec::new();
        for i in 0..20 {
            journal.push(event(i));
            let room = journal.events.lock().unwrap().first.capacity();
            if rooms.last() != Some(&room) {
                rooms.push(room);
            }
        }
        assert_eq!(rooms, [2, 4, 6, 9, 13, 19, 28]);
    }

    /// Readers racing a writer on another thread see every event, in order: a wake-up lost
    /// between looking at the journal and waiting for a change would hang a reader here.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn readers_racing_the_writer_see_every_event() {
        for _ in 0..200 {
            let journal = Arc::new(Journal::new("p"));
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
