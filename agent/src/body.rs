//! The response body: a whole buffer, or a stream of chunks (watches, followed logs) that ends
//! when its sender is dropped. A stream holds at most [`STREAM_BUFFER`] chunks and
//! [`STREAM_BYTES`] bytes for a client that reads slowly: past either its producer waits, and
//! past the bytes for longer than [`STREAM_STALL`] the stream ends (as the API server ends a
//! watcher that cannot take its events in time; the client lists again).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::Frame;
use tokio::sync::mpsc;

/// How many chunks a stream holds for a client that reads slowly before its producer waits.
pub(crate) const STREAM_BUFFER: usize = 64;
/// How many bytes a stream holds for a client that does not read before it is ended (a chunk
/// larger than this is still sent when nothing else waits).
pub(crate) const STREAM_BYTES: usize = 4 << 20;
/// How long a producer waits for a client to read what [`STREAM_BYTES`] holds.
pub(crate) const STREAM_STALL: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Debug)]
pub(crate) enum Body {
    Full(Option<Bytes>),
    Stream {
        rx: mpsc::Receiver<Bytes>,
        queued: Arc<Queued>,
    },
}

/// The bytes a stream holds unread, and a wake-up for a producer waiting for room.
#[derive(Debug, Default)]
pub(crate) struct Queued {
    bytes: AtomicUsize,
    read: tokio::sync::Notify,
}

/// The producer's end of a streamed body.
#[derive(Debug)]
pub(crate) struct Sender {
    tx: mpsc::Sender<Bytes>,
    queued: Arc<Queued>,
}

/// Why a chunk was not sent: the client left, or did not read what it was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    Closed,
    TooSlow,
}

impl Sender {
    /// Sends a chunk, waiting while [`STREAM_BUFFER`] chunks or [`STREAM_BYTES`] bytes are
    /// queued; `TooSlow` when the client read nothing for [`STREAM_STALL`].
    pub(crate) async fn send(&self, bytes: Bytes) -> Result<(), Ended> {
        let len = bytes.len();
        let deadline = tokio::time::Instant::now() + STREAM_STALL;
        loop {
            let read = self.queued.read.notified();
            let queued = self.queued.bytes.load(Ordering::Acquire);
            // A chunk larger than the bound goes when nothing else waits.
            if queued == 0 || queued.saturating_add(len) <= STREAM_BYTES {
                break;
            }
            tokio::select! {
                () = read => {}
                () = tokio::time::sleep_until(deadline) => return Err(Ended::TooSlow),
                () = self.tx.closed() => return Err(Ended::Closed),
            }
        }
        self.queued.bytes.fetch_add(len, Ordering::AcqRel);
        self.tx.send(bytes).await.map_err(|_| Ended::Closed)
    }

    /// Waits until the client has left.
    pub(crate) async fn closed(&self) {
        self.tx.closed().await;
    }
}

impl Body {
    pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
        Body::Full(Some(bytes.into()))
    }

    /// A streamed body and the sender of its chunks.
    pub(crate) fn channel() -> (Sender, Body) {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let queued = Arc::new(Queued::default());
        (
            Sender {
                tx,
                queued: queued.clone(),
            },
            Body::Stream { rx, queued },
        )
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream { rx, queued } => rx.poll_recv(cx).map(|b| {
                b.map(|b| {
                    queued.bytes.fetch_sub(b.len(), Ordering::AcqRel);
                    queued.read.notify_waiters();
                    Ok(Frame::data(b))
                })
            }),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            Body::Full(Some(b)) => hyper::body::SizeHint::with_exact(b.len() as u64),
            Body::Full(None) => hyper::body::SizeHint::with_exact(0),
            Body::Stream { .. } => hyper::body::SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A client that reads slowly but reads gets everything, however large the chunks; one that
    /// stops reading ends the stream after the stall.
    #[tokio::test]
    async fn slow_readers_get_everything_and_stalled_ones_are_ended() {
        let (tx, mut body) = Body::channel();
        let producer = tokio::spawn(async move {
            for _ in 0..20 {
                tx.send(Bytes::from(vec![0u8; 1 << 20])).await?;
            }
            Ok::<_, Ended>(())
        });
        let mut got = 0;
        while let Some(frame) = body.frame().await {
            got += frame.unwrap().into_data().unwrap().len();
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(got, 20 << 20);
        assert_eq!(producer.await.unwrap(), Ok(()));

        let (tx, _unread) = Body::channel();
        let mut sent = 0;
        let ended = loop {
            match tx.send(Bytes::from(vec![0u8; 1 << 20])).await {
                Ok(()) => sent += 1,
                Err(why) => break why,
            }
        };
        assert_eq!(ended, Ended::TooSlow);
        assert_eq!(sent, STREAM_BYTES >> 20);
    }
}
