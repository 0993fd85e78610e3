//! One direction of a virtual TCP connection: a bounded in-memory byte pipe.
//!
//! The writer may put at most [`CAPACITY`] unread bytes into the pipe; past that it waits for the
//! reader, which is what makes a slow reader slow its writer down while memory stays bounded.
//! Both ends are usable from the guest (as `wasi:io` streams) and from the host (as tokio
//! `AsyncRead`/`AsyncWrite`, for published ports and network probes).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use wasmtime_wasi::p2::{InputStream, OutputStream, Pollable, StreamError, StreamResult};

/// The most unread bytes one direction of a connection holds (Linux's default socket buffers
/// are of the same order).
pub(crate) const CAPACITY: usize = 256 * 1024;

#[derive(Default)]
struct State {
    buf: BytesMut,
    /// The writer is gone or shut down: the reader sees end-of-stream once `buf` is drained.
    write_closed: bool,
    /// The reader is gone or shut down: writes fail and buffered bytes are dropped.
    read_closed: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

/// Why [`Pipe::put`] took nothing.
enum Refused {
    Closed,
    Full,
}

/// The shared state of one pipe. Sockets keep a handle to close it on `shutdown`.
#[derive(Default)]
pub(crate) struct Pipe(Mutex<State>);

impl Pipe {
    /// A fresh pipe and its two ends.
    pub(crate) fn new() -> (Arc<Pipe>, PipeReader, PipeWriter) {
        let pipe = Arc::new(Pipe::default());
        let reader = PipeReader(pipe.clone());
        let writer = PipeWriter(pipe.clone());
        (pipe, reader, writer)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends the stream for the reader after what is buffered (`shutdown(send)`).
    pub(crate) fn close_write(&self) {
        let mut s = self.lock();
        s.write_closed = true;
        if let Some(w) = s.reader.take() {
            w.wake();
        }
    }

    /// Stops reading (`shutdown(receive)`): buffered and future bytes are discarded.
    pub(crate) fn close_read(&self) {
        let mut s = self.lock();
        s.read_closed = true;
        s.buf = BytesMut::new();
        if let Some(w) = s.writer.take() {
            w.wake();
        }
    }

    /// Takes up to `max` bytes. `Ready(None)` is end of stream; `Pending` (with `cx`) registers
    /// the reader's waker.
    fn poll_take(&self, cx: Option<&mut Context<'_>>, max: usize) -> Poll<Option<Bytes>> {
        let mut s = self.lock();
        if !s.buf.is_empty() && max > 0 {
            let n = max.min(s.buf.len());
            let bytes = s.buf.split_to(n).freeze();
            if let Some(w) = s.writer.take() {
                w.wake();
            }
            return Poll::Ready(Some(bytes));
        }
        if s.write_closed || s.read_closed {
            return Poll::Ready(None);
        }
        if max == 0 {
            return Poll::Ready(Some(Bytes::new()));
        }
        if let Some(cx) = cx {
            s.reader = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Waits until there is something to read or the stream ended.
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.lock();
        if !s.buf.is_empty() || s.write_closed || s.read_closed {
            return Poll::Ready(());
        }
        s.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    /// How many bytes may be written now; `Err` once the reader is gone.
    fn poll_room(&self, cx: Option<&mut Context<'_>>) -> Poll<Result<usize, ()>> {
        let mut s = self.lock();
        if s.read_closed || s.write_closed {
            return Poll::Ready(Err(()));
        }
        let room = CAPACITY.saturating_sub(s.buf.len());
        if room > 0 {
            return Poll::Ready(Ok(room));
        }
        if let Some(cx) = cx {
            s.writer = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Appends bytes that fit in the room left: `Err(Closed)` once the reader is gone,
    /// `Err(Full)` when they do not fit (the writer wrote more than it was permitted).
    fn put(&self, bytes: &[u8]) -> Result<(), Refused> {
        let mut s = self.lock();
        if s.read_closed || s.write_closed {
            return Err(Refused::Closed);
        }
        if s.buf.len() + bytes.len() > CAPACITY {
            return Err(Refused::Full);
        }
        s.buf.extend_from_slice(bytes);
        if let Some(w) = s.reader.take() {
            w.wake();
        }
        Ok(())
    }
}

/// The reading end; dropping it is `shutdown(receive)`.
pub(crate) struct PipeReader(Arc<Pipe>);

/// The writing end; dropping it is `shutdown(send)`.
pub(crate) struct PipeWriter(Arc<Pipe>);

impl Drop for PipeReader {
    fn drop(&mut self) {
        self.0.close_read();
    }
}

impl Drop for PipeWriter {
    fn drop(&mut self) {
        self.0.close_write();
    }
}

impl PipeReader {
    /// Waits until there is something to read or the stream ended.
    pub(crate) fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.0.poll_readable(cx)
    }

    /// Reads into `buf`: `Ready(0)` is the end of the stream.
    pub(crate) fn poll_read_into(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<usize> {
        match self.0.poll_take(Some(cx), buf.len()) {
            Poll::Ready(Some(bytes)) => {
                buf[..bytes.len()].copy_from_slice(&bytes);
                Poll::Ready(bytes.len())
            }
            Poll::Ready(None) => Poll::Ready(0),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl PipeWriter {
    /// Waits until there is room to write: `Ready(false)` once the reader is gone.
    pub(crate) fn poll_writable(&self, cx: &mut Context<'_>) -> Poll<bool> {
        self.0.poll_room(Some(cx)).map(|room| room.is_ok())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for PipeReader {
    async fn ready(&mut self) {
        std::future::poll_fn(|cx| self.0.poll_readable(cx)).await
    }
}

impl InputStream for PipeReader {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        match self.0.poll_take(None, size) {
            Poll::Ready(Some(bytes)) => Ok(bytes),
            Poll::Ready(None) => Err(StreamError::Closed),
            Poll::Pending => Ok(Bytes::new()),
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for PipeWriter {
    async fn ready(&mut self) {
        let _ = std::future::poll_fn(|cx| self.0.poll_room(Some(cx))).await;
    }
}

impl OutputStream for PipeWriter {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        match self.0.put(&bytes) {
            Ok(()) => Ok(()),
            Err(Refused::Closed) => Err(StreamError::Closed),
            Err(Refused::Full) => Err(StreamError::trap("write beyond the permitted size")),
        }
    }

    fn flush(&mut self) -> StreamResult<()> {
        // Bytes are visible to the reader as soon as they are written.
        match self.0.poll_room(None) {
            Poll::Ready(Err(())) => Err(StreamError::Closed),
            _ => Ok(()),
        }
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        match self.0.poll_room(None) {
            Poll::Ready(Ok(room)) => Ok(room),
            Poll::Ready(Err(())) => Err(StreamError::Closed),
            Poll::Pending => Ok(0),
        }
    }
}

impl AsyncRead for PipeReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.0.poll_take(Some(cx), buf.remaining()) {
            Poll::Ready(Some(bytes)) => {
                buf.put_slice(&bytes);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(None) => Poll::Ready(Ok(())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for PipeWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.0.poll_room(Some(cx)) {
            Poll::Ready(Ok(room)) => {
                let n = room.min(buf.len());
                match self.0.put(&buf[..n]) {
                    Ok(()) => Poll::Ready(Ok(n)),
                    Err(_) => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                }
            }
            Poll::Ready(Err(())) => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.close_write();
        Poll::Ready(Ok(()))
    }
}

/// Both ends of a connection as seen by the host: what published ports and network probes use.
pub(crate) struct HostStream {
    pub(crate) reader: PipeReader,
    pub(crate) writer: PipeWriter,
}

impl AsyncRead for HostStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.reader).poll_read(cx, buf)
    }
}

impl AsyncWrite for HostStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.writer).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.writer).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.writer).poll_shutdown(cx)
    }
}

/// A connection from the host into a pod's network ([`crate::PodHandle::connect`]), as
/// `kubectl port-forward` makes one: read and write it as a TCP stream; shutting down its
/// writing half is the guest's end of file.
#[derive(Debug)]
pub struct PodConnection(pub(crate) HostStream);

impl std::fmt::Debug for HostStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostStream").finish_non_exhaustive()
    }
}

impl AsyncRead for PodConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for PodConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[test]
    fn a_full_pipe_refuses_more_until_read() {
        let (_pipe, mut reader, mut writer) = Pipe::new();
        assert_eq!(OutputStream::check_write(&mut writer).unwrap(), CAPACITY);
        OutputStream::write(&mut writer, Bytes::from(vec![7; CAPACITY])).unwrap();
        assert_eq!(OutputStream::check_write(&mut writer).unwrap(), 0);
        assert!(OutputStream::write(&mut writer, Bytes::from_static(b"x")).is_err());
        assert_eq!(InputStream::read(&mut reader, 1000).unwrap().len(), 1000);
        assert_eq!(OutputStream::check_write(&mut writer).unwrap(), 1000);
    }

    #[test]
    fn end_of_stream_after_the_buffered_bytes() {
        let (_pipe, mut reader, mut writer) = Pipe::new();
        OutputStream::write(&mut writer, Bytes::from_static(b"abc")).unwrap();
        drop(writer);
        assert_eq!(&InputStream::read(&mut reader, 10).unwrap()[..], b"abc");
        assert!(matches!(
            InputStream::read(&mut reader, 10),
            Err(StreamError::Closed)
        ));
    }

    #[test]
    fn writing_to_a_closed_reader_fails() {
        let (_pipe, reader, mut writer) = Pipe::new();
        drop(reader);
        assert!(matches!(
            OutputStream::check_write(&mut writer),
            Err(StreamError::Closed)
        ));
    }

    #[tokio::test]
    async fn host_ends_carry_bytes_with_backpressure() {
        let (_pipe, mut reader, mut writer) = Pipe::new();
        let total = 3 * CAPACITY + 17;
        let send = tokio::spawn(async move {
            writer.write_all(&vec![1u8; total]).await.unwrap();
        });
        let mut got = Vec::new();
        reader.read_to_end(&mut got).await.unwrap();
        send.await.unwrap();
        assert_eq!(got.len(), total);
    }
}
