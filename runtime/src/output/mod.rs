//! Container output: stdout and stderr captured line by line, timestamped, written to per-container
//! log files in the CRI format (`<RFC3339Nano> <stream> <F|P> <line>`) and handed to whoever
//! watches the pod.
//!
//! Memory is bounded: a guest writes into a bounded channel, so one that floods output is slowed
//! to the speed of the log writer instead of growing the host's memory; lines longer than
//! [`MAX_LINE`] are split into partial (`P`) records as the kubelet does.
//!
//! An instance's log file is made when the instance is created ([`PodOutput::instance`] asks the
//! writer for it), so that making it runs beside the guest's start rather than after its first
//! line; and an instance's end is reported only once everything it printed is written
//! ([`LogEnd::close`]): when a pod ends, its output is in its log files.

mod reader;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use tokio::io::AsyncWrite;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::PollSender;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

pub use reader::{LogOptions, Logs};

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
    /// True when this is a piece of a line longer than the log's record limit.
    pub partial: bool,
    /// When it was written (RFC 3339, nanoseconds), for lines read back from the log with
    /// [`crate::PodHandle::logs`]; `None` for lines delivered as they are written.
    pub time: Option<String>,
}

/// A piece of one instance's output on its way to the writer. Chunks travel boxed: the
/// channel allocates its slots 32 at a time, the first 32 as the pod starts, and a boxed slot is
/// a pointer where a chunk is 80 bytes (2.5 KiB a pod, sleeping or not).
struct Chunk {
    container: Arc<str>,
    instance: i32,
    stream: Stream,
    time: jiff::Timestamp,
    lines: Vec<(bool, String)>,
    /// The instance has ended: nothing more will come from it.
    end: bool,
    /// Told once this chunk is written (with those before it).
    written: Option<tokio::sync::oneshot::Sender<()>>,
}

/// Where one container instance's stdout or stderr goes.
#[derive(Clone)]
pub(crate) struct OutputSink {
    container: Arc<str>,
    instance: i32,
    stream: Stream,
    tx: mpsc::Sender<Box<Chunk>>,
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
    fn chunk(&self, lines: Vec<(bool, String)>) -> Box<Chunk> {
        Box::new(Chunk {
            container: self.sink.container.clone(),
            instance: self.sink.instance,
            stream: self.sink.stream,
            time: jiff::Timestamp::now(),
            lines,
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
            let chunk = this.chunk(lines);
            let _ = this.tx.send_item(chunk);
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
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
            let chunk = self.chunk(vec![(false, line)]);
            let _ = self.sink.tx.try_send(chunk);
        }
    }
}

/// The receiving end of a pod's output: writes the log files and feeds the pod's watcher.
pub(crate) struct PodOutput {
    tx: mpsc::Sender<Box<Chunk>>,
    book: Arc<LogBook>,
}

/// What readers of a pod's logs follow: where the files are, which instances have ended, and a
/// signal each time the writer has flushed more.
pub(crate) struct LogBook {
    dir: PathBuf,
    ended: Mutex<HashSet<(Arc<str>, i32)>>,
    written: watch::Receiver<()>,
}

impl LogBook {
    /// The logs under `dir` of a pod that no longer runs: each file is complete as it is.
    pub(crate) fn finished(dir: PathBuf) -> LogBook {
        let (_, written) = watch::channel(());
        LogBook {
            dir,
            ended: Mutex::default(),
            written,
        }
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
        dir: PathBuf,
        containers: Vec<Arc<str>>,
        tap: Option<mpsc::Sender<OutputLine>>,
        limits: LogLimits,
    ) -> PodOutput {
        let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
        let (written_tx, written) = watch::channel(());
        let book = Arc::new(LogBook {
            dir: dir.clone(),
            ended: Mutex::default(),
            written,
        });
        tokio::spawn(write_logs(
            dir,
            containers,
            rx,
            tap,
            book.clone(),
            written_tx,
            limits,
        ));
        PodOutput { tx, book }
    }

    pub(crate) fn book(&self) -> Arc<LogBook> {
        self.book.clone()
    }

    /// Marks the end of the output of an instance that is gone already (a resumed pod's).
    pub(crate) fn ended(&self, container: &Arc<str>, instance: i32) {
        let tx = self.tx.clone();
        let chunk = marker(container.clone(), instance, true, None);
        // The channel may be full of a flood's lines: never block the supervisor.
        if let Err(mpsc::error::TrySendError::Full(chunk)) = tx.try_send(chunk) {
            tokio::spawn(async move { tx.send(chunk).await });
        }
    }

