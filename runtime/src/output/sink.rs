//! What a guest writes to stdout and stderr: cut into lines (long ones into partial records, and
//! the start of a line the guest flushed before ending it sent as a piece of its own)
//! and sent to the pod's log writer in chunks, through a bounded channel that slows a guest that
//! floods output to the writer's speed.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::AsyncWrite;
use tokio::sync::mpsc;
use tokio_util::sync::PollSender;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

use super::{Chunk, MAX_LINE, Stream};

/// Where one container instance's stdout or stderr goes.
#[derive(Clone)]
pub(crate) struct OutputSink {
    pub(super) container: Arc<str>,
    pub(super) instance: i32,
    pub(super) stream: Stream,
    pub(super) tx: mpsc::Sender<Box<Chunk>>,
}

impl IsTerminal for OutputSink {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for OutputSink {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(LineWriter {
            sink: self.clone(),
            partial: Vec::new(),
            tx: PollSender::new(self.tx.clone()),
        })
    }
}

struct LineWriter {
    sink: OutputSink,
    partial: Vec<u8>,
    tx: PollSender<Box<Chunk>>,
}

impl LineWriter {
    fn chunk(&self, lines: Vec<(bool, String)>, flushed: bool) -> Box<Chunk> {
        Box::new(Chunk {
            container: self.sink.container.clone(),
            instance: self.sink.instance,
            stream: self.sink.stream,
            time: jiff::Timestamp::now(),
            lines,
            flushed,
            end: false,
            written: None,
        })
    }

    /// Moves complete lines (and over-long pieces) out of the partial buffer.
    fn take_lines(&mut self) -> Vec<(bool, String)> {
        let mut lines = Vec::new();
        let mut start = 0;
        while let Some(nl) = self.partial[start..].iter().position(|&b| b == b'\n') {
            let end = start + nl;
            let line = &self.partial[start..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            lines.push((false, String::from_utf8_lossy(line).into_owned()));
            start = end + 1;
        }
        self.partial.drain(..start);
        while self.partial.len() >= MAX_LINE {
            let piece: Vec<u8> = self.partial.drain(..MAX_LINE).collect();
            lines.push((true, String::from_utf8_lossy(&piece).into_owned()));
        }
        lines
    }
}

impl AsyncWrite for LineWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        if ready!(this.tx.poll_reserve(cx)).is_err() {
            // Nobody records output any more (the pod is going away): discard it.
            return Poll::Ready(Ok(buf.len()));
        }
        let n = buf.len().min(MAX_LINE);
        this.partial.extend_from_slice(&buf[..n]);
        let lines = this.take_lines();
        if lines.is_empty() {
            this.tx.abort_send();
        } else {
            let chunk = this.chunk(lines, false);
            let _ = this.tx.send_item(chunk);
        }
        Poll::Ready(Ok(n))
    }

    /// A flush makes what the guest wrote visible, also the start of a line it has not ended (a
    /// prompt before it reads stdin): that goes to the writer as a flushed piece, which becomes a
    /// partial record unless the rest of the line follows within a moment.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let whole = match std::str::from_utf8(&this.partial) {
            Ok(_) => this.partial.len(),
            // Keep a character cut at the end for the write that completes it.
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => this.partial.len(),
        };
        if whole == 0 {
            return Poll::Ready(Ok(()));
        }
        if ready!(this.tx.poll_reserve(cx)).is_err() {
            this.partial.clear();
            return Poll::Ready(Ok(()));
        }
        let piece: Vec<u8> = this.partial.drain(..whole).collect();
        let chunk = this.chunk(
            vec![(true, String::from_utf8_lossy(&piece).into_owned())],
            true,
        );
        let _ = this.tx.send_item(chunk);
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if !self.partial.is_empty() {
            let line = String::from_utf8_lossy(&self.partial).into_owned();
            let chunk = self.chunk(vec![(false, line)], false);
            let _ = self.sink.tx.try_send(chunk);
        }
    }
}
