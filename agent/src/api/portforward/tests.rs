//! Tests of `portforward`.

use std::sync::atomic::AtomicUsize;
use std::time::Instant;

use tokio::io::{DuplexStream, ReadHalf, WriteHalf};

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;

use super::session::{Connection, Room, room};
use super::*;

const NEVER_READ: u16 = 1;
const ECHO: u16 = 2;

/// A pod with a port whose connections are never read and one that echoes.
#[derive(Default)]
struct Stub {
    unread: std::sync::Mutex<Vec<DuplexStream>>,
    /// Echo connections still open on the pod's side.
    open: Arc<AtomicUsize>,
}

impl Dial for Stub {
    type Connection = DuplexStream;

    async fn connect(&self, port: u16) -> std::io::Result<DuplexStream> {
        let (ours, theirs) = tokio::io::duplex(1024);
        match port {
            NEVER_READ => self.unread.lock().unwrap().push(theirs),
            _ => {
                let open = self.open.clone();
                open.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let (mut r, mut w) = tokio::io::split(theirs);
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        }
        Ok(ours)
    }

    async fn ended(&self) {
        std::future::pending().await
    }

    fn which(&self) -> &str {
        "pod stub"
    }
}

/// What the session sent the client.
#[derive(Debug, PartialEq)]
enum Sent {
    Reply(u32),
    Rst(u32, u32),
    Ping(u32),
    GoAway(u32),
    Data(u32, bool, Vec<u8>),
}

async fn next(r: &mut ReadHalf<DuplexStream>) -> Option<Sent> {
    let mut head = [0u8; 8];
    r.read_exact(&mut head).await.ok()?;
    let length = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
    let mut body = vec![0; length];
    r.read_exact(&mut body).await.ok()?;
    let word = |at: usize| u32::from_be_bytes(body[at..at + 4].try_into().unwrap());
    if head[0] & 0x80 == 0 {
        let id = u32::from_be_bytes(head[..4].try_into().unwrap());
        return Some(Sent::Data(id, head[4] & 1 != 0, body));
    }
    Some(match u16::from_be_bytes([head[2], head[3]]) {
        2 => Sent::Reply(word(0)),
        3 => Sent::Rst(word(0), word(4)),
        6 => Sent::Ping(word(0)),
        7 => Sent::GoAway(word(4)),
        other => panic!("unexpected control frame {other}"),
    })
}

/// A session over an in-memory pipe: the client's halves.
fn start(
    stub: Stub,
) -> (
    ReadHalf<DuplexStream>,
    WriteHalf<DuplexStream>,
    JoinHandle<()>,
) {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let served = tokio::spawn(session(server, stub));
    let (r, w) = tokio::io::split(client);
    (r, w, served)
}

/// The error and data streams of connection `request` to `port`.
fn open(deflate: &mut flate2::Compress, first: u32, port: u16, request: &str) -> Vec<u8> {
    let port = port.to_string();
    let mut wire = spdy::syn_stream(
        deflate,
        first,
        &[
            ("streamtype", "error"),
            ("port", &port),
            ("requestid", request),
        ],
    );
    wire.extend(spdy::syn_stream(
        deflate,
        first + 2,
        &[
            ("streamtype", "data"),
            ("port", &port),
            ("requestid", request),
        ],
    ));
    wire
}

#[tokio::test]
async fn a_connection_the_pod_does_not_read_is_reset_and_the_others_go_on() {
    let stub = Stub::default();
    let (mut r, mut w, _served) = start(stub);
    let mut deflate = spdy::client_deflate();
    // Connection 1/3 to a port that never reads, sent 4 MiB in frames of 1 MiB; then
    // connection 5/7 to the echo port and a PING, behind them on the same session.
    let mut wire = open(&mut deflate, 1, NEVER_READ, "0");
    for _ in 0..4 {
        wire.extend(spdy::data(3, false, &vec![7; spdy::MAX_FRAME]));
    }
    wire.extend(open(&mut deflate, 5, ECHO, "1"));
    wire.extend(spdy::data(7, false, b"hello"));
    wire.extend(spdy::ping(9));
    let writer = tokio::spawn(async move {
        w.write_all(&wire).await.unwrap();
        w
    });
    let begun = Instant::now();
    let mut seen = Vec::new();
    let deadline = Duration::from_secs(10);
    while !(seen.contains(&Sent::Data(7, false, b"hello".to_vec()))
        && seen.contains(&Sent::Ping(9)))
    {
        let frame = tokio::time::timeout_at((begun + deadline).into(), next(&mut r))
            .await
            .unwrap_or_else(|_| panic!("the session stalled; it sent {seen:?}"));
        seen.push(frame.expect("the session ended"));
    }
    // The unread connection was reset, saying why, after the stall and not before.
    assert!(begun.elapsed() >= STALL, "{:?}", begun.elapsed());
    assert!(seen.contains(&Sent::Rst(3, spdy::CANCEL)), "{seen:?}");
    let said = seen.iter().find_map(|f| match f {
        Sent::Data(1, true, text) => Some(String::from_utf8_lossy(text).into_owned()),
        _ => None,
    });
    assert!(
        said.as_deref().is_some_and(|s| s.contains("read nothing")),
        "{said:?}"
    );
    drop(writer.await.unwrap());
}

#[tokio::test]
async fn a_connections_buffer_holds_its_bound_and_a_stall_ends_in_a_reset() {
    let session_room = Arc::new(Semaphore::new(SESSION_BUFFER));
    let mut connections = HashMap::new();
    let (to_pod, _from_client) = mpsc::unbounded_channel();
    connections.insert(
        3,
        Connection {
            error: 1,
            to_pod: Some(to_pod),
            room: Arc::new(Semaphore::new(CONNECTION_BUFFER)),
            read: Arc::default(),
            task: tokio::spawn(async {}),
        },
    );
    let mut held = Vec::new();
    for _ in 0..CONNECTION_BUFFER / CHUNK {
        match room(&connections, &session_room, 3, CHUNK).await {
            Room::Held(room) => held.push(room),
            Room::Stalled(_) => panic!("stalled before the bound"),
        }
    }
    assert_eq!(connections[&3].buffered(), CONNECTION_BUFFER);
    // One byte more waits, and as nothing is read it ends in a reset, not in more held.
    let begun = Instant::now();
    assert!(matches!(
        room(&connections, &session_room, 3, 1).await,
        Room::Stalled(ids) if ids == [3]
    ));
    assert!(begun.elapsed() >= STALL);
    assert_eq!(
        SESSION_BUFFER - session_room.available_permits(),
        CONNECTION_BUFFER
    );
}

#[tokio::test]
async fn a_reused_stream_id_ends_the_session_and_every_connection_with_it() {
    let stub = Stub::default();
    let open_echoes = stub.open.clone();
    let (mut r, mut w, served) = start(stub);
    let mut deflate = spdy::client_deflate();
    let mut wire = open(&mut deflate, 1, ECHO, "0");
    wire.extend(spdy::data(3, false, b"one"));
    w.write_all(&wire).await.unwrap();
    let mut seen = Vec::new();
    while !seen.contains(&Sent::Data(3, false, b"one".to_vec())) {
        seen.push(next(&mut r).await.expect("the session ended"));
    }
    assert_eq!(open_echoes.load(Ordering::SeqCst), 1);
    // The data stream's id again, for another connection.
    w.write_all(&open(&mut deflate, 1, ECHO, "1"))
        .await
        .unwrap();
    let mut rest = Vec::new();
    while let Some(frame) = next(&mut r).await {
        rest.push(frame);
    }
    assert_eq!(rest, [Sent::GoAway(spdy::PROTOCOL_ERROR)]);
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("the session ended")
        .unwrap();
    // The connection's task ended with the session: the pod's side saw it close.
    let begun = Instant::now();
    while open_echoes.load(Ordering::SeqCst) != 0 {
        assert!(
            begun.elapsed() < Duration::from_secs(5),
            "a connection outlived its session"
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
