//! Virtual TCP: listeners with an accept backlog, connections made of two [`Pipe`]s, and the
//! `wasi:sockets/tcp` state machine on top (egress connections use host sockets).

use std::future::{Future, poll_fn};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tokio::sync::OwnedSemaphorePermit;

use wasmtime_wasi::p2::Pollable;

use super::error::{ErrorCode, Family, error_code};
use super::listener::{Conn, DEFAULT_BACKLOG, Listener};
use super::pipe::{Pipe, PipeReader, PipeWriter};
use super::{Egress, HostStream, PodNetwork, PortGuard, Route};
use crate::memory::Reservation;

enum State {
    /// Unbound, or bound when the socket holds a port.
    Idle,
    BindStarted,
    ListenStarted(Arc<Listener>),
    Listening(Arc<Listener>),
    /// Waiting for room in a pod listener's backlog.
    Connecting {
        listener: Arc<Listener>,
        from: SocketAddr,
        to: SocketAddr,
    },
    /// Connecting through the host's network (egress).
    Dialing(
        tokio::task::JoinHandle<io::Result<tokio::net::TcpStream>>,
        /// The pod's slot for it, held as long as the connection.
        OwnedSemaphorePermit,
    ),
    ConnectDone(Result<Conn, ErrorCode>),
    /// Established; the socket keeps the pipes to shut them down.
    Connected {
        local: SocketAddr,
        remote: SocketAddr,
        rx: Arc<Pipe>,
        tx: Arc<Pipe>,
        /// The buffers' part of the container's memory budget.
        _buffers: Reservation,
    },
    Closed,
}

/// Socket options: stored and reported back; the virtual network has no use for them.
#[derive(Clone)]
pub(crate) struct Options {
    pub(crate) keep_alive: bool,
    pub(crate) keep_alive_idle: u64,
    pub(crate) keep_alive_interval: u64,
    pub(crate) keep_alive_count: u32,
    pub(crate) hop_limit: u8,
    pub(crate) receive_buffer: u64,
    pub(crate) send_buffer: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            keep_alive: false,
            keep_alive_idle: 7_200_000_000_000,
            keep_alive_interval: 75_000_000_000,
            keep_alive_count: 9,
            hop_limit: 64,
            receive_buffer: super::pipe::CAPACITY as u64,
            send_buffer: super::pipe::CAPACITY as u64,
        }
    }
}

/// A `wasi:sockets/tcp` socket of a pod.
#[allow(
    unreachable_pub,
    reason = "the `wasi:sockets` bindings re-export it as a resource type"
)]
pub struct TcpSocket {
    family: Family,
    port: Option<PortGuard>,
    state: State,
    backlog: usize,
    pub(crate) options: Options,
    /// The connection's two ends until the guest takes them: WASI 0.3's `receive` and `send`
    /// (0.2 takes both as streams when the connection is made).
    pub(crate) ends: (Option<PipeReader>, Option<PipeWriter>),
    /// The socket's own part of the container's memory budget (its buffers are charged when
    /// it connects).
    _charge: Reservation,
}

impl TcpSocket {
    /// What a socket costs the host before it connects.
    pub(crate) const BUDGET: u64 = 4096;

    pub(crate) fn new(family: Family, charge: Reservation) -> TcpSocket {
        TcpSocket {
            _charge: charge,
            family,
            port: None,
            state: State::Idle,
            backlog: DEFAULT_BACKLOG,
            options: Options::default(),
            ends: (None, None),
        }
    }

    pub(crate) fn family(&self) -> Family {
        self.family
    }

    /// Binds the socket to `addr` in its pod's port table (port 0: an ephemeral port).
    pub(crate) fn bind(
        &mut self,
        net: &Arc<PodNetwork>,
        addr: SocketAddr,
    ) -> Result<(), ErrorCode> {
        self.family.check(&addr)?;
        unicast(&addr)?;
        if !matches!(self.state, State::Idle) || self.port.is_some() {
            return Err(ErrorCode::InvalidState);
        }
        self.port = Some(net.bind_tcp(addr)?);
        Ok(())
    }

