//! The virtual TCP plumbing of a pod network: a connection is two bounded pipes, and a listener
//! queues connections up to its backlog, holding connectors while it is full (as Linux drops
//! SYNs).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use super::HostStream;
use super::error::ErrorCode;
use super::pipe::{Pipe, PipeReader, PipeWriter};

/// Linux's default `somaxconn`, the backlog when the guest does not choose one.
pub(super) const DEFAULT_BACKLOG: usize = 128;

/// One end of an established virtual connection.
pub(crate) struct Conn {
    pub(super) local: SocketAddr,
    pub(super) remote: SocketAddr,
    pub(super) reader: PipeReader,
    pub(super) writer: PipeWriter,
    pub(super) rx: Arc<Pipe>,
    pub(super) tx: Arc<Pipe>,
}

impl Conn {
    /// The two ends of a new connection from `client` to `server`.
    pub(crate) fn pair(client: SocketAddr, server: SocketAddr) -> (Conn, Conn) {
        let (up, up_reader, up_writer) = Pipe::new();
        let (down, down_reader, down_writer) = Pipe::new();
        let client_end = Conn {
            local: client,
            remote: server,
            reader: down_reader,
            writer: up_writer,
            rx: down.clone(),
            tx: up.clone(),
        };
        let server_end = Conn {
            local: server,
            remote: client,
            reader: up_reader,
            writer: down_writer,
            rx: up,
            tx: down,
        };
        (client_end, server_end)
    }
}

/// A listening socket's queue of connections not yet accepted.
pub(crate) struct Listener(Mutex<Queue>);

struct Queue {
    pending: VecDeque<Conn>,
    backlog: usize,
    closed: bool,
    acceptor: Option<Waker>,
    /// Connectors waiting for room in a full backlog.
    connectors: Vec<Waker>,
}

impl Listener {
    pub(crate) fn new(backlog: usize) -> Arc<Listener> {
        Arc::new(Listener(Mutex::new(Queue {
            pending: VecDeque::new(),
            backlog,
            closed: false,
            acceptor: None,
            connectors: Vec::new(),
        })))
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set_backlog(&self, backlog: usize) {
        let mut q = self.lock();
        q.backlog = backlog;
        q.connectors.drain(..).for_each(Waker::wake);
    }

    /// Queues a connection from `from` to `to` and returns the connector's end. A full backlog
    /// keeps the connector waiting, as Linux does by not answering its SYN.
    pub(crate) fn poll_connect(
        &self,
        cx: Option<&mut Context<'_>>,
        from: SocketAddr,
        to: SocketAddr,
    ) -> Poll<Result<Conn, ErrorCode>> {
        let mut q = self.lock();
        if q.closed {
            return Poll::Ready(Err(ErrorCode::ConnectionRefused));
        }
        if q.pending.len() >= q.backlog {
            if let Some(cx) = cx {
                q.connectors.push(cx.waker().clone());
            }
            return Poll::Pending;
        }
        let (client, server) = Conn::pair(from, to);
        q.pending.push_back(server);
        if let Some(w) = q.acceptor.take() {
            w.wake();
        }
        Poll::Ready(Ok(client))
    }

    /// The host connecting (published ports, probes): waits for room in the backlog.
    pub(crate) async fn connect_host(
        &self,
        from: SocketAddr,
        to: SocketAddr,
    ) -> io::Result<HostStream> {
        match poll_fn(|cx| self.poll_connect(Some(cx), from, to)).await {
            Ok(conn) => Ok(HostStream {
                reader: conn.reader,
                writer: conn.writer,
            }),
            Err(_) => Err(io::ErrorKind::ConnectionRefused.into()),
        }
    }

    pub(crate) fn try_accept(&self) -> Option<Conn> {
        let mut q = self.lock();
        let conn = q.pending.pop_front()?;
        q.connectors.drain(..).for_each(Waker::wake);
        Some(conn)
    }

    pub(crate) fn poll_pending(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut q = self.lock();
        if !q.pending.is_empty() || q.closed {
            return Poll::Ready(());
        }
        q.acceptor = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Stops listening: queued connections are dropped (their connectors see the end of the
    /// stream) and new ones are refused.
    pub(crate) fn close(&self) {
        let mut q = self.lock();
        q.closed = true;
        q.pending.clear();
        q.connectors.drain(..).for_each(Waker::wake);
    }
}

/// A pod port the host listens on (the server of an HTTP handler container): connections to it
/// from the pod, the node's pods and published ports queue here, and it stops listening when
/// dropped.
#[cfg(feature = "http")]
pub(crate) struct HostListener {
    pub(super) listener: Arc<Listener>,
    pub(super) _port: super::PortGuard,
}

#[cfg(feature = "http")]
impl HostListener {
    /// The next connection and where it comes from; `None` once the listener is closed.
    pub(crate) async fn accept(&self) -> Option<(HostStream, SocketAddr)> {
        poll_fn(|cx| {
            if let Some(conn) = self.listener.try_accept() {
                let remote = conn.remote;
                let stream = HostStream {
                    reader: conn.reader,
                    writer: conn.writer,
                };
                return Poll::Ready(Some((stream, remote)));
            }
            match self.listener.poll_pending(cx) {
                // Either a connection arrived (taken on the next poll) or the listener closed.
                Poll::Ready(()) if self.listener.lock().closed => Poll::Ready(None),
                Poll::Ready(()) => {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }
}

#[cfg(feature = "http")]
impl Drop for HostListener {
    fn drop(&mut self) {
        self.listener.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_full_backlog_holds_connectors_until_an_accept() {
        let listener = Listener::new(2);
        let (from, to) = (addr("127.0.0.1:40000"), addr("127.0.0.1:80"));
        assert!(listener.poll_connect(None, from, to).is_ready());
        assert!(listener.poll_connect(None, from, to).is_ready());
        assert!(listener.poll_connect(None, from, to).is_pending());
        let accepted = listener.try_accept().expect("a queued connection");
        assert_eq!((accepted.local, accepted.remote), (to, from));
        assert!(listener.poll_connect(None, from, to).is_ready());
    }

    #[test]
    fn a_closed_listener_refuses_and_drops_its_queue() {
        let listener = Listener::new(8);
        let (from, to) = (addr("127.0.0.1:40000"), addr("127.0.0.1:80"));
        let Poll::Ready(Ok(mut client)) = listener.poll_connect(None, from, to) else {
            panic!("connects");
        };
        listener.close();
        assert!(matches!(
            listener.poll_connect(None, from, to),
            Poll::Ready(Err(ErrorCode::ConnectionRefused))
        ));
        // The queued server end is gone: the client reads end-of-stream.
        use wasmtime_wasi::p2::InputStream;
        assert!(client.reader.read(1).is_err());
    }
}
