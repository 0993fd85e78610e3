//! What a guest writes to stdout and stderr: cut into lines (long ones into partial records, and
//! the start of a line the guest flushed before ending it sent as a piece of its own)
//! and sent to the pod's log writer in chunks, through a bounded channel that slows a guest that
//! floods output to the writer's speed. A preview 1 or 0.2 guest's write sends its lines from
//! the guest's own call; a 0.3 guest's goes through wasmtime-wasi's `AsyncWrite` driving.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use tokio::sync::mpsc::{OwnedPermit, error::TrySendError};
use tokio_util::sync::PollSender;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi_io::poll::Pollable;
use wasmtime_wasi_io::streams::{OutputStream, StreamError, StreamResult};

use super::{Chunk, MAX_LINE, Stream, ToWriter};

/// Where one container instance's stdout or stderr goes.
#[derive(Clone)]
pub(crate) struct OutputSink {
    pub(super) container: Arc<str>,
    pub(super) instance: i32,
    pub(super) stream: Stream,
    pub(super) tx: Arc<ToWriter>,
}

impl IsTerminal for OutputSink {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for OutputSink {
    /// A preview 1 or 0.2 guest's stream: it sends its chunks itself, as the guest writes.
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(LineStream {
            lines: Lines::new(self.clone()),
            flush: false,
            closed: false,
        })
    }

    /// A 0.3 guest's stream, which wasmtime-wasi drives as an `AsyncWrite`.
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(LineWriter {
            lines: Lines::new(self.clone()),
            tx: PollSender::new(self.tx.sender().clone()),
        })
    }
}

/// What a guest wrote of a line it has not ended yet, and how its lines become chunks. What is
/// left at the end (the stream dropped with the guest's store) is sent as the last line.
struct Lines {
    sink: OutputSink,
    partial: Vec<u8>,
    /// `partial` holds a complete line or an over-long piece: known from each write's own bytes,
    /// so that a guest writing a long line in many small pieces is not scanned again each time.
    complete: bool,
}

impl Lines {
    fn new(sink: OutputSink) -> Lines {
        Lines {
            sink,
            partial: Vec::new(),
            complete: false,
        }
    }

    /// Takes what the guest wrote.
    fn push(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        self.complete |= self.partial.len() >= MAX_LINE || bytes.contains(&b'\n');
    }

    /// Drops what the guest wrote (nobody records it).
    fn clear(&mut self) {
        self.partial.clear();
        self.complete = false;
    }

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

    /// Are there complete lines (or over-long pieces) to send?
    fn has_lines(&self) -> bool {
        self.complete
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
        self.complete = false;
        lines
    }

    /// How much of the partial line a flush sends: all of it but a character cut at its end,
    /// kept for the write that completes it.
    fn flushable(&self) -> usize {
        match std::str::from_utf8(&self.partial) {
            Ok(_) => self.partial.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.partial.len(),
        }
    }

    /// The flushed start of the line, as a chunk of its own.
    fn take_flushed(&mut self) -> Box<Chunk> {
        let piece: Vec<u8> = self.partial.drain(..self.flushable()).collect();
        self.chunk(
            vec![(true, String::from_utf8_lossy(&piece).into_owned())],
            true,
        )
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        if !self.partial.is_empty() {
            let line = String::from_utf8_lossy(&self.partial).into_owned();
            let chunk = self.chunk(vec![(false, line)], false);
            let _ = self.sink.tx.sender().try_send(chunk);
        }
    }
}

/// A guest's stdout or stderr as a WASI output stream that sends its chunks from the guest's
/// own calls: no task of its own between the guest and the log writer. A write is taken whole
/// (at most [`MAX_LINE`] bytes, what `check_write` permits); its complete lines go to the
/// writer at once when the channel has room, and otherwise wait in the stream, which then
/// permits no more until `ready` has sent them: a guest that floods output waits for the
/// writer.
struct LineStream {
    lines: Lines,
    /// A flush was asked for and the flushed piece is not sent yet.
    flush: bool,
    /// Nobody records output any more (the pod is going away): what comes is discarded.
    closed: bool,
}

impl LineStream {
    /// Has the stream something to send before it takes more?
    fn pending(&self) -> bool {
        !self.closed && (self.lines.has_lines() || (self.flush && self.lines.flushable() > 0))
    }

    /// Sends what is pending with `permit`, and more while the channel has room.
    fn send(&mut self, permit: OwnedPermit<Box<Chunk>>) {
        let mut permit = Some(permit);
        while self.pending() {
            let permit = match permit.take() {
                Some(permit) => permit,
                None => match self.lines.sink.tx.sender().clone().try_reserve_owned() {
                    Ok(permit) => permit,
                    Err(TrySendError::Full(_)) => return,
                    Err(TrySendError::Closed(_)) => return self.close(),
                },
            };
            let chunk = if self.lines.has_lines() {
                let lines = self.lines.take_lines();
                self.lines.chunk(lines, false)
            } else {
                self.flush = false;
                self.lines.take_flushed()
            };
            permit.send(chunk);
        }
        self.flush = false;
    }

    /// Sends what is pending as far as the channel has room now.
    fn send_now(&mut self) {
        if !self.pending() {
            self.flush = false;
            return;
        }
        match self.lines.sink.tx.sender().clone().try_reserve_owned() {
            Ok(permit) => self.send(permit),
            Err(TrySendError::Full(_)) => {}
            Err(TrySendError::Closed(_)) => self.close(),
        }
    }

    fn close(&mut self) {
        self.closed = true;
        self.flush = false;
        self.lines.clear();
    }
}

