//! Container output: stdout and stderr captured line by line, timestamped, written to per-container
//! log files in the CRI format (`<RFC3339Nano> <stream> <F|P> <line>`) and handed to whoever
//! watches the pod.
//!
//! Memory is bounded: a guest writes into a bounded channel, so one that floods output is slowed
//! to the speed of the log writer instead of growing the host's memory; lines longer than
//! [`MAX_LINE`] are split into partial (`P`) records as the kubelet does, and the start of a line
//! a guest flushes before ending it (a prompt) becomes one too unless the rest of the line
//! follows within a moment ([`held`]), so a prompt shows at once and a line written in pieces
//! stays one record.
//!
//! A pod's log writer, its channel and its log directories are made with the pod's first output,
//! or at the end of an instance that wrote nothing (a node of many quiet pods holds no writer, no
//! channel and no file for them while they run: 1.1 KiB a pod); an instance's log file is made
//! with its first line, or empty at its end; and an instance's end is reported only once
//! everything it printed is written ([`LogEnd::close`]): when a pod ends, its output is in its
//! log files.

mod held;
mod reader;
mod sink;
mod writer;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::mpsc;

use crate::signal::Signal;

pub use reader::{LogOptions, Logs};
pub(crate) use sink::OutputSink;
use writer::write_logs;

/// How big a container's log may grow: the kubelet's `containerLogMaxSize` and
/// `containerLogMaxFiles`. Past `max_size` bytes the log file is rotated (renamed
/// `<n>.log.<time>`), and at most `max_files` files (the current one included) are kept per
/// container instance; of earlier instances only the previous one's logs are kept, as the
/// kubelet keeps one dead container per container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogLimits {
    /// Bytes of one log file before it is rotated (Kubernetes: 10 MiB).
    pub max_size: u64,
    /// Log files kept per container instance, the current one included (Kubernetes: 5).
    pub max_files: usize,
}

impl Default for LogLimits {
    fn default() -> Self {
        LogLimits {
            max_size: 10 * 1024 * 1024,
            max_files: 5,
        }
    }
}

impl LogLimits {
    /// Sets both limits (`max_files` of at least 1).
    pub fn new(max_size: u64, max_files: usize) -> LogLimits {
        LogLimits {
            max_size: max_size.max(1),
            max_files: max_files.max(1),
        }
    }
}

/// How long the log writer waits for a slow watcher of the pod's output (`PodOptions::output`)
/// before it drops lines for it; the log files get every line regardless.
const TAP_PATIENCE: std::time::Duration = std::time::Duration::from_millis(200);

/// The longest line kept in one log record; longer lines are split.
pub(crate) const MAX_LINE: usize = 16 * 1024;
/// Chunks buffered per pod between the guests and the log writer.
const CHANNEL_CHUNKS: usize = 64;

/// Which output stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    /// The guest's stdout.
    Stdout,
    /// The guest's stderr.
    Stderr,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// One line a container wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutputLine {
    /// The container's name.
    pub container: String,
    /// stdout or stderr.
    pub stream: Stream,
    /// The line, without its newline; invalid UTF-8 is replaced.
    pub line: String,
    /// True when this is a piece of a line that the next piece continues: a line longer than the
    /// log's record limit, or what the guest flushed before ending the line (a prompt).
    pub partial: bool,
    /// When it was written (RFC 3339, nanoseconds), for lines read back from the log with
    /// [`crate::PodHandle::logs`]; `None` for lines delivered as they are written.
    pub time: Option<String>,
}

/// The receiving end of a pod's output: writes the log files and feeds the pod's watcher.
pub(crate) struct PodOutput {
    tx: Arc<ToWriter>,
    book: Arc<LogBook>,
}

/// The way to the pod's log writer, which starts at the first chunk sent.
pub(crate) struct ToWriter {
    tx: OnceLock<mpsc::Sender<Box<Chunk>>>,
    /// What the writer starts with; taken when it starts.
    start: Mutex<Option<WriterStart>>,
    book: Arc<LogBook>,
}

