//! Published ports: a host listener per `hostPort` (or `run --publish`) that carries each
//! connection it accepts into the pod's network, to the container port on the pod IP.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinHandle};

use super::PodNetwork;

/// One port to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PortMapping {
    /// Where the host listens.
    pub(crate) host: SocketAddr,
    /// The port inside the pod.
    pub(crate) container_port: u16,
    /// The field or option it comes from, for errors.
    pub(crate) origin: String,
}

/// The running host listeners of a pod; dropping it closes them.
pub(crate) struct Published(Vec<JoinHandle<()>>);

impl Drop for Published {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Opens every host listener (all or none) and starts forwarding.
pub(crate) fn publish(
    pod: &Arc<PodNetwork>,
    ports: &[PortMapping],
) -> Result<Published, (String, std::io::Error)> {
    let mut listeners = Vec::new();
    for p in ports {
        let open = || {
            let std = std::net::TcpListener::bind(p.host)?;
            std.set_nonblocking(true)?;
            tokio::net::TcpListener::from_std(std)
        };
        match open() {
            Ok(l) => listeners.push((l, p.container_port)),
            Err(e) => return Err((format!("{}: cannot listen on {}", p.origin, p.host), e)),
        }
    }
    let tasks = listeners
        .into_iter()
        .map(|(listener, port)| tokio::spawn(forward(listener, Arc::downgrade(pod), port)))
        .collect();
    Ok(Published(tasks))
}

/// How long the accept loop of a published port waits after a failed accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Connections one published port carries at once, so that a flood of connections to one port
/// costs the process a bounded number of descriptors. Past it, the connection that has waited
/// longest for its client is closed to make room (as nginx closes idle keep-alive connections
/// when it runs out): one that has sent nothing yet, one between requests, one whose pod side
/// has closed. When none waits for its client, new connections wait in the kernel's backlog.
const MAX_FORWARDED: usize = 1024;
/// How long a client may keep a connection open once the pod has closed its side: the bound the
/// kernel's `tcp_fin_timeout` puts on a half-closed socket.
const LINGER: Duration = Duration::from_secs(60);

async fn forward(listener: tokio::net::TcpListener, pod: Weak<PodNetwork>, port: u16) {
    let table = Arc::new(Table::default());
    loop {
        while !table.make_room(MAX_FORWARDED) {
            // Full of connections waiting on their pods: the next one to wait for its client
            // (or to close) signals.
            table.changed.notified().await;
        }
        let (outside, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors (EMFILE/ENFILE) or memory: the pending connection stays
                // queued and accept would fail again at once. Wait instead of spinning.
                tracing::warn!(port, "cannot accept a published connection: {e}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        // Requests and answers go out at once; Nagle's algorithm would hold a small write back
        // until the client acknowledges the last one.
        let _ = outside.set_nodelay(true);
        let Some(pod) = pod.upgrade() else {
            return;
        };
        let turn = Arc::new(Turn::new(&table));
        let watched = Watched {
            stream: outside,
            turn: turn.clone(),
        };
        let id = table.next.fetch_add(1, Ordering::Relaxed);
        // In the table before its task runs, so that a task that ends at once leaves nothing.
        table.lock().insert(id, Entry { turn, task: None });
        let gone = Gone {
            table: table.clone(),
            id,
        };
        let task = tokio::spawn(carry(watched, pod, port, peer, gone));
        if let Some(entry) = table.lock().get_mut(&id) {
            entry.task = Some(task.abort_handle());
        }
    }
}

/// Carries one connection until either side is done with it, or the client lingers past
/// [`LINGER`] after the pod closed.
async fn carry(
    mut outside: Watched<TcpStream>,
    pod: Arc<PodNetwork>,
    port: u16,
    peer: SocketAddr,
    _gone: Gone,
) {
    let closed = outside.turn.pod_closed.clone();
    match pod.connect_from_host(port).await {
        Ok(mut inside) => {
            drop(pod);
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut outside, &mut inside) => {}
                () = async { closed.notified().await; tokio::time::sleep(LINGER).await } => {
                    tracing::debug!(%peer, port, "closed a connection its client kept open");
                }
            }
        }
        // Nothing listens in the pod: the host client sees its connection closed.
        Err(e) => tracing::debug!(%peer, port, "published connection refused: {e}"),
    }
}

/// The connections a published port carries.
#[derive(Default)]
struct Table {
    entries: Mutex<HashMap<u64, Entry>>,
    /// Signalled when a connection closes or starts waiting for its client.
    changed: Notify,
    next: AtomicU64,
    epoch: OnceLock<Instant>,
}

struct Entry {
    turn: Arc<Turn>,
    task: Option<AbortHandle>,
}

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Time on the table's clock, never [`PODS_TURN`].
    fn now(&self) -> u64 {
        let epoch = *self.epoch.get_or_init(Instant::now);
        u64::try_from(epoch.elapsed().as_micros())
            .unwrap_or(u64::MAX - 1)
            .min(u64::MAX - 1)
    }