impl OutputStream for LineStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        if self.closed {
            return Ok(());
        }
        if self.pending() || bytes.len() > MAX_LINE {
            return Err(StreamError::trap("write not permitted by check-write"));
        }
        self.lines.push(&bytes);
        self.send_now();
        Ok(())
    }

    /// Makes what the guest wrote visible, also the start of a line it has not ended (a prompt
    /// before it reads stdin): that goes to the writer as a flushed piece, which becomes a
    /// partial record unless the rest of the line follows within a moment.
    fn flush(&mut self) -> StreamResult<()> {
        self.flush = true;
        self.send_now();
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.send_now();
        Ok(if self.pending() { 0 } else { MAX_LINE })
    }
}

#[async_trait::async_trait]
impl Pollable for LineStream {
    async fn ready(&mut self) {
        while self.pending() {
            match self.lines.sink.tx.sender().clone().reserve_owned().await {
                Ok(permit) => self.send(permit),
                Err(_) => self.close(),
            }
        }
    }
}

/// A 0.3 guest's stream, written through `AsyncWrite`.
struct LineWriter {
    lines: Lines,
    tx: PollSender<Box<Chunk>>,
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
        this.lines.push(&buf[..n]);
        if this.lines.has_lines() {
            let lines = this.lines.take_lines();
            let chunk = this.lines.chunk(lines, false);
            let _ = this.tx.send_item(chunk);
        } else {
            this.tx.abort_send();
        }
        Poll::Ready(Ok(n))
    }

    /// A flush sends the start of a line not ended yet, as [`LineStream`]'s does.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.lines.flushable() == 0 {
            return Poll::Ready(Ok(()));
        }
        if ready!(this.tx.poll_reserve(cx)).is_err() {
            this.lines.clear();
            return Poll::Ready(Ok(()));
        }
        let chunk = this.lines.take_flushed();
        let _ = this.tx.send_item(chunk);
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::*;

    fn stream(room: usize) -> (Box<dyn OutputStream>, mpsc::Receiver<Box<Chunk>>) {
        let (tx, rx) = mpsc::channel(room);
        let sink = OutputSink {
            container: "c".into(),
            instance: 0,
            stream: Stream::Stdout,
            tx: ToWriter::to(tx),
        };
        (sink.p2_stream(), rx)
    }

    fn lines(chunk: &Chunk) -> Vec<(bool, &str)> {
        chunk.lines.iter().map(|(p, l)| (*p, l.as_str())).collect()
    }

    /// A guest's lines reach the writer from its own write; with the channel full they wait in
    /// the stream, which permits nothing more until `ready` has sent them, in order.
    #[tokio::test]
    async fn lines_go_from_the_write_itself_and_a_full_channel_holds_the_guest() {
        let (mut out, mut rx) = stream(1);
        assert_eq!(out.check_write().unwrap(), MAX_LINE);
        out.write(Bytes::from_static(b"one\ntw")).unwrap();
        assert_eq!(lines(&rx.try_recv().unwrap()), [(false, "one")]);

        // A second chunk fills the channel; the third waits in the stream.
        out.write(Bytes::from_static(b"o\n")).unwrap();
        assert_eq!(out.check_write().unwrap(), MAX_LINE);
        out.write(Bytes::from_static(b"three\n")).unwrap();
        assert_eq!(
            out.check_write().unwrap(),
            0,
            "a full channel permits nothing"
        );
        assert!(out.write(Bytes::from_static(b"x")).is_err());
        assert_eq!(lines(&rx.try_recv().unwrap()), [(false, "two")]);
        out.ready().await;
        assert_eq!(lines(&rx.try_recv().unwrap()), [(false, "three")]);
        assert_eq!(out.check_write().unwrap(), MAX_LINE);

        // A flush sends the start of a line as a flushed piece; the rest is sent at the end.
        out.write(Bytes::from_static(b"> ")).unwrap();
        out.flush().unwrap();
        let piece = rx.try_recv().unwrap();
        assert!(piece.flushed);
        assert_eq!(lines(&piece), [(true, "> ")]);
        out.write(Bytes::from_static(b"last")).unwrap();
        drop(out);
        assert_eq!(lines(&rx.try_recv().unwrap()), [(false, "last")]);
    }

    /// A line written in pieces is sent once, whole, with its end; one written past the record
    /// limit in pieces is sent as a partial record once the limit is reached.
    #[test]
    fn a_line_written_in_pieces_is_sent_whole() {
        let (mut out, mut rx) = stream(4);
        for piece in [&b"a"[..], b"b", b"c"] {
            out.write(Bytes::copy_from_slice(piece)).unwrap();
            assert!(rx.try_recv().is_err(), "sent before its end");
        }
        out.write(Bytes::from_static(b"d\ne")).unwrap();
        assert_eq!(lines(&rx.try_recv().unwrap()), [(false, "abcd")]);

        let half = vec![b'x'; MAX_LINE / 2];
        out.write(Bytes::copy_from_slice(&half)).unwrap();
        assert!(rx.try_recv().is_err());
        out.write(Bytes::copy_from_slice(&half)).unwrap();
        let long = rx.try_recv().unwrap();
        assert_eq!(long.lines.len(), 1);
        assert!(long.lines[0].0, "a partial record");
        assert_eq!(long.lines[0].1.len(), MAX_LINE);
        assert!(long.lines[0].1.starts_with("ex"));
    }

    /// Nobody records output any more: what the guest writes is taken and dropped.
    #[test]
    fn output_nobody_records_is_dropped() {
        let (mut out, rx) = stream(1);
        drop(rx);
        out.write(Bytes::from_static(b"lost\n")).unwrap();
        assert_eq!(out.check_write().unwrap(), MAX_LINE);
        out.write(Bytes::from_static(b"lost too\n")).unwrap();
    }
}
