//! What reaches a pod's supervisor: its mailbox, the messages (an instance's exit, a hook's or
//! probe's result, the node's verdicts, a deletion), and what the supervisor does with each.

use std::time::Duration;

use futures_channel::mpsc;
use tokio::sync::oneshot;

use super::probe::{HookKind, ProbeKind};
use super::{ContainerError, PodTask, Stage};
use crate::container::Exit;
use crate::events::{EventType, Reason};

/// A supervisor's mailbox, cheap to clone.
///
/// A pod keeps its mailbox for life, mostly empty: the channel is a linked queue that holds one
/// node when empty (tokio's keeps a block of 32 slots from the start, and halves padded to cache
/// lines: 0.8 KiB a pod against about 0.1). Messages travel boxed, so that the node it keeps
/// is a pointer's size rather than a [`Msg`]'s 136 bytes.
#[derive(Clone)]
pub(crate) struct Mailbox(mpsc::UnboundedSender<Box<Msg>>);

impl Mailbox {
    pub(super) fn new() -> (Mailbox, mpsc::UnboundedReceiver<Box<Msg>>) {
        let (tx, rx) = mpsc::unbounded();
        (Mailbox(tx), rx)
    }

    /// Sends `msg`; false when the supervisor has ended.
    pub(crate) fn send(&self, msg: Msg) -> bool {
        self.0.unbounded_send(Box::new(msg)).is_ok()
    }

    /// Has the supervisor ended?
    pub(crate) fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

pub(crate) enum Msg {
    /// An instance ended, `at` that time.
    Exited {
        index: usize,
        id: u64,
        exit: Exit,
        at: jiff::Timestamp,
    },
    Delete {
        grace: Option<Duration>,
    },
    Hook {
        index: usize,
        id: u64,
        hook: HookKind,
        result: Result<(), String>,
    },
    Probe {
        index: usize,
        id: u64,
        kind: ProbeKind,
        failure: Option<String>,
        verdict: Option<bool>,
    },
    /// The node admitted the pod: its containers may start.
    Admit,
    /// The pod does not fit on the node (yet); `nominated` names the node when pods are being
    /// preempted for it.
    Unschedulable {
        message: String,
        nominated: Option<String>,
    },
    /// The pod is a preemption victim (its deletion follows).
    Preempted {
        message: String,
    },
    /// A container's registry image was pulled (or not).
    Pulled {
        index: usize,
        result: Result<crate::images::Resolved, crate::images::PullError>,
    },
    /// The node evicts the pod (memory pressure).
    Evict {
        message: String,
    },
    /// The pod's toleration of a `NoExecute` taint ran out (its deletion follows).
    TaintEviction,
    /// The log's tail for an instance whose termination-message file was empty
    /// (`FallbackToLogsOnError`).
    TerminationMessage {
        index: usize,
        instance: i32,
        text: String,
    },
    /// The named container's image changed (a pod update): it restarts with the new module.
    SetImage {
        container: String,
        /// The `.wasm` file, or an empty path and the registry image to pull.
        image: std::path::PathBuf,
        pull: Option<Box<crate::spec::ImagePull>>,
        /// The container's argv as its new spec has it (`None`: unchanged).
        argv: Option<Vec<String>>,
        reply: oneshot::Sender<Result<(), ContainerError>>,
    },
    /// The sandbox of the named running container, to run a command in (`kubectl exec`).
    Exec {
        container: String,
        reply: oneshot::Sender<Result<std::sync::Arc<crate::container::Sandbox>, ContainerError>>,
    },
}

impl PodTask {
    /// Acts on one message.
    pub(super) fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Exited {
                index,
                id,
                exit,
                at,
            } => self.exited(index, id, exit, at),
            Msg::Delete { grace } => self.delete(grace),
            Msg::Hook {
                index,
                id,
                hook,
                result,
            } => self.hook_done(index, id, hook, result),
            Msg::Probe {
                index,
                id,
                kind,
                failure,
                verdict,
            } => self.probed(index, id, kind, failure, verdict),
            Msg::Exec { container, reply } => self.exec(&container, reply),
            Msg::TerminationMessage {
                index,
                instance,
                text,
            } => self.termination_message(index, instance, text),
            Msg::SetImage {
                container,
                image,
                pull,
                argv,
                reply,
            } => {
                let _ = reply.send(self.set_image(&container, image, pull, argv));
            }
            Msg::Admit => self.admit(),
            Msg::Unschedulable { message, nominated } => {
                if !self.stage.admitted() {
                    self.pod_event(
                        EventType::Warning,
                        Reason::FailedScheduling,
                        message.clone(),
                        None,
                    );
                    self.stage = Stage::Pending {
                        message: Some(message),
                        nominated,
                    };
                }
            }
            Msg::Preempted { message } => {
                self.pod_event(EventType::Normal, Reason::Preempted, message, None);
                let why = "wasmpod: preempting to accommodate a higher priority pod";
                self.disruption = Some(Box::new(("PreemptionByScheduler", why.into())));
            }
            Msg::Pulled { index, result } => self.pulled(index, result),
            Msg::TaintEviction => {
                let why = "Taint manager: deleting due to NoExecute taint";
                self.disruption = Some(Box::new(("DeletionByTaintManager", why.into())));
            }
            // The kubelet's hard eviction: a grace period of one second.
            Msg::Evict { message } => self.evict(message, Duration::from_secs(1)),
        }
    }
}
