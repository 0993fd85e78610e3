//! containerd's events, as the shim sends them: in order, from a thread of their own, each
//! a ttrpc call to containerd's publisher.

use std::sync::mpsc;

use containerd_shim::event::Event;
use containerd_shim::protos::events::task::{TaskExit, TaskOOM};
use containerd_shim::protos::protobuf::MessageField;
use containerd_shim::protos::protobuf::well_known_types::timestamp::Timestamp;
use containerd_shim::publisher::RemotePublisher;

use crate::process::{Exited, Outcome};

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

    pub(crate) fn send(&self, event: impl Event + Send + 'static) {
        let _ = self.0.send(Message::Event(Box::new(event)));
    }

    /// Waits until every event sent so far is published.
    pub(crate) fn flush(&self) {
        let (done, published) = mpsc::channel();
        if self.0.send(Message::Flush(done)).is_ok() {
            let _ = published.recv();
        }
    }

    /// A process ended: `TaskOOM` first when its memory limit ended it (the kubelet then
    /// reports `OOMKilled`), then `TaskExit`; returns once both are published.
    pub(crate) fn exited(
        &self,
        container: &str,
        id: &str,
        pid: u32,
        outcome: Outcome,
        end: Exited,
    ) {
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