    /// Whether there is room for one more connection, closing the one that has waited longest
    /// for its client when the table is full.
    fn make_room(&self, max: usize) -> bool {
        let mut entries = self.lock();
        if entries.len() < max {
            return true;
        }
        let oldest = entries
            .iter()
            .map(|(id, e)| (e.turn.since.load(Ordering::Relaxed), *id))
            .filter(|(since, _)| *since != PODS_TURN)
            .min();
        let Some((_, id)) = oldest else {
            return false;
        };
        if let Some(task) = entries.remove(&id).and_then(|e| e.task) {
            task.abort();
        }
        true
    }
}

/// Removes a connection from its table when its task ends (or is aborted).
struct Gone {
    table: Arc<Table>,
    id: u64,
}

impl Drop for Gone {
    fn drop(&mut self) {
        self.table.lock().remove(&self.id);
        self.table.changed.notify_one();
    }
}

/// `Turn::since` while the client has bytes on their way to the pod.
const PODS_TURN: u64 = u64::MAX;

/// Whose turn a connection is: since when it has waited for its client, or [`PODS_TURN`].
struct Turn {
    since: AtomicU64,
    table: Weak<Table>,
    pod_closed: Arc<Notify>,
}

impl Turn {
    fn new(table: &Arc<Table>) -> Turn {
        Turn {
            since: AtomicU64::new(table.now()),
            table: Arc::downgrade(table),
            pod_closed: Arc::new(Notify::new()),
        }
    }

    fn clients(&self) {
        if self.since.load(Ordering::Relaxed) == PODS_TURN
            && let Some(table) = self.table.upgrade()
        {
            self.since.store(table.now(), Ordering::Relaxed);
            table.changed.notify_one();
        }
    }

    fn pods(&self) {
        self.since.store(PODS_TURN, Ordering::Relaxed);
    }
}

/// The host side of a connection, noting whose turn it is as bytes cross it.
struct Watched<S> {
    stream: S,
    turn: Arc<Turn>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.turn.pods();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.turn.clients();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.stream).poll_shutdown(cx);
        if polled.is_ready() {
            // The pod has closed its side: whatever the client does now, it is its turn.
            self.turn.clients();
            self.turn.pod_closed.notify_one();
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection in the table whose task never ends by itself.
    fn enter(table: &Arc<Table>, id: u64) -> (Arc<Turn>, JoinHandle<()>) {
        let turn = Arc::new(Turn::new(table));
        let task = tokio::spawn(std::future::pending());
        let entry = Entry {
            turn: turn.clone(),
            task: Some(task.abort_handle()),
        };
        table.lock().insert(id, entry);
        (turn, task)
    }

    #[tokio::test]
    async fn a_full_port_closes_the_connection_that_has_waited_longest_for_its_client() {
        let table = Arc::new(Table::default());
        let (first, first_task) = enter(&table, 1);
        let (_second, second_task) = enter(&table, 2);
        let (third, third_task) = enter(&table, 3);
        assert!(table.make_room(4), "room below the bound");
        // The oldest connection has a request on its way to the pod: it stays.
        first.pods();
        third.pods();
        assert!(table.make_room(3));
        assert!(second_task.await.unwrap_err().is_cancelled());
        assert_eq!(table.lock().len(), 2);
        // Every connection waits on its pod: nothing is closed, no room.
        assert!(!table.make_room(2));
        // The pod answers the third: it waits for its client now and goes first.
        third.clients();
        assert!(table.make_room(2));
        assert!(third_task.await.unwrap_err().is_cancelled());
        assert!(!first_task.is_finished());
        first_task.abort();
    }
}
