//! A container's stdin (`stdin: true`): a bounded pipe whose reading end is the instance's WASI
//! stdin and whose writing end attachers take turns at ([`ContainerStdin`]), as `kubectl attach
//! -i` and `kubectl run -i` write to a container's stdin through the kubelet.
//!
//! The pipe holds [`PIPE_BUFFER`] bytes; a writer past it waits for the guest to read. It ends
//! (the guest reads end of file) when a [`ContainerStdin`] is closed, or, for `stdinOnce`, when
//! the first one is dropped. The instance's end drops the reading end: writers, waiting or not,
//! then fail.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncWriteExt, DuplexStream};

use crate::spec::StdinMode;

/// What the pipe buffers between an attacher and the guest.
pub(crate) const PIPE_BUFFER: usize = 64 * 1024;

/// One instance's stdin pipe.
#[derive(Debug)]
pub(crate) struct StdinPipe {
    once: bool,
    /// Taken by the instance when it starts.
    reader: Mutex<Option<DuplexStream>>,
    /// `None` once the pipe was closed.
    writer: tokio::sync::Mutex<Option<DuplexStream>>,
}

impl StdinPipe {
    pub(crate) fn new(mode: StdinMode) -> Arc<StdinPipe> {
        let (reader, writer) = tokio::io::duplex(PIPE_BUFFER);
        Arc::new(StdinPipe {
            once: mode.once,
            reader: Mutex::new(Some(reader)),
            writer: tokio::sync::Mutex::new(Some(writer)),
        })
    }

    /// The reading end, for the instance's WASI context (once).
    pub(crate) fn reader(&self) -> Option<DuplexStream> {
        self.reader.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// A writer to a running container's stdin ([`crate::PodHandle::attach_stdin`]). Several may be
/// held at once; their writes interleave whole.
#[derive(Debug)]
pub struct ContainerStdin {
    pipe: Arc<StdinPipe>,
}

impl ContainerStdin {
    pub(crate) fn new(pipe: Arc<StdinPipe>) -> ContainerStdin {
        ContainerStdin { pipe }
    }

    /// Whether the container has `stdinOnce`: its stdin ends when this writer is dropped.
    pub fn once(&self) -> bool {
        self.pipe.once
    }

    /// Writes all of `bytes`, waiting while the pipe is full. Fails once the stdin was closed
    /// or the instance ended.
    pub async fn write_all(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut writer = self.pipe.writer.lock().await;
        match writer.as_mut() {
            Some(w) => w.write_all(bytes).await,
            None => Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the container's stdin was closed",
            )),
        }
    }

    /// Ends the container's stdin: the guest reads end of file once it has read what was
    /// written.
    pub async fn close(self) {
        close(&self.pipe).await;
    }
}

async fn close(pipe: &StdinPipe) {
    if let Some(mut w) = pipe.writer.lock().await.take() {
        let _ = w.shutdown().await;
    }
}

impl Drop for ContainerStdin {
    fn drop(&mut self) {
        if !self.pipe.once {
            return;
        }
        // `stdinOnce`: the first attacher's leaving ends the stream.
        if let Ok(mut writer) = self.pipe.writer.try_lock() {
            // Dropping the writing end is its end of file.
            writer.take();
            return;
        }
        // Another writer is writing: close after it.
        let pipe = self.pipe.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { close(&pipe).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    #[tokio::test]
    async fn what_is_written_is_read_and_once_ends_with_the_first_writer() {
        let pipe = StdinPipe::new(StdinMode { once: true });
        let mut reader = pipe.reader().unwrap();
        assert!(pipe.reader().is_none(), "the reading end is taken once");
        let stdin = ContainerStdin::new(pipe.clone());
        stdin.write_all(b"hello ").await.unwrap();
        stdin.write_all(b"world").await.unwrap();
        drop(stdin);
        let mut read = String::new();
        reader.read_to_string(&mut read).await.unwrap();
        assert_eq!(read, "hello world");
        let late = ContainerStdin::new(pipe.clone());
        assert!(late.write_all(b"late").await.is_err());
        // A writer waiting on a full pipe fails when the instance (the reading end) goes.
        let pipe = StdinPipe::new(StdinMode { once: false });
        let reader = pipe.reader().unwrap();
        let stdin = ContainerStdin::new(pipe);
        let blocked = tokio::spawn(async move { stdin.write_all(&[0; 2 * PIPE_BUFFER]).await });
        tokio::task::yield_now().await;
        drop(reader);
        assert!(blocked.await.unwrap().is_err());
    }

    #[tokio::test]
    async fn without_once_the_stream_outlives_its_writers_until_closed() {
        let pipe = StdinPipe::new(StdinMode { once: false });
        let mut reader = pipe.reader().unwrap();
        ContainerStdin::new(pipe.clone())
            .write_all(b"a")
            .await
            .unwrap();
        let second = ContainerStdin::new(pipe.clone());
        second.write_all(b"b").await.unwrap();
        second.close().await;
        let mut read = String::new();
        reader.read_to_string(&mut read).await.unwrap();
        assert_eq!(read, "ab");
    }
}