    /// Starts connecting to `to`: through the pod network, or the host's when egress allows.
    pub(crate) fn start_connect(
        &mut self,
        net: &Arc<PodNetwork>,
        to: SocketAddr,
    ) -> Result<(), ErrorCode> {
        self.family.check(&to)?;
        unicast(&to)?;
        if to.ip().is_unspecified() || to.port() == 0 {
            return Err(ErrorCode::InvalidArgument);
        }
        if !matches!(self.state, State::Idle) {
            return Err(ErrorCode::InvalidState);
        }
        // The `kubernetes` Service: the node's API, on the host, whatever the egress policy.
        if let Some(api) = net.service(to) {
            self.state = match net.outside_slot() {
                Some(slot) => {
                    State::Dialing(tokio::spawn(tokio::net::TcpStream::connect(api)), slot)
                }
                None => State::ConnectDone(Err(ErrorCode::NewSocketLimit)),
            };
            return Ok(());
        }
        self.state = match net.route(to.ip()) {
            Route::Pod(pod) => match pod.listener(to) {
                None => State::ConnectDone(Err(ErrorCode::ConnectionRefused)),
                Some(listener) => {
                    let from = match &self.port {
                        Some(p) if !p.addr().ip().is_unspecified() => p.addr(),
                        Some(p) => SocketAddr::new(net.source_for(to.ip()), p.addr().port()),
                        None => {
                            let port = net.ephemeral(&net.tcp()).unwrap_or(0);
                            SocketAddr::new(net.source_for(to.ip()), port)
                        }
                    };
                    match listener.poll_connect(None, from, to) {
                        Poll::Ready(result) => State::ConnectDone(result),
                        Poll::Pending => State::Connecting { listener, from, to },
                    }
                }
            },
            Route::Unreachable => State::ConnectDone(Err(ErrorCode::RemoteUnreachable)),
            Route::Outside if net.egress() == Egress::Deny => return Err(ErrorCode::AccessDenied),
            Route::Outside => match net.outside_slot() {
                Some(slot) => {
                    State::Dialing(tokio::spawn(tokio::net::TcpStream::connect(to)), slot)
                }
                None => State::ConnectDone(Err(ErrorCode::NewSocketLimit)),
            },
        };
        Ok(())
    }

    /// Polls the connect under way: `Ready` with its outcome once done, the socket then closed
    /// until [`TcpSocket::establish`]. Without `cx`, only looks.
    pub(crate) fn poll_connect(
        &mut self,
        cx: Option<&mut Context<'_>>,
    ) -> Poll<Result<Conn, ErrorCode>> {
        match &mut self.state {
            State::Connecting { listener, from, to } => {
                match listener.poll_connect(cx, *from, *to) {
                    Poll::Ready(result) => self.state = State::ConnectDone(result),
                    Poll::Pending => return Poll::Pending,
                }
            }
            State::Dialing(task, _) => {
                let mut noop = Context::from_waker(Waker::noop());
                match Pin::new(task).poll(cx.unwrap_or(&mut noop)) {
                    Poll::Ready(result) => self.dialed(result),
                    Poll::Pending => return Poll::Pending,
                }
            }
            State::ConnectDone(_) => {}
            _ => return Poll::Ready(Err(ErrorCode::NotInProgress)),
        }
        match std::mem::replace(&mut self.state, State::Closed) {
            State::ConnectDone(result) => Poll::Ready(result),
            _ => unreachable!("the state was just set to ConnectDone"),
        }
    }

    /// Makes the socket connected over `conn`, its buffers charged to `buffers`; returns the
    /// connection's ends.
    pub(crate) fn establish(
        &mut self,
        conn: Conn,
        buffers: Reservation,
    ) -> (PipeReader, PipeWriter) {
        self.state = State::Connected {
            local: conn.local,
            remote: conn.remote,
            rx: conn.rx,
            tx: conn.tx,
            _buffers: buffers,
        };
        (conn.reader, conn.writer)
    }

