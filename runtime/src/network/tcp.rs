//! Virtual TCP: listeners with an accept backlog, connections made of two [`Pipe`]s, and the
//! `wasi:sockets/tcp` state machine on top (egress connections use host sockets).

use std::future::{Future, poll_fn};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tokio::sync::OwnedSemaphorePermit;

use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, DynPollable, Pollable, subscribe};

use super::error::{ErrorCode, Family, error_code};
use super::listener::{Conn, DEFAULT_BACKLOG, Listener};
use super::pipe::{Pipe, PipeReader, PipeWriter};
use super::wasi::{IpAddressFamily, IpSocketAddress, Network, SocketResult, Sockets, tcp};
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
pub(super) struct Options {
    pub(super) keep_alive: bool,
    pub(super) keep_alive_idle: u64,
    pub(super) keep_alive_interval: u64,
    pub(super) keep_alive_count: u32,
    pub(super) hop_limit: u8,
    pub(super) receive_buffer: u64,
    pub(super) send_buffer: u64,
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
    pub(super) options: Options,
    /// The connection's two ends until the guest takes them: WASI 0.3's `receive` and `send`
    /// (0.2 takes both as streams when the connection is made).
    pub(super) ends: (Option<PipeReader>, Option<PipeWriter>),
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

    pub(super) fn family(&self) -> Family {
        self.family
    }

