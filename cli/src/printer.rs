//! How `wasmpod run` prints its pod's output: each line as `[container] line`, a flushed
//! unfinished line (a prompt) at once. Its stderr carries wasmpod's own messages too (warnings,
//! a pending pod, pull progress): they go through one lock with the containers' stderr, and one
//! written while a container's line is open starts on a line of its own.

use std::io::{self, Write};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Prints one of wasmpod's streams: each line as `[container] line`. A partial line (a prompt the
/// guest flushed) shows at once and the rest of it continues it, unless another container's
/// output, or a message of wasmpod's own, comes first: that ends the printed line, and the rest
/// gets its own prefix.
pub(crate) struct Printer {
    /// The container whose line is printed up to its end, not ended yet.
    open: Option<String>,
    /// Every piece on a line of its own (the stream is shared with the event stream's lines).
    whole_lines: bool,
}

impl Printer {
    /// A printer; with `whole_lines`, a partial line is printed as a line of its own.
    pub(crate) const fn new(whole_lines: bool) -> Self {
        Printer {
            open: None,
            whole_lines,
        }
    }

    /// Prints a line (or the piece of one, `partial`) of `container`.
    pub(crate) fn print(
        &mut self,
        to: &mut impl Write,
        container: &str,
        line: &str,
        partial: bool,
    ) -> io::Result<()> {
        match self.open.take() {
            Some(open) if open == container => {}
            Some(_) => write!(to, "\n[{container}] ")?,
            None => write!(to, "[{container}] ")?,
        }
        to.write_all(line.as_bytes())?;
        if partial && !self.whole_lines {
            self.open = Some(container.to_owned());
            to.flush()
        } else {
            to.write_all(b"\n")
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

/// The printer of wasmpod's stderr, shared by the containers' lines and wasmpod's messages.
static STDERR: Mutex<Printer> = Mutex::new(Printer::new(false));

fn stderr_printer() -> MutexGuard<'static, Printer> {
    STDERR.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Prints a line (or the piece of one) of `container`'s stderr.
pub(crate) fn stderr(container: &str, line: &str, partial: bool) -> io::Result<()> {
    stderr_printer().print(&mut io::stderr().lock(), container, line, partial)
}

/// Ends a container's stderr line left open when the output ends.
pub(crate) fn end_stderr() -> io::Result<()> {
    stderr_printer().end(&mut io::stderr().lock())
}

/// Writes wasmpod's own `message` on stderr in one piece, after ending a container's line left
/// open.
pub(crate) fn diagnostic(message: &str) {
    let _ = Diagnostics.write_all(message.as_bytes());
}

/// wasmpod's own messages on stderr: each write ends a container's line left open first. The
/// writer of wasmpod's tracing output.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Diagnostics;

impl Write for Diagnostics {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        stderr_printer().message(&mut io::stderr().lock(), buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::Printer;

    /// What `pieces` of containers' output (`Some`: container, text, partial) and wasmpod's own
    /// messages (`None`) print as.
    fn printed(whole_lines: bool, pieces: &[Option<(&str, &str, bool)>]) -> String {
        let mut printer = Printer::new(whole_lines);
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
}