struct WriterStart {
    containers: Vec<Arc<str>>,
    tap: Option<mpsc::Sender<OutputLine>>,
    limits: LogLimits,
    /// The runtime the pod was made on, for a first chunk sent from outside it.
    runtime: Option<tokio::runtime::Handle>,
}

impl ToWriter {
    /// The writer's channel; the first call starts the writer.
    pub(super) fn sender(&self) -> &mpsc::Sender<Box<Chunk>> {
        self.tx.get_or_init(|| {
            let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
            let start = self.start.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(start) = start {
                let book = self.book.clone();
                let writer = write_logs(
                    book.dir.clone(),
                    start.containers,
                    rx,
                    start.tap,
                    book,
                    start.limits,
                );
                match (tokio::runtime::Handle::try_current(), start.runtime) {
                    (Err(_), Some(runtime)) => drop(runtime.spawn(writer)),
                    _ => crate::eager::spawn(writer),
                }
            }
            tx
        })
    }
}

#[cfg(test)]
impl ToWriter {
    /// A way to `tx` itself, for tests of what is sent.
    pub(super) fn to(tx: mpsc::Sender<Box<Chunk>>) -> Arc<ToWriter> {
        Arc::new(ToWriter {
            tx: OnceLock::from(tx),
            start: Mutex::new(None),
            book: Arc::new(LogBook::finished(Path::new("").into())),
        })
    }
}

impl Drop for ToWriter {
    fn drop(&mut self) {
        // Nothing was ever sent: no writer will close the book.
        if self.tx.get().is_none() {
            self.book.close();
        }
    }
}

/// What readers of a pod's logs follow: where the files are, which instances have ended, and a
/// signal each time the writer has flushed more.
pub(crate) struct LogBook {
    dir: Arc<Path>,
    ended: Mutex<HashSet<(Arc<str>, i32)>>,
    /// Changes each time the writer has flushed, and when it stops.
    written: Signal,
    /// The writer is gone: nothing more will be written.
    closed: AtomicBool,
}

impl LogBook {
    /// The logs under `dir` of a pod that no longer runs: each file is complete as it is.
    pub(crate) fn finished(dir: Arc<Path>) -> LogBook {
        LogBook {
            dir,
            ended: Mutex::default(),
            written: Signal::default(),
            closed: AtomicBool::new(true),
        }
    }

    /// The pod's log directory (`logs/<namespace>_<pod>_<uid>`).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Waits for the writer's next flush after `seen` (a [`Signal::version`] of `written`
    /// read before looking at the files). False when the writer is gone with nothing flushed
    /// since.
    async fn more_written(&self, seen: u64) -> bool {
        if self.closed.load(Ordering::Acquire) && self.written.version() == seen {
            return false;
        }
        self.written.changed(seen).await;
        true
    }

    /// The writer is gone.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.written.bump();
    }

    /// The instance's log is complete.
    fn has_ended(&self, container: &str, instance: i32) -> bool {
        let ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        ended.contains(&(Arc::from(container), instance))
    }
}

impl PodOutput {
    /// Starts the pod's log writer, writing under `dir` (a directory for each of `containers`,
    /// made as the writer starts) and forwarding lines to `tap`.
    pub(crate) fn start(
        dir: Arc<Path>,
        containers: Vec<Arc<str>>,
        tap: Option<mpsc::Sender<OutputLine>>,
        limits: LogLimits,
    ) -> PodOutput {
        let book = Arc::new(LogBook {
            dir,
            ended: Mutex::default(),
            written: Signal::default(),
            closed: AtomicBool::new(false),
        });
        let tx = Arc::new(ToWriter {
            tx: OnceLock::new(),
            start: Mutex::new(Some(WriterStart {
                containers,
                tap,
                limits,
                runtime: tokio::runtime::Handle::try_current().ok(),
            })),
            book: book.clone(),
        });
        PodOutput { tx, book }
    }

