//! The response body: a whole buffer, or a stream of chunks (watches, followed logs) that ends
//! when its sender is dropped. A stream holds at most [`STREAM_BUFFER`] chunks and
//! [`STREAM_BYTES`] bytes for a client that reads slowly: past the chunks its producer waits,
//! past the bytes the stream ends (as the API server ends a watch that falls behind; the client
//! lists again).

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

#[derive(Debug)]
pub(crate) enum Body {
    Full(Option<Bytes>),
    Stream {
        rx: mpsc::Receiver<Bytes>,
        queued: Arc<AtomicUsize>,
    },
}

/// The producer's end of a streamed body.
#[derive(Debug)]
pub(crate) struct Sender {
    tx: mpsc::Sender<Bytes>,
    queued: Arc<AtomicUsize>,
}

/// Why a chunk was not sent: the client left, or did not read what it was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    Closed,
    TooSlow,
}

impl Sender {
    /// Sends a chunk, waiting while [`STREAM_BUFFER`] chunks are queued.
    pub(crate) async fn send(&self, bytes: Bytes) -> Result<(), Ended> {
        let len = bytes.len();
        let queued = self.queued.fetch_add(len, Ordering::AcqRel);
        if queued > 0 && queued.saturating_add(len) > STREAM_BYTES {
            self.queued.fetch_sub(len, Ordering::AcqRel);
            return Err(Ended::TooSlow);
        }
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
        let queued = Arc::new(AtomicUsize::new(0));
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
                    queued.fetch_sub(b.len(), Ordering::AcqRel);
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
