//! A task's stdio: the caller's streams, bridged to WASI's through bounded pipes.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::PollSender;
use wasmtime_wasi::cli::{AsyncStdinStream, StdoutStream};

use crate::container::Shared;

pub(super) type Output = Box<dyn StdoutStream + Sync>;

/// A task's stdio for one run or exec: empty stdin and discarded output unless given.
pub struct TaskIo {
    pub(super) stdin: Option<AsyncStdinStream>,
    pub(super) stdout: Output,
    pub(super) stderr: Output,
    /// Each writer's task, done once it has written everything.
    pub(super) written: Vec<tokio::sync::oneshot::Receiver<()>>,
}

impl std::fmt::Debug for TaskIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskIo")
            .field("stdin", &self.stdin.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for TaskIo {
    fn default() -> Self {
        TaskIo::new()
    }
}

/// The most bytes of a guest's output one write passes on, and how many such chunks wait for a
/// writer that is slow to take them (then the guest waits).
const OUTPUT_CHUNK: usize = 64 << 10;
const PIPE_CHUNKS: usize = 16;
/// How long a task's end waits for its output to be written (a reader that does not read is
/// not waited for longer).
const WRITTEN_WAIT: Duration = Duration::from_secs(2);

impl TaskIo {
    /// No input, output discarded.
    pub fn new() -> TaskIo {
        TaskIo {
            stdin: None,
            stdout: Box::new(tokio::io::empty()),
            stderr: Box::new(tokio::io::empty()),
            written: Vec::new(),
        }
    }

    /// The process's own stdout and stderr (no input).
    pub fn inherit() -> TaskIo {
        TaskIo {
            stdin: None,
            stdout: Box::new(tokio::io::stdout()),
            stderr: Box::new(tokio::io::stderr()),
            written: Vec::new(),
        }
    }

    /// Reads the guest's stdin from `reader`.
    pub fn stdin(mut self, reader: impl AsyncRead + Send + Sync + 'static) -> Self {
        self.stdin = Some(AsyncStdinStream::new(reader));
        self
    }

    /// Writes the guest's stdout to `writer` (from a task on the current async runtime).
    pub fn stdout(mut self, writer: impl AsyncWrite + Send + Unpin + 'static) -> Self {
        let (pipe, written) = Pipe::new(writer);
        self.stdout = Box::new(pipe);
        self.written.push(written);
        self
    }

    /// Writes the guest's stderr to `writer` (from a task on the current async runtime).
    pub fn stderr(mut self, writer: impl AsyncWrite + Send + Unpin + 'static) -> Self {
        let (pipe, written) = Pipe::new(writer);
        self.stderr = Box::new(pipe);
        self.written.push(written);
        self
    }

    /// After the guest's streams are gone: waits (a while at most) until the writers have
    /// written what it wrote.
    pub(super) async fn written(written: Vec<tokio::sync::oneshot::Receiver<()>>) {
        let all = async {
            for w in written {
                let _ = w.await;
            }
        };
        let _ = tokio::time::timeout(WRITTEN_WAIT, all).await;
    }
}

/// One stdout or stderr of a task: every stream the guest opens on it (a component opens one
/// per write, a preview1 module one for all) sends what it writes, in order, through a channel
/// to one async task that owns the writer. A writer that fails (its reader is gone) is dropped
/// and what comes after is discarded: a guest never waits on it. The writer closes when the
/// task's streams are all gone.
#[derive(Clone)]
struct Pipe(mpsc::Sender<Bytes>);

impl Pipe {
    fn new(
        mut writer: impl AsyncWrite + Send + Unpin + 'static,
    ) -> (Pipe, tokio::sync::oneshot::Receiver<()>) {
        let (tx, mut rx) = mpsc::channel::<Bytes>(PIPE_CHUNKS);
        let (done, written) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            while let Some(bytes) = rx.recv().await {
                if writer.write_all(&bytes).await.is_err() {
                    return;
                }
            }
            let _ = writer.flush().await;
            drop(writer);
            let _ = done.send(());
        });
        (Pipe(tx), written)
    }
}

impl wasmtime_wasi::cli::IsTerminal for Pipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Pipe {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(PipeWriter(PollSender::new(self.0.clone())))
    }
}

struct PipeWriter(PollSender<Bytes>);

impl AsyncWrite for PipeWriter {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let n = buf.len().min(OUTPUT_CHUNK);
        if std::task::ready!(self.0.poll_reserve(cx)).is_ok() {
            let _ = self.0.send_item(Bytes::copy_from_slice(&buf[..n]));
        }
        std::task::Poll::Ready(Ok(n))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Writes why an instance ended, after what it wrote, to its stderr: where the kubelet looks
/// for it (`terminationMessagePolicy: FallbackToLogsOnError`).
pub(super) async fn tell(stderr: &Shared<Output>, message: Option<&str>) {
    let Some(message) = message else {
        return;
    };
    // Written and flushed before the stream is dropped (which would drop what it still holds).
    let line = Bytes::from(format!("wasmpod: {message}\n"));
    let _ = stderr.p2_stream().blocking_write_and_flush(line).await;
}
