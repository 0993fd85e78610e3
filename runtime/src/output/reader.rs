//! Reading a container's log back, as `kubectl logs [-f] [-p]` does: the CRI-format file of one
//! instance, from its start, optionally followed until the instance has ended.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::io::AsyncReadExt;

use super::{LogBook, OutputLine, Stream, log_file};

/// Which log [`crate::PodHandle::logs`] reads, and how.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogOptions {
    /// Keep reading as the container writes, until it ends (`kubectl logs -f`).
    pub follow: bool,
    /// The previous instance of the container, the one before its last restart
    /// (`kubectl logs -p`).
    pub previous: bool,
}

impl LogOptions {
    /// Sets [`LogOptions::follow`].
    pub fn follow(mut self) -> Self {
        self.follow = true;
        self
    }

    /// Sets [`LogOptions::previous`].
    pub fn previous(mut self) -> Self {
        self.previous = true;
        self
    }
}

/// The lines of one container instance's log, in order (see [`crate::PodHandle::logs`]).
pub struct Logs {
    container: Arc<str>,
    instance: i32,
    path: PathBuf,
    file: Option<tokio::fs::File>,
    /// Bytes read past the last complete line.
    partial: Vec<u8>,
    lines: VecDeque<OutputLine>,
    /// Read until the instance has ended (else: what the file holds now).
    to_end: bool,
    book: Arc<LogBook>,
    done: bool,
}

impl std::fmt::Debug for Logs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Logs")
            .field("container", &self.container)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl Logs {
    pub(crate) fn open(book: Arc<LogBook>, container: &str, instance: i32, to_end: bool) -> Logs {
        Logs {
            container: container.into(),
            instance,
            path: log_file(&book.dir, container, instance),
            file: None,
            partial: Vec::new(),
            lines: VecDeque::new(),
            to_end,
            book,
            done: false,
        }
    }

    /// The next line; `None` at the end of the log: for a running instance not followed, the
    /// end of what it has written so far; otherwise once it has ended and all it wrote was read
    /// (or the pod is deleted).
    ///
    /// Not cancel-safe: dropping the future while it reads may lose what that read took from
    /// the file. Beside other work (a `select!`), read the log from a task of its own.
    pub async fn next(&mut self) -> Option<OutputLine> {
        loop {
            if let Some(line) = self.lines.pop_front() {
                return Some(line);
            }
            if self.done {
                return None;
            }
            // Seen before looking at the end and reading, so no flush after either is missed.
            let seen = self.book.written.version();
            let ended = self.book.has_ended(&self.container, self.instance);
            // Read until the file has nothing more (a chunk may hold no whole record).
            if self.read_more().await || !self.lines.is_empty() {
                continue;
            }
            if !self.to_end || ended || !self.book.more_written(seen).await {
                // One last read: the writer may have flushed before it went away.
                self.read_more().await;
                self.done = true;
            }
        }
    }

    /// Reads the next piece of the file (at most [`READ_CHUNK`] bytes, so a large log is never
    /// held in memory whole) as lines; at its end, moves on to a new file at the path when the
    /// writer has rotated the log. Whether anything was read.
    async fn read_more(&mut self) -> bool {
        if self.file.is_none() {
            match tokio::fs::File::open(&self.path).await {
                Ok(file) => self.file = Some(file),
                Err(_) => return false, // nothing written yet
            }
        }
        let Some(file) = &mut self.file else {
            return false;
        };
        let start = self.partial.len();
        let read = (&mut *file)
            .take(READ_CHUNK as u64)
            .read_to_end(&mut self.partial)
            .await;
        let n = match read {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(file = %self.path.display(), "cannot read the container log: {e}");
                self.partial.truncate(start);
                return false;
            }
        };
        if n == 0 {
            if self.rotated().await {
                self.file = None;
                self.partial.clear();
                return Box::pin(self.read_more()).await;
            }
            return false;
        }
        let mut consumed = 0;
        while let Some(nl) = self.partial[consumed..].iter().position(|&b| b == b'\n') {
            let record = &self.partial[consumed..consumed + nl];
            if let Some(line) = parse(&self.container, record) {
                self.lines.push_back(line);
            }
            consumed += nl + 1;
        }
        self.partial.drain(..consumed);
        if self.partial.len() > READ_CHUNK * 4 {
            // No record is this long (lines are split at 16 KiB): not a log the writer made.
            self.partial.clear();
        }
        true
    }

    /// Whether the file at the path is no longer the one being read (the log was rotated).
    async fn rotated(&self) -> bool {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let Some(file) = &self.file else { return false };
            match (file.metadata().await, tokio::fs::metadata(&self.path).await) {
                (Ok(open), Ok(now)) => open.ino() != now.ino() || open.dev() != now.dev(),
                _ => false,
            }
        }
        #[cfg(not(unix))]
        false
    }
}

/// The most bytes of a log read at once.
const READ_CHUNK: usize = 64 * 1024;

/// One CRI log record: `<time> <stdout|stderr> <F|P> <line>`.
fn parse(container: &str, record: &[u8]) -> Option<OutputLine> {
    let record = String::from_utf8_lossy(record);
    let mut fields = record.splitn(4, ' ');
    let time = fields.next()?;
    let stream = match fields.next()? {
        "stdout" => Stream::Stdout,
        "stderr" => Stream::Stderr,
        _ => return None,
    };
    let partial = fields.next()? == "P";
    Some(OutputLine {
        container: container.to_owned(),
        stream,
        line: fields.next().unwrap_or_default().to_owned(),
        partial,
        time: Some(time.to_owned()),
    })
}