    pub(crate) fn book(&self) -> Arc<LogBook> {
        self.book.clone()
    }

    /// Marks the end of the output of an instance that is gone already (a resumed pod's).
    pub(crate) fn ended(&self, container: &Arc<str>, instance: i32) {
        let tx = self.tx.sender().clone();
        let chunk = marker(container.clone(), instance, None);
        // The channel may be full of a flood's lines: never block the supervisor.
        if let Err(mpsc::error::TrySendError::Full(chunk)) = tx.try_send(chunk) {
            tokio::spawn(async move { tx.send(chunk).await });
        }
    }

    /// The output of a new instance of `container`: its stdout and stderr, and the marker of its
    /// end. The writer makes the instance's log file with its first line, or at its end.
    pub(crate) fn instance(
        &self,
        container: &Arc<str>,
        instance: i32,
    ) -> (OutputSink, OutputSink, LogEnd) {
        let sink = |stream| OutputSink {
            container: container.clone(),
            instance,
            stream,
            tx: self.tx.clone(),
        };
        let end = LogEnd {
            container: container.clone(),
            instance,
            tx: self.tx.clone(),
        };
        (sink(Stream::Stdout), sink(Stream::Stderr), end)
    }
}

/// How long an instance's end waits for its output to be written before it is reported anyway
/// (a state dir on a disk that hangs must not keep a pod from ending).
const WRITE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// The end of one instance's output, closed once the instance and its stores are gone.
pub(crate) struct LogEnd {
    container: Arc<str>,
    instance: i32,
    tx: Arc<ToWriter>,
}

impl LogEnd {
    /// Marks the end of the instance's output and waits until everything it wrote is in its
    /// log file (at most [`WRITE_PATIENCE`]).
    pub(crate) async fn close(self) {
        let (written, done) = tokio::sync::oneshot::channel();
        let chunk = marker(self.container.clone(), self.instance, Some(written));
        let flushed = async {
            if self.tx.sender().send(chunk).await.is_ok() {
                let _ = done.await;
            }
        };
        if tokio::time::timeout(WRITE_PATIENCE, flushed).await.is_err() {
            tracing::warn!(
                container = %self.container,
                "the container's log was not written within {WRITE_PATIENCE:?}"
            );
        }
    }
}

/// A piece of one instance's output on its way to the writer. Chunks travel boxed: the
/// channel allocates its slots 32 at a time, the first 32 as the writer starts, and a boxed slot
/// is a pointer where a chunk is 80 bytes (2.5 KiB for every pod that has written).
pub(super) struct Chunk {
    pub(super) container: Arc<str>,
    pub(super) instance: i32,
    pub(super) stream: Stream,
    pub(super) time: jiff::Timestamp,
    pub(super) lines: Vec<(bool, String)>,
    /// Its one line is the start of a line the guest flushed before ending it: the writer holds
    /// it for what continues it ([`held`]).
    pub(super) flushed: bool,
    /// The instance has ended: nothing more will come from it.
    pub(super) end: bool,
    /// Told once this chunk is written (with those before it).
    pub(super) written: Option<tokio::sync::oneshot::Sender<()>>,
}

/// A chunk without lines: an instance's end.
fn marker(
    container: Arc<str>,
    instance: i32,
    written: Option<tokio::sync::oneshot::Sender<()>>,
) -> Box<Chunk> {
    Box::new(Chunk {
        container,
        instance,
        stream: Stream::Stdout,
        time: jiff::Timestamp::now(),
        lines: Vec::new(),
        flushed: false,
        end: true,
        written,
    })
}

/// The log file of one container instance, as the kubelet lays it out.
pub(crate) fn log_file(dir: &std::path::Path, container: &str, instance: i32) -> PathBuf {
    dir.join(container).join(format!("{instance}.log"))
}
