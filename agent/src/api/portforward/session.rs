//! kubectl's SPDY session: each local connection a pair of streams (error and data) sharing a
//! `requestID`, paired, connected into the pod, its client bytes held within the connection's
//! and the session's buffers, and reset when its pod side stalls.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinHandle;

use super::spdy::{self, Frame};
use super::{
    CHUNK, CONNECTION_BUFFER, Dial, MAX_CONNECTIONS, MAX_PENDING, QUEUE, SESSION_BUFFER, STALL,
};

/// A stream waiting for the other of its pair.
#[derive(Default)]
struct Pair {
    error: Option<u32>,
    data: Option<u32>,
    port: Option<u16>,
}

/// Bytes of the client's for a connection, holding their room in its buffer and the session's.
pub(super) struct Held {
    bytes: Vec<u8>,
    _room: (OwnedSemaphorePermit, OwnedSemaphorePermit),
}

/// A forwarded connection: where the client's bytes for it go, and its task (stopped when the
/// connection is dropped).
pub(super) struct Connection {
    pub(super) error: u32,
    pub(super) to_pod: Option<mpsc::UnboundedSender<Held>>,
    /// Room in its buffer, in bytes.
    pub(super) room: Arc<Semaphore>,
    /// Bytes the pod side has read, counted by its task.
    pub(super) read: Arc<AtomicU64>,
    pub(super) task: JoinHandle<()>,
}

impl Connection {
    pub(super) fn buffered(&self) -> usize {
        CONNECTION_BUFFER - self.room.available_permits()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What waiting for room in a buffer came to.
pub(super) enum Room {
    Held((OwnedSemaphorePermit, OwnedSemaphorePermit)),
    /// These connections' pod sides read nothing for [`STALL`] with bytes waiting.
    Stalled(Vec<u32>),
}

/// Room for `n` more bytes of connection `id` in its buffer and the session's (`session`):
/// at once when there is, otherwise as the pods read, until pod sides that hold bytes read
/// nothing for [`STALL`].
pub(super) async fn room(
    connections: &HashMap<u32, Connection>,
    session: &Arc<Semaphore>,
    id: u32,
    n: usize,
) -> Room {
    let own = connections[&id].room.clone();
    let n = n as u32; // at most CHUNK
    if let Ok(mine) = own.clone().try_acquire_many_owned(n)
        && let Ok(all) = session.clone().try_acquire_many_owned(n)
    {
        return Room::Held((mine, all));
    }
    loop {
        let before: Vec<(u32, u64)> = connections
            .iter()
            .map(|(id, c)| (*id, c.read.load(Ordering::Relaxed)))
            .collect();
        let both = async {
            let mine = own.clone().acquire_many_owned(n).await;
            let all = session.clone().acquire_many_owned(n).await;
            (mine, all)
        };
        match tokio::time::timeout(STALL, both).await {
            Ok((Ok(mine), Ok(all))) => return Room::Held((mine, all)),
            Ok(_) => return Room::Stalled(vec![id]), // never closed
            Err(_) => {
                let stalled: Vec<u32> = before
                    .into_iter()
                    .filter(|(id, read)| {
                        let c = &connections[id];
                        c.buffered() > 0 && c.read.load(Ordering::Relaxed) == *read
                    })
                    .map(|(id, _)| id)
                    .collect();
                if !stalled.is_empty() {
                    return Room::Stalled(stalled);
                }
            }
        }
    }
}

/// Serves one session until the client or the pod goes.
pub(super) async fn session<D: Dial>(io: impl AsyncRead + AsyncWrite + Send + 'static, target: D) {
    let target = Arc::new(target);
    let (reader, mut writer) = tokio::io::split(io);
    let (out, mut frames) = mpsc::channel::<Vec<u8>>(QUEUE);
    let write = tokio::spawn(async move {
        while let Some(frame) = frames.recv().await {
            if writer.write_all(&frame).await.is_err() {
                return;
            }
        }
        let _ = writer.shutdown().await;
    });
    let mut reader = spdy::Reader::new(reader);
    let mut replies = spdy::Writer::new();
    let mut pending: HashMap<String, Pair> = HashMap::new();
    // By data stream id.
    let mut connections: HashMap<u32, Connection> = HashMap::new();
    let session_room = Arc::new(Semaphore::new(SESSION_BUFFER));
    // The highest stream id the client opened.
    let mut last = 0u32;
    let ended = target.ended();
    tokio::pin!(ended);
    loop {
        let frame = tokio::select! {
            frame = reader.next() => frame,
            () = &mut ended => break,
        };
        let frame = match frame {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(pod = %target.which(), "port-forward: {e}");
                break;
            }
        };
        connections.retain(|_, c| !c.task.is_finished());
        let sent = match frame {
            Frame::SynStream { id, headers } => {
                // A client's streams are odd and each above the last (SPDY/3.1, 2.3.2): any
                // other id is a session error.
                if id <= last || id % 2 == 0 {
                    tracing::debug!(pod = %target.which(), id, last, "port-forward: a reused stream id");
                    let _ = out.send(spdy::goaway(last, spdy::PROTOCOL_ERROR)).await;
                    break;
                }
                last = id;
                let header = |name: &str| {
                    headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(name))
                        .map(|(_, v)| v.as_str())
                };
                let port = header("port").and_then(|p| p.parse::<u16>().ok());
                let request = header("requestid").unwrap_or("").to_owned();
                let kind = header("streamtype").unwrap_or("");
                if port.is_none_or(|p| p == 0) || !matches!(kind, "error" | "data") {
                    out.send(spdy::rst_stream(id, spdy::PROTOCOL_ERROR)).await
                } else if connections.len() >= MAX_CONNECTIONS
                    || (pending.len() >= MAX_PENDING && !pending.contains_key(&request))
                {
                    out.send(spdy::rst_stream(id, spdy::REFUSED_STREAM)).await
                } else {
                    let reply = out.send(replies.syn_reply(id)).await;
                    let pair = pending.entry(request.clone()).or_default();
                    pair.port = port;
                    match kind {
                        "error" => pair.error = Some(id),
                        _ => pair.data = Some(id),
                    }
                    if let Pair {
                        error: Some(error),
                        data: Some(data),
                        port: Some(port),
                    } = *pair
                    {
                        pending.remove(&request);
                        let (to_pod, from_client) = mpsc::unbounded_channel();
                        let read = Arc::new(AtomicU64::new(0));
                        let task = tokio::spawn(forward(
                            target.clone(),
                            port,
                            (error, data),
                            from_client,
                            read.clone(),
                            out.clone(),
                        ));
                        connections.insert(
                            data,
                            Connection {
                                error,
                                to_pod: Some(to_pod),
                                room: Arc::new(Semaphore::new(CONNECTION_BUFFER)),
                                read,
                                task,
                            },
                        );
                    }
                    reply
                }
            }
            Frame::Data { id, fin, data } => {
                let mut sent = Ok(());
                let mut pieces = data.chunks(CHUNK).peekable();
                while let Some(piece) = pieces.peek() {
                    if connections.get(&id).is_none_or(|c| c.to_pod.is_none()) {
                        break;
                    }
                    match room(&connections, &session_room, id, piece.len()).await {
                        Room::Held(room) => {
                            let c = connections.get_mut(&id).expect("checked above");
                            let held = Held {
                                bytes: piece.to_vec(),
                                _room: room,
                            };
                            if c.to_pod.as_ref().is_some_and(|p| p.send(held).is_err()) {
                                c.to_pod = None;
                            }
                            pieces.next();
                        }
                        Room::Stalled(stalled) => {
                            for data in stalled {
                                if let Some(c) = connections.remove(&data) {
                                    sent = sent.and(reset(&out, target.which(), data, &c).await);
                                }
                            }
                        }
                    }
                }
                if fin && let Some(c) = connections.get_mut(&id) {
                    // The pod reads its end of file.
                    c.to_pod = None;
                }
                sent
            }
            Frame::RstStream { id } => {
                connections.remove(&id);
                Ok(())
            }
            Frame::Ping { id } => out.send(spdy::ping(id)).await,
            Frame::GoAway => break,
            Frame::Ignored => Ok(()),
        };
        if sent.is_err() {
            break;
        }
    }
    // Every connection's task ends with the session.
    drop(connections);
    drop(out);
    let _ = write.await;
}