    /// Opens a listener on the bound port (0.3 binds an unbound socket to an ephemeral port
    /// first: `implicit_bind`); the caller sets the listening state.
    pub(crate) fn open_listener(
        &mut self,
        net: &Arc<PodNetwork>,
        implicit_bind: bool,
    ) -> Result<Arc<Listener>, ErrorCode> {
        if implicit_bind && self.port.is_none() && matches!(self.state, State::Idle) {
            let any = match self.family {
                Family::V4 => SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0)),
                Family::V6 => SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0)),
            };
            self.bind(net, any)?;
        }
        let addr = match (&self.state, &self.port) {
            (State::Idle, Some(port)) => port.addr(),
            _ => return Err(ErrorCode::InvalidState),
        };
        let listener = Listener::new(self.backlog);
        if let Some(slot) = net.tcp().get_mut(addr) {
            *slot = Some(listener.clone());
        }
        Ok(listener)
    }

    pub(crate) fn set_listening(&mut self, listener: Arc<Listener>) {
        self.state = State::Listening(listener);
    }

    /// A socket for a connection accepted from this listening one.
    /// `start-bind`: bound to `addr`, the bind to be finished.
    pub(crate) fn start_bind(
        &mut self,
        net: &Arc<PodNetwork>,
        addr: SocketAddr,
    ) -> Result<(), ErrorCode> {
        self.bind(net, addr)?;
        self.state = State::BindStarted;
        Ok(())
    }

    /// `finish-bind`.
    pub(crate) fn finish_bind(&mut self) -> Result<(), ErrorCode> {
        match self.state {
            State::BindStarted => {
                self.state = State::Idle;
                Ok(())
            }
            _ => Err(ErrorCode::NotInProgress),
        }
    }

    /// `start-listen`: a listener opened, the listen to be finished.
    pub(crate) fn start_listen(&mut self, net: &Arc<PodNetwork>) -> Result<(), ErrorCode> {
        let listener = self.open_listener(net, false)?;
        self.state = State::ListenStarted(listener);
        Ok(())
    }

    /// `finish-listen`.
    pub(crate) fn finish_listen(&mut self) -> Result<(), ErrorCode> {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::ListenStarted(l) => {
                self.state = State::Listening(l);
                Ok(())
            }
            other => {
                self.state = other;
                Err(ErrorCode::NotInProgress)
            }
        }
    }

    /// A connection waiting on this listening socket, and the socket it gets (`charge`: its
    /// share of the container's memory).
    pub(crate) fn accept(&self, charge: Reservation) -> Result<(TcpSocket, Conn), ErrorCode> {
        let State::Listening(listener) = &self.state else {
            return Err(ErrorCode::InvalidState);
        };
        let conn = listener.try_accept().ok_or(ErrorCode::WouldBlock)?;
        Ok((self.accepted(charge), conn))
    }

    /// Closes the connection's reading and/or writing half.
    pub(crate) fn shutdown(&self, read: bool, write: bool) -> Result<(), ErrorCode> {
        let State::Connected { rx, tx, .. } = &self.state else {
            return Err(ErrorCode::InvalidState);
        };
        if read {
            rx.close_read();
        }
        if write {
            tx.close_write();
        }
        Ok(())
    }

    pub(crate) fn accepted(&self, charge: Reservation) -> TcpSocket {
        let mut accepted = TcpSocket::new(self.family, charge);
        accepted.options = self.options.clone();
        accepted
    }

    pub(crate) fn local_address(&self) -> Result<SocketAddr, ErrorCode> {
        match (&self.state, &self.port) {
            (State::Connected { local, .. }, _) => Ok(*local),
            (State::BindStarted, _) => Err(ErrorCode::ConcurrencyConflict),
            (_, Some(port)) => Ok(port.addr()),
            _ => Err(ErrorCode::InvalidState),
        }
    }

    pub(crate) fn remote_address(&self) -> Result<SocketAddr, ErrorCode> {
        match &self.state {
            State::Connected { remote, .. } => Ok(*remote),
            _ => Err(ErrorCode::InvalidState),
        }
    }

    pub(crate) fn is_listening(&self) -> bool {
        matches!(self.state, State::Listening(_))
    }

    pub(crate) fn set_backlog(&mut self, value: u64) -> Result<(), ErrorCode> {
        if value == 0 {
            return Err(ErrorCode::InvalidArgument);
        }
        let backlog = value.min(4096) as usize;
        match &self.state {
            State::Listening(l) => l.set_backlog(backlog),
            State::Idle | State::BindStarted => {}
            _ => return Err(ErrorCode::InvalidState),
        }
        self.backlog = backlog;
        Ok(())
    }
}

