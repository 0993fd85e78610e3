//! How `wasmpod run` prints its pod's output: each line as `[container] line`, a flushed
//! unfinished line (a prompt) at once. Its stderr carries wasmpod's own messages too (warnings,
//! a pending pod, pull progress): they go through one writer with the containers' stderr, and one
//! written while a container's line is open starts on a line of its own.
//!
//! Nothing of the node's waits on the terminal: stderr is written by a thread of its own from a
//! bounded queue. A container's lines wait for room there (on the output thread, which the node
//! does not wait for); wasmpod's own messages while the pod runs never do: one that finds the
//! queue full (a stderr nobody reads: a paused pager, a full journal) is dropped and counted
//! ([`diagnostic`]). What `run` says once the pod is gone (why containers failed) waits for room
//! while stderr takes something ([`report`]), and `run` then waits for stderr a bounded time
//! only ([`finish`]). The log files keep every line.
//!
//! On a terminal a guest's control characters are shown escaped (`\r`, `\x1b`, ...), tab
//! aside: a guest cannot set the window title, clear the screen, write the clipboard or overwrite
//! its `[container]` prefix with another's. The log files keep the bytes.

use std::fmt::Write as _;
use std::io::{self, IsTerminal, Write};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::Duration;

/// Prints one of wasmpod's streams: each line as `[container] line`. A partial line (a prompt the
/// guest flushed) shows at once and the rest of it continues it, unless another container's
/// output, or a message of wasmpod's own, comes first: that ends the printed line, and the rest
/// gets its own prefix.
pub(crate) struct Printer {
    /// The container whose line is printed up to its end, not ended yet.
    open: Option<String>,
    /// Every piece on a line of its own (the stream is shared with the event stream's lines).
    whole_lines: bool,
    /// Control characters are shown escaped (the stream is a terminal).
    escape: bool,
}

impl Printer {
    /// A printer; with `whole_lines`, a partial line is printed as a line of its own; with
    /// `escape`, control characters in containers' lines are shown escaped.
    pub(crate) const fn new(whole_lines: bool, escape: bool) -> Self {
        Printer {
            open: None,
            whole_lines,
            escape,
        }
    }

    /// A printer for stdout: escaping when stdout is a terminal.
    pub(crate) fn stdout(whole_lines: bool) -> Self {
        Printer::new(whole_lines, io::stdout().is_terminal())
    }

    /// Prints a line (or the piece of one, `partial`) of `container`.
    pub(crate) fn print(
        &mut self,
        to: &mut impl Write,
        container: &str,
        line: &str,
        partial: bool,
    ) -> io::Result<()> {
        // One write for the whole piece: with `--events -` the events share stdout, and a line
        // written in parts could take one of them into its middle.
        let mut piece = Vec::with_capacity(container.len() + line.len() + 4);
        match self.open.take() {
            Some(open) if open == container => {}
            Some(_) => write!(piece, "\n[{container}] ")?,
            None => write!(piece, "[{container}] ")?,
        }
        if self.escape {
            piece.extend_from_slice(escaped(line).as_bytes());
        } else {
            piece.extend_from_slice(line.as_bytes());
        }
        if partial && !self.whole_lines {
            self.open = Some(container.to_owned());
            to.write_all(&piece)?;
            to.flush()
        } else {
            piece.push(b'\n');
            to.write_all(&piece)
        }
    }

    /// Writes wasmpod's own `message` (as it is: it brings its own newline) after ending a line
    /// left open.
    fn message(&mut self, to: &mut impl Write, message: &[u8]) -> io::Result<()> {
        if self.open.take().is_some() {
            to.write_all(b"\n")?;
        }
        to.write_all(message)?;
        to.flush()
    }

    /// Ends a line left open when the output ends.
    pub(crate) fn end(&mut self, to: &mut impl Write) -> io::Result<()> {
        self.message(to, b"")
    }
}

/// `line` with its control characters but tab escaped: C0 and DEL as `\r`, `\x1b`..., C1 as
/// `\u{9b}`; a backslash stays as it is.
fn escaped(line: &str) -> std::borrow::Cow<'_, str> {
    let control = |c: char| c != '\t' && c.is_control();
    if !line.chars().any(control) {
        return line.into();
    }
    let mut out = String::with_capacity(line.len() + 16);
    for c in line.chars() {
        match c {
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            c if control(c) && (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if control(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.into()
}

/// What the stderr thread writes, in order.
enum Piece {
    Line {
        container: String,
        line: String,
        partial: bool,
    },
    Message(Vec<u8>),
    /// Answered once everything before it was written.
    Flushed(SyncSender<()>),
}

/// Pieces waiting for stderr.
const QUEUE: usize = 1024;
/// wasmpod's own messages dropped: stderr did not keep up.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Pieces written to stderr, for [`finish`] to tell a slow reader from none.
static WRITTEN: AtomicU64 = AtomicU64::new(0);
/// How long [`finish`] waits for stderr at most, and for it to take anything at all.
const PATIENCE: Duration = Duration::from_secs(5);
const STALL: Duration = Duration::from_millis(300);

/// The queue of the stderr thread, started on first use.
fn queue() -> &'static SyncSender<Piece> {
    static QUEUE_TX: OnceLock<SyncSender<Piece>> = OnceLock::new();
    QUEUE_TX.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("stderr".into())
            .spawn(move || write_stderr(rx))
            .expect("a thread for stderr");
        tx
    })
}

