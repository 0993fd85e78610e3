//! The pod's log writer: one task per pod that writes its instances' chunks to their CRI log
//! files (opened for each batch, rotated past the size limit, older instances' logs removed)
//! and hands each line to whoever watches the pod.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::held::Held;
use super::{CHANNEL_CHUNKS, Chunk, LogBook, LogLimits, OutputLine, TAP_PATIENCE, log_file};

/// The pod's log writer: makes the containers' log directories, then writes what comes.
pub(super) async fn write_logs(
    dir: Arc<Path>,
    containers: Vec<Arc<str>>,
    mut rx: mpsc::Receiver<Box<Chunk>>,
    tap: Option<mpsc::Sender<OutputLine>>,
    book: Arc<LogBook>,
    limits: LogLimits,
) {
    // Readers following the logs learn of the writer's end, however it ends.
    let book = Writing(book);
    // The directories first: the writer starts with the pod's first chunk, before writing it.
    if let Err(e) = make_dirs(&dir, &containers) {
        tracing::warn!(dir = %dir.display(), "cannot make the pod's log directory: {e}");
    }
    let mut files: HashMap<Arc<str>, LogFile> = HashMap::new();
    let mut dropped_for_tap = 0u64;
    let mut held = Held::default();
    let mut open = true;
    while open {
        // The next chunk, or a held line falling due (an empty batch), or the end. The task
        // keeps room for the largest state it can wait in, for as long as its pod lives: the
        // timer is boxed and made only while a line is held, and so is the watcher's delivery
        // below (a writer waiting for more output then holds 0.4 KiB rather than 1.2).
        let due = held
            .next_due()
            .map(|at| Box::pin(tokio::time::sleep_until(at)));
        let mut batch: Vec<_> = tokio::select! {
            chunk = rx.recv() => {
                open = chunk.is_some();
                chunk.into_iter().collect()
            }
            () = async { due.unwrap().await }, if due.is_some() => {
                Vec::new()
            }
        };
        // At most a channel's worth at once: what a batch gathers for the files is bounded.
        while open
            && batch.len() < CHANNEL_CHUNKS
            && let Ok(more) = rx.try_recv()
        {
            batch.push(more);
        }
        batch = held.settle(batch, Instant::now(), !open);
        let mut ended = Vec::new();
        let mut acks = Vec::new();
        for chunk in &mut batch {
            acks.extend(chunk.written.take());
            if chunk.end {
                // An instance that wrote nothing has its (empty) log made now.
                if files
                    .get(&chunk.container)
                    .is_none_or(|f| f.instance != chunk.instance)
                {
                    LogFile::open(&dir, &chunk.container, chunk.instance).flush();
                }
                ended.push((chunk.container.clone(), chunk.instance));
                continue;
            }
            if chunk.lines.is_empty() {
                continue;
            }
            // A new instance's file is made with its first line (a quiet container costs the
            // writer nothing until it ends).
            let file = match files.get_mut(&chunk.container) {
                Some(file) if file.instance == chunk.instance => file,
                _ => files
                    .entry(chunk.container.clone())
                    .insert_entry(LogFile::open(&dir, &chunk.container, chunk.instance))
                    .into_mut(),
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
        book.written.bump();
        for ack in acks {
            let _ = ack.send(());
        }
        if let Some(tap) = &tap {
            // Boxed: see the timer above.
            Box::pin(hand_over(tap, batch.into_iter(), &mut dropped_for_tap)).await;
        }
    }
}

/// The writer's hold on its pod's [`LogBook`]: closes the book when the writer ends or is
/// dropped.
struct Writing(Arc<LogBook>);

impl std::ops::Deref for Writing {
    type Target = LogBook;

    fn deref(&self) -> &LogBook {
        &self.0
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Hands the lines of `batch` to the pod's output watcher. A watcher that does not keep up (a
/// full pipe nobody reads) must not stall the pod's output: past a short wait its lines are
/// dropped (the log has them), and `dropped` counts them until one goes through again.
async fn hand_over(
    tap: &mpsc::Sender<OutputLine>,
    batch: std::vec::IntoIter<Box<Chunk>>,
    dropped: &mut u64,
) {
    let lines = batch.flat_map(|chunk| {
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
        match deliver(tap, out, *dropped > 0).await {
            Delivery::Sent if *dropped > 0 => {
                tracing::warn!(
                    dropped = *dropped,
                    "the pod's output watcher missed lines (they are in the log)"
                );
                *dropped = 0;
            }
            Delivery::Sent => {}
            Delivery::Dropped => *dropped += 1,
            Delivery::Closed => break,
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
    /// Bytes in the current file (once it was opened; before, those of the pending records).
    size: u64,
    /// The file was opened (else the next flush makes it, empty or not, and learns its size).
    made: bool,
}

impl LogFile {
    /// The log of `instance`, to append to: opened (made, with its directory if that was
    /// removed) when its first records are written, after the logs of instances before the
    /// previous one are removed.
    fn open(dir: &std::path::Path, container: &str, instance: i32) -> LogFile {
        let path = log_file(dir, container, instance);
        remove_old_instances(path.parent().unwrap_or(dir), instance);
        LogFile {
            instance,
            path,
            pending: Vec::new(),
            size: 0,
            made: false,
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

    /// Writes the pending records to the file (made, with its directory, if missing), and lets
    /// their buffer go.
    fn flush(&mut self) {
        if self.pending.is_empty() && self.made {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        let parent = self.path.parent().unwrap_or(&self.path);
        let written = append(&self.path)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => {
                    std::fs::create_dir_all(parent).and_then(|()| append(&self.path))
                }
                _ => Err(e),
            })
            .and_then(|mut f| {
                if !self.made {
                    // What the file held already: nothing for a new instance's; what an earlier
                    // run of the node wrote for a resumed pod's (its first batch may take the
                    // file past the size limit before the next record rotates it).
                    self.size = self.size.saturating_add(f.metadata()?.len());
                }
                f.write_all(&pending)
            });
        match written {
            Ok(()) => self.made = true,
            Err(e) => {
                tracing::warn!(file = %self.path.display(), "cannot write the container log: {e}");
            }
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

/// Makes the pod's log directory `dir` and a directory in it for each container: a `mkdir`
/// each, and the parents only when missing.
fn make_dirs(dir: &std::path::Path, containers: &[Arc<str>]) -> std::io::Result<()> {
    let exists = |r: std::io::Result<()>| match r {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    };
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(dir)?,
        other => exists(other)?,
    }
    for name in containers {
        exists(std::fs::create_dir(dir.join(&**name)))?;
    }
    Ok(())
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
