//! A process's stdio as containerd gives it: the paths of fifos containerd reads (stdout,
//! stderr) and writes (stdin), or `file://` URIs, or nothing.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::net::unix::pipe;
use wasmpod::task::TaskIo;

/// The stdio paths of one process.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stdio {
    pub(crate) stdin: String,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Stdio {
    /// Opens them as a task's stdio. containerd has opened its ends already (it reads stdout and
    /// stderr before it creates a process). Must be called within the shim's async runtime.
    pub(crate) fn open(&self) -> anyhow::Result<TaskIo> {
        let mut io = TaskIo::new();
        if !self.stdin.is_empty() {
            // Read-only and non-blocking: the guest's reads wait for containerd's writer (epoll
            // reports a fifo's hang-up only once a writer came and went) and end when it closes.
            let stdin = pipe::OpenOptions::new()
                .open_receiver(&self.stdin)
                .with_context(|| format!("cannot open stdin {}", self.stdin))?;
            io = io.stdin(stdin);
        }
        if let Some(out) = writer(&self.stdout)? {
            io = match out {
                Writer::Pipe(p) => io.stdout(p),
                Writer::File(f) => io.stdout(f),
            };
        }
        if let Some(err) = writer(&self.stderr)? {
            io = match err {
                Writer::Pipe(p) => io.stderr(p),
                Writer::File(f) => io.stderr(f),
            };
        }
        Ok(io)
    }
}

/// How long a fifo's reader (containerd) may take to open it.
const READER_WAIT: Duration = Duration::from_secs(5);

enum Writer {
    Pipe(pipe::Sender),
    File(tokio::fs::File),
}

/// A plain path (a fifo, or a file) or a `file://` URI.
fn path_of(uri: &str) -> Option<&Path> {
    if uri.is_empty() {
        return None;
    }
    Some(Path::new(uri.strip_prefix("file://").unwrap_or(uri)))
}

fn writer(uri: &str) -> anyhow::Result<Option<Writer>> {
    let Some(path) = path_of(uri) else {
        return Ok(None);
    };
    if uri.contains("://") && !uri.starts_with("file://") {
        bail!("{uri}: wasmpod writes a container's output to fifos and file:// paths only");
    }
    let fifo = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo());
    if fifo {
        // Write-only, once containerd's reader is open: containerd may open it a moment after
        // it made the process (an exec's), and it reads until every writer is gone, so a writer
        // that came and went before it opened would leave it waiting for ever.
        let deadline = Instant::now() + READER_WAIT;
        loop {
            match pipe::OpenOptions::new().open_sender(path) {
                Ok(sender) => return Ok(Some(Writer::Pipe(sender))),
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("cannot open {} (containerd reads it)", path.display())
                    });
                }
            }
        }
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    Ok(Some(Writer::File(tokio::fs::File::from_std(file))))
}