/// Resets connection `data` (its task stops as it is dropped), saying why on its error stream.
async fn reset(
    out: &mpsc::Sender<Vec<u8>>,
    which: &str,
    data: u32,
    c: &Connection,
) -> Result<(), mpsc::error::SendError<Vec<u8>>> {
    tracing::debug!(pod = %which, data, "port-forward: the pod stopped reading");
    let message = format!(
        "error forwarding to {which}: the pod read nothing for {STALL:?} with {} bytes \
         waiting: the connection is reset",
        c.buffered()
    );
    out.send(spdy::data(c.error, true, message.as_bytes()))
        .await?;
    out.send(spdy::rst_stream(data, spdy::CANCEL)).await
}

/// One connection: to `port` in the pod, the client's bytes from `from_client` (counted into
/// `read` as the pod takes them), the pod's to the data stream; the error stream carries why it
/// could not connect, then ends.
async fn forward<D: Dial>(
    pod: Arc<D>,
    port: u16,
    (error, data): (u32, u32),
    mut from_client: mpsc::UnboundedReceiver<Held>,
    read: Arc<AtomicU64>,
    out: mpsc::Sender<Vec<u8>>,
) {
    let connection = match pod.connect(port).await {
        Ok(c) => c,
        Err(e) => {
            let message = format!(
                "error forwarding port {port} to {}: failed to connect to localhost:{port} \
                 inside the pod's network: {e}",
                pod.which()
            );
            let _ = out.send(spdy::data(error, true, message.as_bytes())).await;
            let _ = out.send(spdy::data(data, true, &[])).await;
            return;
        }
    };
    let (mut from_pod, mut to_pod) = tokio::io::split(connection);
    let inbound = async move {
        while let Some(held) = from_client.recv().await {
            if to_pod.write_all(&held.bytes).await.is_err() {
                return;
            }
            read.fetch_add(held.bytes.len() as u64, Ordering::Relaxed);
        }
        let _ = to_pod.shutdown().await;
    };
    let outbound = {
        let out = out.clone();
        async move {
            let mut buf = vec![0; CHUNK];
            loop {
                match from_pod.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if out.send(spdy::data(data, false, &buf[..n])).await.is_err() {
                            return;
                        }
                    }
                }
            }
            // kubectl reads the error stream to its end once the data stream ended.
            let _ = out.send(spdy::data(data, true, &[])).await;
            let _ = out.send(spdy::data(error, true, &[])).await;
        }
    };
    // Each side ends on its own (a client done writing may still read the pod's answer); the
    // client resets the streams when its local connection closes.
    tokio::join!(inbound, outbound);
}