    /// The output of a new instance of `container`: its stdout and stderr, and the marker of its
    /// end. The writer makes the instance's log file now, while the instance starts.
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
        // When the channel is full the file is made with the first line instead.
        let _ = self
            .tx
            .try_send(marker(container.clone(), instance, false, None));
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
    tx: mpsc::Sender<Box<Chunk>>,
}

impl LogEnd {
    /// Marks the end of the instance's output and waits until everything it wrote is in its
    /// log file (at most [`WRITE_PATIENCE`]).
    pub(crate) async fn close(self) {
        let (written, done) = tokio::sync::oneshot::channel();
        let chunk = marker(self.container.clone(), self.instance, true, Some(written));
        let flushed = async {
            if self.tx.send(chunk).await.is_ok() {
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

/// A chunk without lines: an instance's start (its file is made) or its `end`.
fn marker(
    container: Arc<str>,
    instance: i32,
    end: bool,
    written: Option<tokio::sync::oneshot::Sender<()>>,
) -> Box<Chunk> {
    Box::new(Chunk {
        container,
        instance,
        stream: Stream::Stdout,
        time: jiff::Timestamp::now(),
        lines: Vec::new(),
        end,
        written,
    })
}

/// The log file of one container instance, as the kubelet lays it out.
pub(crate) fn log_file(dir: &std::path::Path, container: &str, instance: i32) -> PathBuf {
    dir.join(container).join(format!("{instance}.log"))
}

/// The pod's log writer: makes the containers' log directories, then writes what comes.
async fn write_logs(
    dir: PathBuf,
    containers: Vec<Arc<str>>,
    mut rx: mpsc::Receiver<Box<Chunk>>,
    tap: Option<mpsc::Sender<OutputLine>>,
    book: Arc<LogBook>,
    written: watch::Sender<()>,
    limits: LogLimits,
) {
    // The directories first, while the pod's first instance is being made.
    for name in containers {
        if let Err(e) = std::fs::create_dir_all(dir.join(&*name)) {
            tracing::warn!(dir = %dir.display(), "cannot make the pod's log directory: {e}");
        }
    }
    let mut files: HashMap<Arc<str>, LogFile> = HashMap::new();
    let mut dropped_for_tap = 0u64;
    while let Some(chunk) = rx.recv().await {
        // At most a channel's worth at once: what a batch gathers for the files is bounded.
        let mut batch = vec![chunk];
        while batch.len() < CHANNEL_CHUNKS
            && let Ok(more) = rx.try_recv()
        {
            batch.push(more);
        }
        let mut ended = Vec::new();
        let mut acks = Vec::new();
        for chunk in &mut batch {
            acks.extend(chunk.written.take());
            if chunk.end {
                ended.push((chunk.container.clone(), chunk.instance));
                continue;
            }
            let file = match files.get_mut(&chunk.container) {
                Some(f) if f.instance == chunk.instance => f,
                // A new instance's file is made now and kept track of from its first line on:
                // a quiet container costs the writer nothing.
                _ if chunk.lines.is_empty() => {
                    LogFile::create(&dir, &chunk.container, chunk.instance);
                    continue;
                }
                _ => {
                    let file = LogFile::open(&dir, &chunk.container, chunk.instance);
                    files
                        .entry(chunk.container.clone())
                        .insert_entry(file)
                        .into_mut()
                }
            };
            let time = chunk.time.strftime("%Y-%m-%dT%H:%M:%S%.9fZ").to_string();
            for (partial, line) in &chunk.lines {
                let tag = if *partial { 'P' } else { 'F' };
                file.record(&time, chunk.stream.as_str(), tag, line, &limits);
            }
        }
        for file in files.values_mut() {
            file.flush();
        }
        for (container, instance) in ended {
            if files
                .get(&container)
                .is_some_and(|f| f.instance == instance)
            {
                files.remove(&container);
            }
            let mut set = book.ended.lock().unwrap_or_else(|e| e.into_inner());
            set.insert((container, instance));
        }
        written.send_replace(());
        for ack in acks {
            let _ = ack.send(());
        }
        if let Some(tap) = &tap {
            // A watcher that does not keep up (a full pipe nobody reads) must not stall the
            // pod's output: past a short wait its lines are dropped (the log has them).
            let lines = batch.into_iter().flat_map(|chunk| {
                let (container, stream) = (chunk.container, chunk.stream);
                chunk
                    .lines
                    .into_iter()
                    .map(move |(partial, line)| OutputLine {
                        container: container.to_string(),
                        stream,
                        line,
                        partial,
                        time: None,
                    })
            });
            for out in lines {
                match deliver(tap, out, dropped_for_tap > 0).await {
                    Delivery::Sent if dropped_for_tap > 0 => {
                        tracing::warn!(
                            dropped = dropped_for_tap,
                            "the pod's output watcher missed lines (they are in the log)"
                        );
                        dropped_for_tap = 0;
                    }
                    Delivery::Sent => {}
                    Delivery::Dropped => dropped_for_tap += 1,
                    Delivery::Closed => break,
                }
            }
        }
    }
}

/// What became of a line handed to the pod's output watcher.
enum Delivery {
    Sent,
    /// The watcher did not keep up; the line is only in the log.
    Dropped,
    /// Nobody watches any more.
    Closed,
}

/// Hands `out` to the watcher, waiting at most [`TAP_PATIENCE`] for room (not at all while it is
/// already `dropping` lines).
async fn deliver(tap: &mpsc::Sender<OutputLine>, out: OutputLine, dropping: bool) -> Delivery {
    match tap.try_send(out) {
        Ok(()) => Delivery::Sent,
        Err(mpsc::error::TrySendError::Closed(_)) => Delivery::Closed,
        Err(mpsc::error::TrySendError::Full(_)) if dropping => Delivery::Dropped,
        Err(mpsc::error::TrySendError::Full(out)) => {
            match tokio::time::timeout(TAP_PATIENCE, tap.send(out)).await {
                Ok(Ok(())) => Delivery::Sent,
                Ok(Err(_)) => Delivery::Closed,
                Err(_) => Delivery::Dropped,
            }
        }
    }
}

/// The log file of one container instance. It is opened to write each batch and closed after:
/// a node of many thousands of containers, most of them quiet, holds no descriptor and no buffer
/// for them between batches.
struct LogFile {
    instance: i32,
    path: PathBuf,
    /// Records not written yet: the writer writes them once a batch.
    pending: Vec<u8>,
    /// Bytes in the current file.
    size: u64,
}

impl LogFile {
    /// Makes the log of a new `instance` (and its directory, if missing), and removes the logs
    /// of instances before the previous one.
    fn create(dir: &std::path::Path, container: &str, instance: i32) {
        let path = log_file(dir, container, instance);
        let parent = path.parent().unwrap_or(dir);
        if let Err(e) = std::fs::create_dir_all(parent).and_then(|()| append(&path)) {
            tracing::warn!(file = %path.display(), "cannot make the container log: {e}");
        }
        remove_old_instances(parent, instance);
    }

    /// The log of `instance`, to append to: made when it does not exist yet (its instance's
    /// creation could not ask for it).
    fn open(dir: &std::path::Path, container: &str, instance: i32) -> LogFile {
        let path = log_file(dir, container, instance);
        let size = match std::fs::metadata(&path) {
            Ok(meta) => meta.len(),
            Err(_) => {
                LogFile::create(dir, container, instance);
                0
            }
        };
        LogFile {
            instance,
            path,
            pending: Vec::new(),
            size,
        }
    }

    /// Writes one CRI record, rotating the file first when it is full.
    fn record(&mut self, time: &str, stream: &str, tag: char, line: &str, limits: &LogLimits) {
        let len = (time.len() + stream.len() + line.len() + 5) as u64;
        if self.size > 0 && self.size.saturating_add(len) > limits.max_size {
            self.rotate(limits);
        }
        // Writing into a `Vec` cannot fail.
        let _ = writeln!(self.pending, "{time} {stream} {tag} {line}");
        self.size = self.size.saturating_add(len);
    }

    /// Writes the pending records to the file, and lets their buffer go.
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        if let Err(e) = append(&self.path).and_then(|mut f| f.write_all(&pending)) {
            tracing::warn!(file = %self.path.display(), "cannot write the container log: {e}");
        }
    }

    /// Renames the current file `<n>.log.<time>`, starts a new one, and keeps at most
    /// `max_files - 1` rotated files.
    fn rotate(&mut self, limits: &LogLimits) {
        self.flush();
        let stamp = jiff::Timestamp::now()
            .strftime("%Y%m%d-%H%M%S.%f")
            .to_string();
        let mut rotated = self.path.clone().into_os_string();
        rotated.push(format!(".{stamp}"));
        match std::fs::rename(&self.path, &rotated).and_then(|()| append(&self.path)) {
            Ok(_) => self.size = 0,
            Err(e) => {
                tracing::warn!(file = %self.path.display(), "cannot rotate the container log: {e}");
                return;
            }
        }
        let (Some(dir), Some(name)) = (self.path.parent(), self.path.file_name()) else {
            return;
        };
        let prefix = format!("{}.", name.to_string_lossy());
        let mut old: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| e.path())
            .collect();
        // The stamps sort by time.
        old.sort();
        let excess = old.len().saturating_sub(limits.max_files.saturating_sub(1));
        for file in &old[..excess] {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// `path` opened to append to, made if missing.
fn append(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// A file replaced by a newer instance's within a batch keeps what it was given.
impl Drop for LogFile {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Removes the log files (current and rotated) of instances older than the one before
/// `instance` in a container's log directory.
fn remove_old_instances(dir: &std::path::Path, instance: i32) {
    if instance < 2 {
        return;
    }
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let old = name
            .split_once(".log")
            .and_then(|(n, _)| n.parse::<i32>().ok())
            .is_some_and(|n| n < instance - 1);
        if old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
