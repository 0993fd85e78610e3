//! Unfinished lines a guest flushed (a prompt before it reads stdin). Each is held for
//! [`HOLD`]: what continues it within that time joins it, so a line written in pieces (Rust's
//! unbuffered stderr writes each piece of an `eprintln!`) stays one record; past it, it is
//! written as a partial (`P`) record and shows at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Chunk, MAX_LINE, Stream};

/// How long a flushed, unfinished line waits for its continuation.
pub(super) const HOLD: Duration = Duration::from_millis(50);

/// One held line.
struct Piece {
    text: String,
    time: jiff::Timestamp,
    until: Instant,
}

/// The held lines of a pod, one at most per container instance and stream.
#[derive(Default)]
pub(super) struct Held {
    pieces: HashMap<(Arc<str>, i32, Stream), Piece>,
}

impl Held {
    /// When the next held line is due, if any is held.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.pieces.values().map(|p| p.until).min()
    }

    /// Passes `batch` on in order, joining held lines to what continues them, holding the
    /// flushed ones, and adding those due at `now` (all of them when `all`) as partial records.
    /// An instance's end ends its held lines (as whole records).
    #[expect(
        clippy::vec_box,
        reason = "chunks come boxed through the channel; unboxing would move each one again"
    )]
    pub(super) fn settle(
        &mut self,
        batch: Vec<Box<Chunk>>,
        now: Instant,
        all: bool,
    ) -> Vec<Box<Chunk>> {
        if self.pieces.is_empty() && !batch.iter().any(|c| c.flushed) {
            return batch;
        }
        let mut out = Vec::with_capacity(batch.len());
        for mut chunk in batch {
            if chunk.end {
                for stream in [Stream::Stdout, Stream::Stderr] {
                    let key = (chunk.container.clone(), chunk.instance, stream);
                    if let Some(piece) = self.pieces.remove(&key) {
                        out.push(piece.into_chunk(key, false));
                    }
                }
                out.push(chunk);
                continue;
            }
            let key = (chunk.container.clone(), chunk.instance, chunk.stream);
            if let Some((_, first)) = chunk.lines.first_mut()
                && let Some(piece) = self.pieces.remove(&key)
            {
                if piece.text.len() + first.len() <= MAX_LINE {
                    first.insert_str(0, &piece.text);
                } else {
                    out.push(piece.into_chunk(key.clone(), true));
                }
            }
            if chunk.flushed {
                if let Some((_, text)) = chunk.lines.pop() {
                    let (time, until) = (chunk.time, now + HOLD);
                    self.pieces.insert(key, Piece { text, time, until });
                }
                continue;
            }
            out.push(chunk);
        }
        let due = self.pieces.extract_if(|_, p| all || p.until <= now);
        out.extend(due.map(|(key, piece)| piece.into_chunk(key, true)));
        out
    }
}

impl Piece {
    fn into_chunk(
        self,
        (container, instance, stream): (Arc<str>, i32, Stream),
        partial: bool,
    ) -> Box<Chunk> {
        Box::new(Chunk {
            container,
            instance,
            stream,
            time: self.time,
            lines: vec![(partial, self.text)],
            flushed: false,
            end: false,
            written: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(stream: Stream, lines: &[(bool, &str)], flushed: bool) -> Box<Chunk> {
        Box::new(Chunk {
            container: "c".into(),
            instance: 0,
            stream,
            time: jiff::Timestamp::UNIX_EPOCH,
            lines: lines.iter().map(|&(p, l)| (p, l.to_owned())).collect(),
            flushed,
            end: false,
            written: None,
        })
    }

    fn records(chunks: &[Box<Chunk>]) -> Vec<(Stream, bool, &str)> {
        chunks
            .iter()
            .flat_map(|c| c.lines.iter().map(|(p, l)| (c.stream, *p, l.as_str())))
            .collect()
    }

    #[test]
    fn pieces_of_a_line_join_and_a_lone_prompt_shows_after_the_hold() {
        use Stream::{Stderr, Stdout};
        let mut held = Held::default();
        let t0 = Instant::now();
        // An `eprintln!` in three writes, each flushed: one record.
        let out = held.settle(
            vec![
                chunk(Stderr, &[(true, "agnhost: ")], true),
                chunk(Stderr, &[(true, "no such file")], true),
            ],
            t0,
            false,
        );
        assert_eq!(records(&out), []);
        assert_eq!(held.next_due(), Some(t0 + HOLD));
        let out = held.settle(vec![chunk(Stderr, &[(false, "")], false)], t0, false);
        assert_eq!(records(&out), [(Stderr, false, "agnhost: no such file")]);
        assert_eq!(held.next_due(), None);

        // A prompt: held, then written as a partial record once due; its answer's line
        // continues it in a record of its own.
        let out = held.settle(vec![chunk(Stdout, &[(true, "name? ")], true)], t0, false);
        assert_eq!(records(&out), []);
        let out = held.settle(Vec::new(), t0 + HOLD, false);
        assert_eq!(records(&out), [(Stdout, true, "name? ")]);
        let out = held.settle(
            vec![chunk(Stdout, &[(false, "read: bob")], false)],
            t0,
            false,
        );
        assert_eq!(records(&out), [(Stdout, false, "read: bob")]);

        // Streams are held apart; an instance's end writes what it held as whole lines.
        held.settle(vec![chunk(Stdout, &[(true, "out")], true)], t0, false);
        let out = held.settle(vec![chunk(Stderr, &[(false, "err")], false)], t0, false);
        assert_eq!(records(&out), [(Stderr, false, "err")]);
        let mut end = chunk(Stdout, &[], false);
        end.end = true;
        let out = held.settle(vec![end], t0, false);
        assert_eq!(records(&out), [(Stdout, false, "out")]);
        assert!(out.last().unwrap().end);

        // A join never makes a record longer than the limit; `all` releases everything.
        let long = "x".repeat(MAX_LINE);
        held.settle(vec![chunk(Stdout, &[(true, "start")], true)], t0, false);
        let out = held.settle(vec![chunk(Stdout, &[(true, &long)], false)], t0, false);
        assert_eq!(
            records(&out),
            [(Stdout, true, "start"), (Stdout, true, &*long)]
        );
        held.settle(vec![chunk(Stdout, &[(true, "left")], true)], t0, false);
        let out = held.settle(Vec::new(), t0, true);
        assert_eq!(records(&out), [(Stdout, true, "left")]);
    }
}