    /// Binds the socket to `addr` in its pod's port table (port 0: an ephemeral port).
    pub(super) fn bind(
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
    pub(super) fn start_connect(
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
    pub(super) fn poll_connect(
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
    pub(super) fn establish(
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
    pub(super) fn open_listener(
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

    pub(super) fn set_listening(&mut self, listener: Arc<Listener>) {
        self.state = State::Listening(listener);
    }

    /// A socket for a connection accepted from this listening one.
    pub(super) fn accepted(&self, charge: Reservation) -> TcpSocket {
        let mut accepted = TcpSocket::new(self.family, charge);
        accepted.options = self.options.clone();
        accepted
    }

    pub(super) fn local_address(&self) -> Result<SocketAddr, ErrorCode> {
        match (&self.state, &self.port) {
            (State::Connected { local, .. }, _) => Ok(*local),
            (State::BindStarted, _) => Err(ErrorCode::ConcurrencyConflict),
            (_, Some(port)) => Ok(port.addr()),
            _ => Err(ErrorCode::InvalidState),
        }
    }

    pub(super) fn remote_address(&self) -> Result<SocketAddr, ErrorCode> {
        match &self.state {
            State::Connected { remote, .. } => Ok(*remote),
            _ => Err(ErrorCode::InvalidState),
        }
    }

    pub(super) fn is_listening(&self) -> bool {
        matches!(self.state, State::Listening(_))
    }

    pub(super) fn set_backlog(&mut self, value: u64) -> Result<(), ErrorCode> {
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

impl Sockets<'_> {
    fn tcp(&mut self, this: &Resource<TcpSocket>) -> SocketResult<&mut TcpSocket> {
        Ok(self.table.get_mut(this)?)
    }

    /// Hands a connection to the guest: its streams become children of the socket.
    fn connected(
        &mut self,
        this: &Resource<TcpSocket>,
        conn: Conn,
    ) -> SocketResult<(Resource<DynInputStream>, Resource<DynOutputStream>)> {
        let buffers = reserve_buffers(self.budget)?;
        let (reader, writer) = self.tcp(this)?.establish(conn, buffers);
        let input: DynInputStream = Box::new(reader);
        let output: DynOutputStream = Box::new(writer);
        let input = self.table.push_child(input, this)?;
        let output = self.table.push_child(output, this)?;
        Ok((input, output))
    }
}

/// Both directions' buffers of a connection can fill: they count against the container's memory.
pub(super) fn reserve_buffers(
    budget: &Arc<crate::memory::Budget>,
) -> Result<Reservation, ErrorCode> {
    budget
        .reserve(2 * super::pipe::CAPACITY as u64)
        .ok_or(ErrorCode::OutOfMemory)
}

impl tcp::Host for Sockets<'_> {}

impl tcp::HostTcpSocket for Sockets<'_> {
    fn start_bind(
        &mut self,
        this: Resource<TcpSocket>,
        _network: Resource<Network>,
        local_address: IpSocketAddress,
    ) -> SocketResult<()> {
        let net = self.net.clone();
        let socket = self.tcp(&this)?;
        socket.bind(&net, local_address.into())?;
        socket.state = State::BindStarted;
        Ok(())
    }

    fn finish_bind(&mut self, this: Resource<TcpSocket>) -> SocketResult<()> {
        let socket = self.tcp(&this)?;
        match socket.state {
            State::BindStarted => {
                socket.state = State::Idle;
                Ok(())
            }
            _ => Err(ErrorCode::NotInProgress.into()),
        }
    }

    fn start_connect(
        &mut self,
        this: Resource<TcpSocket>,
        _network: Resource<Network>,
        remote_address: IpSocketAddress,
    ) -> SocketResult<()> {
        let net = self.net.clone();
        Ok(self
            .tcp(&this)?
            .start_connect(&net, remote_address.into())?)
    }

    fn finish_connect(
        &mut self,
        this: Resource<TcpSocket>,
    ) -> SocketResult<(Resource<DynInputStream>, Resource<DynOutputStream>)> {
        match self.tcp(&this)?.poll_connect(None) {
            Poll::Ready(Ok(conn)) => self.connected(&this, conn),
            Poll::Ready(Err(code)) => Err(code.into()),
            Poll::Pending => Err(ErrorCode::WouldBlock.into()),
        }
    }

    fn start_listen(&mut self, this: Resource<TcpSocket>) -> SocketResult<()> {
        let net = self.net.clone();
        let socket = self.tcp(&this)?;
        let listener = socket.open_listener(&net, false)?;
        socket.state = State::ListenStarted(listener);
        Ok(())
    }

    fn finish_listen(&mut self, this: Resource<TcpSocket>) -> SocketResult<()> {
        let socket = self.tcp(&this)?;
        match std::mem::replace(&mut socket.state, State::Closed) {
            State::ListenStarted(l) => {
                socket.state = State::Listening(l);
                Ok(())
            }
            other => {
                socket.state = other;
                Err(ErrorCode::NotInProgress.into())
            }
        }
    }

    fn accept(
        &mut self,
        this: Resource<TcpSocket>,
    ) -> SocketResult<(
        Resource<TcpSocket>,
        Resource<DynInputStream>,
        Resource<DynOutputStream>,
    )> {
        let charge = self
            .budget
            .reserve(TcpSocket::BUDGET)
            .ok_or(ErrorCode::OutOfMemory)?;
        let socket = self.tcp(&this)?;
        let State::Listening(listener) = &socket.state else {
            return Err(ErrorCode::InvalidState.into());
        };
        let conn = listener.try_accept().ok_or(ErrorCode::WouldBlock)?;
        let accepted = socket.accepted(charge);
        let accepted = self.table.push(accepted)?;
        let (input, output) = self.connected(&accepted, conn)?;
        Ok((accepted, input, output))
    }

    fn local_address(&mut self, this: Resource<TcpSocket>) -> SocketResult<IpSocketAddress> {
        Ok(self.tcp(&this)?.local_address()?.into())
    }

    fn remote_address(&mut self, this: Resource<TcpSocket>) -> SocketResult<IpSocketAddress> {
        Ok(self.tcp(&this)?.remote_address()?.into())
    }

    fn is_listening(&mut self, this: Resource<TcpSocket>) -> wasmtime::Result<bool> {
        Ok(self.table.get(&this)?.is_listening())
    }

    fn address_family(&mut self, this: Resource<TcpSocket>) -> wasmtime::Result<IpAddressFamily> {
        Ok(self.table.get(&this)?.family.into())
    }

    fn set_listen_backlog_size(
        &mut self,
        this: Resource<TcpSocket>,
        value: u64,
    ) -> SocketResult<()> {
        Ok(self.tcp(&this)?.set_backlog(value)?)
    }

    fn keep_alive_enabled(&mut self, this: Resource<TcpSocket>) -> SocketResult<bool> {
        Ok(self.tcp(&this)?.options.keep_alive)
    }

    fn set_keep_alive_enabled(
        &mut self,
        this: Resource<TcpSocket>,
        value: bool,
    ) -> SocketResult<()> {
        self.tcp(&this)?.options.keep_alive = value;
        Ok(())
    }

    fn keep_alive_idle_time(&mut self, this: Resource<TcpSocket>) -> SocketResult<u64> {
        Ok(self.tcp(&this)?.options.keep_alive_idle)
    }

    fn set_keep_alive_idle_time(
        &mut self,
        this: Resource<TcpSocket>,
        value: u64,
    ) -> SocketResult<()> {
        self.tcp(&this)?.options.keep_alive_idle = positive(value)?;
        Ok(())
    }

    fn keep_alive_interval(&mut self, this: Resource<TcpSocket>) -> SocketResult<u64> {
        Ok(self.tcp(&this)?.options.keep_alive_interval)
    }

    fn set_keep_alive_interval(
        &mut self,
        this: Resource<TcpSocket>,
        value: u64,
    ) -> SocketResult<()> {
        self.tcp(&this)?.options.keep_alive_interval = positive(value)?;
        Ok(())
    }

    fn keep_alive_count(&mut self, this: Resource<TcpSocket>) -> SocketResult<u32> {
        Ok(self.tcp(&this)?.options.keep_alive_count)
    }

    fn set_keep_alive_count(&mut self, this: Resource<TcpSocket>, value: u32) -> SocketResult<()> {
        self.tcp(&this)?.options.keep_alive_count = positive(value)?;
        Ok(())
    }

    fn hop_limit(&mut self, this: Resource<TcpSocket>) -> SocketResult<u8> {
        Ok(self.tcp(&this)?.options.hop_limit)
    }

    fn set_hop_limit(&mut self, this: Resource<TcpSocket>, value: u8) -> SocketResult<()> {
        self.tcp(&this)?.options.hop_limit = positive(value)?;
        Ok(())
    }

    fn receive_buffer_size(&mut self, this: Resource<TcpSocket>) -> SocketResult<u64> {
        Ok(self.tcp(&this)?.options.receive_buffer)
    }

    fn set_receive_buffer_size(
        &mut self,
        this: Resource<TcpSocket>,
        value: u64,
    ) -> SocketResult<()> {
        self.tcp(&this)?.options.receive_buffer = positive(value)?;
        Ok(())
    }

    fn send_buffer_size(&mut self, this: Resource<TcpSocket>) -> SocketResult<u64> {
        Ok(self.tcp(&this)?.options.send_buffer)
    }

    fn set_send_buffer_size(&mut self, this: Resource<TcpSocket>, value: u64) -> SocketResult<()> {
        self.tcp(&this)?.options.send_buffer = positive(value)?;
        Ok(())
    }

    fn subscribe(&mut self, this: Resource<TcpSocket>) -> wasmtime::Result<Resource<DynPollable>> {
        subscribe(self.table, this)
    }

    fn shutdown(&mut self, this: Resource<TcpSocket>, how: tcp::ShutdownType) -> SocketResult<()> {
        let State::Connected { rx, tx, .. } = &self.tcp(&this)?.state else {
            return Err(ErrorCode::InvalidState.into());
        };
        if matches!(how, tcp::ShutdownType::Receive | tcp::ShutdownType::Both) {
            rx.close_read();
        }
        if matches!(how, tcp::ShutdownType::Send | tcp::ShutdownType::Both) {
            tx.close_write();
        }
        Ok(())
    }

    fn drop(&mut self, this: Resource<TcpSocket>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
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

/// Zero is not a valid value for the numeric socket options.
pub(super) fn positive<T: Default + PartialEq>(value: T) -> Result<T, ErrorCode> {
    if value == T::default() {
        return Err(ErrorCode::InvalidArgument);
    }
    Ok(value)
}