fn write_stderr(pieces: Receiver<Piece>) {
    let mut printer = Printer::new(false, io::stderr().is_terminal());
    let mut err = io::stderr();
    for piece in pieces {
        // Write errors (a closed pipe) lose the piece; the log files have the lines.
        let _ = match piece {
            Piece::Line {
                container,
                line,
                partial,
            } => printer.print(&mut err, &container, &line, partial),
            Piece::Message(bytes) => printer.message(&mut err, &bytes),
            Piece::Flushed(done) => {
                let _ = printer.end(&mut err);
                let _ = done.send(());
                Ok(())
            }
        };
        WRITTEN.fetch_add(1, Ordering::Relaxed);
    }
}

/// Prints a line (or the piece of one) of `container`'s stderr: waits for room in the queue
/// (the caller is the output thread, which nothing of the node's waits for).
pub(crate) fn stderr(container: &str, line: &str, partial: bool) {
    let _ = queue().send(Piece::Line {
        container: container.to_owned(),
        line: line.to_owned(),
        partial,
    });
}

/// Writes wasmpod's own `message` on stderr in one piece, after ending a container's line left
/// open; dropped (and counted) if stderr is not keeping up.
pub(crate) fn diagnostic(message: &str) {
    match queue().try_send(Piece::Message(message.as_bytes().to_vec())) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
        Err(TrySendError::Disconnected(_)) => {}
    }
}

/// Writes `message` of wasmpod's once the pod is gone (nothing of the node's is left to wait
/// on it): waits for room in the queue while stderr takes something ([`STALL`]); dropped and
/// counted when it takes nothing, and from then on as [`diagnostic`] does.
pub(crate) fn report(message: &str) {
    static STALLED: AtomicBool = AtomicBool::new(false);
    let mut piece = Piece::Message(message.as_bytes().to_vec());
    let mut seen = WRITTEN.load(Ordering::Relaxed);
    let mut since = std::time::Instant::now();
    loop {
        match queue().try_send(piece) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => return,
            Err(TrySendError::Full(back)) => piece = back,
        }
        let now = WRITTEN.load(Ordering::Relaxed);
        if now != seen {
            (seen, since) = (now, std::time::Instant::now());
        }
        if STALLED.load(Ordering::Relaxed) || since.elapsed() >= STALL {
            STALLED.store(true, Ordering::Relaxed);
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for everything queued for stderr to be written, a container's line left open ended,
/// while stderr takes it ([`STALL`]) and [`PATIENCE`] at most; says how many of wasmpod's
/// messages were dropped, if any were. Whether stderr caught up.
pub(crate) fn finish() -> bool {
    let dropped = DROPPED.load(Ordering::Relaxed);
    if dropped > 0 {
        diagnostic(&format!(
            "wasmpod: {dropped} messages of wasmpod's were dropped: stderr was not read\n"
        ));
    }
    let (done, flushed) = std::sync::mpsc::sync_channel(1);
    if queue().try_send(Piece::Flushed(done)).is_err() {
        return false;
    }
    let deadline = std::time::Instant::now() + PATIENCE;
    let mut seen = WRITTEN.load(Ordering::Relaxed);
    loop {
        match flushed.recv_timeout(STALL) {
            Ok(()) => return true,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return false,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let now = WRITTEN.load(Ordering::Relaxed);
                if now == seen || std::time::Instant::now() >= deadline {
                    return false;
                }
                seen = now;
            }
        }
    }
}

/// wasmpod's own messages on stderr, through [`diagnostic`]: the writer of wasmpod's tracing
/// output.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Diagnostics;

impl Write for Diagnostics {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        diagnostic(&String::from_utf8_lossy(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Printer;

    /// What `pieces` of containers' output (`Some`: container, text, partial) and wasmpod's own
    /// messages (`None`) print as.
    fn printed(whole_lines: bool, pieces: &[Option<(&str, &str, bool)>]) -> String {
        let mut printer = Printer::new(whole_lines, false);
        let mut out = Vec::new();
        for piece in pieces {
            match *piece {
                Some((container, line, partial)) => {
                    printer.print(&mut out, container, line, partial).unwrap()
                }
                None => printer.message(&mut out, b"wasmpod: a warning\n").unwrap(),
            }
        }
        printer.end(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_partial_line_stays_open_for_its_container_only() {
        let pieces = [
            Some(("c", "name? ", true)),
            Some(("c", "read: bob", false)),
            Some(("c", "a", true)),
            Some(("d", "other", false)),
            Some(("c", "b", false)),
            Some(("c", "left open", true)),
        ];
        assert_eq!(
            printed(false, &pieces),
            "[c] name? read: bob\n[c] a\n[d] other\n[c] b\n[c] left open\n"
        );
        // Sharing stdout with the event stream: every piece a line of its own.
        assert_eq!(
            printed(true, &pieces),
            "[c] name? \n[c] read: bob\n[c] a\n[d] other\n[c] b\n[c] left open\n"
        );
    }

    #[test]
    fn wasmpods_own_message_ends_an_open_line_first() {
        let pieces = [
            Some(("c", "progress: 10%", true)),
            None,
            Some(("c", " 20%", false)),
            None,
        ];
        assert_eq!(
            printed(false, &pieces),
            "[c] progress: 10%\nwasmpod: a warning\n[c]  20%\nwasmpod: a warning\n"
        );
    }

    #[test]
    fn control_characters_are_shown_escaped_on_a_terminal() {
        let mut printer = Printer::new(false, true);
        let mut out = Vec::new();
        let line = "\x1b]0;owned\x07\x1b[2J\rother] x\ttab \u{9b}31m é";
        printer.print(&mut out, "c", line, false).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[c] \\x1b]0;owned\\x07\\x1b[2J\\rother] x\ttab \\u{9b}31m é\n"
        );
        // Not on a pipe: the bytes as they are.
        let mut printer = Printer::new(false, false);
        let mut out = Vec::new();
        printer.print(&mut out, "c", "\x1b[2J", false).unwrap();
        assert_eq!(out, b"[c] \x1b[2J\n");
    }
}