impl Drop for TcpSocket {
    fn drop(&mut self) {
        if let State::Listening(l) | State::ListenStarted(l) = &self.state {
            l.close();
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for TcpSocket {
    async fn ready(&mut self) {
        match &mut self.state {
            State::Listening(l) => poll_fn(|cx| l.poll_pending(cx)).await,
            State::Connecting { listener, from, to } => {
                let (from, to) = (*from, *to);
                let result = poll_fn(|cx| listener.poll_connect(Some(cx), from, to)).await;
                self.state = State::ConnectDone(result);
            }
            State::Dialing(task, _) => {
                let result = task.await;
                self.dialed(result);
            }
            _ => {}
        }
    }
}

impl TcpSocket {
    /// A dial's outcome: connected (holding the pod's slot for it) or failed.
    fn dialed(
        &mut self,
        result: Result<io::Result<tokio::net::TcpStream>, tokio::task::JoinError>,
    ) {
        if let State::Dialing(_, slot) = std::mem::replace(&mut self.state, State::Closed) {
            self.state = State::ConnectDone(dialed(result, slot));
        }
    }
}

/// An egress connection is relayed through a pipe pair, so the guest sees the same streams
/// (and the same half-close and backpressure) as inside the pod.
fn dialed(
    result: Result<io::Result<tokio::net::TcpStream>, tokio::task::JoinError>,
    slot: OwnedSemaphorePermit,
) -> Result<Conn, ErrorCode> {
    let mut stream = match result {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Err(error_code(&e)),
        Err(_) => return Err(ErrorCode::Unknown),
    };
    let (local, remote) = match (stream.local_addr(), stream.peer_addr()) {
        (Ok(l), Ok(r)) => (l, r),
        (Err(e), _) | (_, Err(e)) => return Err(error_code(&e)),
    };
    let (guest, relay) = Conn::pair(local, remote);
    let mut relay = HostStream {
        reader: relay.reader,
        writer: relay.writer,
    };
    tokio::spawn(async move {
        let _slot = slot;
        let _ = tokio::io::copy_bidirectional(&mut stream, &mut relay).await;
    });
    Ok(guest)
}

/// TCP binds and connects only to unicast addresses (not multicast, not the broadcast address).
fn unicast(addr: &SocketAddr) -> Result<(), ErrorCode> {
    let unicast = match addr.ip() {
        std::net::IpAddr::V4(ip) => !ip.is_multicast() && !ip.is_broadcast(),
        std::net::IpAddr::V6(ip) => !ip.is_multicast(),
    };
    if !unicast {
        return Err(ErrorCode::InvalidArgument);
    }
    Ok(())
}

/// Both directions' buffers of a connection can fill: they count against the container's memory.
pub(crate) fn reserve_buffers(
    budget: &Arc<crate::memory::Budget>,
) -> Result<Reservation, ErrorCode> {
    budget
        .reserve(2 * super::pipe::CAPACITY as u64)
        .ok_or(ErrorCode::OutOfMemory)
}
