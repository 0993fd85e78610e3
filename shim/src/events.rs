//! The task service's events: where they go ([`EventSink`]), and containerd's publisher as one
//! ([`Events`]: in order, from a thread of their own, each a ttrpc call to containerd).

use std::sync::mpsc;

use containerd_shim::event::Event;
use containerd_shim::protos::events::task::{TaskExit, TaskOOM};
use containerd_shim::protos::protobuf::MessageField;
use containerd_shim::protos::protobuf::well_known_types::timestamp::Timestamp;
use containerd_shim::publisher::RemotePublisher;

use crate::process::{Exited, Outcome};

/// Where the task service's events go, in the order sent: containerd's publisher ([`Events`]),
/// or a list in the service's tests.
pub(crate) trait EventSink: Clone + Send + Sync + 'static {
    /// Sends `event` after those sent before it.
    fn send(&self, event: impl Event + Send + 'static);

    /// Returns once every event sent so far has gone out.
    fn flush(&self);

    /// A process ended: `TaskOOM` first when its memory limit ended it (the kubelet then
    /// reports `OOMKilled`), then `TaskExit`; returns once both have gone out.
    fn exited(&self, container: &str, id: &str, pid: u32, outcome: Outcome, end: Exited) {
        // Only the container's own end is its OOM (an exec's is the exec's exit code).
        if outcome.oom && id == container {
            self.send(TaskOOM {
                container_id: container.to_owned(),
                ..Default::default()
            });
        }
        self.send(TaskExit {
            container_id: container.to_owned(),
            id: id.to_owned(),
            pid,
            exit_status: end.code,
            exited_at: MessageField::some(Timestamp::from(end.at)),
            ..Default::default()
        });
        self.flush();
    }
}

/// containerd's events, published in order from a thread of their own (publishing is a ttrpc
/// call to containerd).
#[derive(Clone)]
pub(crate) struct Events(mpsc::Sender<Message>);

enum Message {
    Event(Box<dyn EventBox>),
    Flush(mpsc::Sender<()>),
}

trait EventBox: Send {
    fn publish(self: Box<Self>, publisher: &RemotePublisher, namespace: &str);
}

impl<E: Event + Send + 'static> EventBox for E {
    fn publish(self: Box<Self>, publisher: &RemotePublisher, namespace: &str) {
        let topic = self.topic();
        if let Err(e) = publisher.publish(Default::default(), &topic, namespace, self) {
            log::warn!("cannot publish {topic}: {e}");
        }
    }
}

impl Events {
    pub(crate) fn start(publisher: RemotePublisher, namespace: String) -> Events {
        let (tx, rx) = mpsc::channel::<Message>();
        std::thread::Builder::new()
            .name("wasmpod-events".into())
            .spawn(move || {
                for message in rx {
                    match message {
                        Message::Event(event) => event.publish(&publisher, &namespace),
                        Message::Flush(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            })
            .expect("the events thread");
        Events(tx)
    }
}

impl EventSink for Events {
    fn send(&self, event: impl Event + Send + 'static) {
        let _ = self.0.send(Message::Event(Box::new(event)));
    }

    fn flush(&self) {
        let (done, published) = mpsc::channel();
        if self.0.send(Message::Flush(done)).is_ok() {
            let _ = published.recv();
        }
    }
}
