//! Virtual UDP: each bound socket has an inbox in its pod's port table; sending puts a datagram,
//! with its sender's address, into the inbox bound to the destination (or drops it, as UDP
//! does, when nothing is bound or the inbox is full). Datagrams to outside addresses go through a
//! host socket when egress is allowed.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use super::error::{ErrorCode, Family};
use super::wasi::{
    IpAddressFamily, IpSocketAddress, Network, SocketError, SocketResult, Sockets, udp,
};
use super::{Egress, PodNetwork, PortGuard, Route};
use crate::memory::Reservation;

/// The most bytes a socket's inbox holds before new datagrams are dropped.
const INBOX_BYTES: usize = 256 * 1024;
/// What a queued datagram costs besides its payload (its queue entry and sender address), so
/// that empty datagrams count against the inbox too.
const DATAGRAM_OVERHEAD: usize = 64;
/// The largest datagram (IPv4's limit).
const MAX_DATAGRAM: usize = 65_507;
/// Datagrams a guest may send per `send` call.
const SEND_PERMITS: u64 = 64;

/// The datagrams waiting for one bound socket.
#[derive(Default)]
pub(crate) struct Inbox(Mutex<InboxState>);

#[derive(Default)]
struct InboxState {
    queue: VecDeque<(Vec<u8>, SocketAddr)>,
    bytes: usize,
    waker: Option<Waker>,
}

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, InboxState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn deliver(&self, data: Vec<u8>, from: SocketAddr) {
        let mut s = self.lock();
        let cost = data.len() + DATAGRAM_OVERHEAD;
        if s.bytes + cost > INBOX_BYTES {
            return;
        }
        s.bytes += cost;
        s.queue.push_back((data, from));
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }

    fn take(&self, max: usize, from: Option<SocketAddr>) -> Vec<udp::IncomingDatagram> {
        let mut out = Vec::new();
        while out.len() < max {
            let Some((data, remote)) = self.take_one(from) else {
                break;
            };
            out.push(udp::IncomingDatagram {
                data,
                remote_address: remote.into(),
            });
        }
        out
    }

    /// The next datagram from `from` (any sender: `None`); others before it are dropped, as a
    /// connected socket's are.
    pub(super) fn take_one(&self, from: Option<SocketAddr>) -> Option<(Vec<u8>, SocketAddr)> {
        let mut s = self.lock();
        while let Some((data, remote)) = s.queue.pop_front() {
            s.bytes -= data.len() + DATAGRAM_OVERHEAD;
            if from.is_none_or(|f| f == remote) {
                return Some((data, remote));
            }
        }
        None
    }

    pub(super) fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.lock();
        if !s.queue.is_empty() {
            return Poll::Ready(());
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// A `wasi:sockets/udp` socket of a pod.
#[allow(
    unreachable_pub,
    reason = "the `wasi:sockets` bindings re-export it as a resource type"
)]
pub struct UdpSocket {
    family: Family,
    port: Option<PortGuard>,
    inbox: Arc<Inbox>,
    remote: Option<SocketAddr>,
    bind_started: bool,
    pub(super) hop_limit: u8,
    pub(super) receive_buffer: u64,
    pub(super) send_buffer: u64,
    /// WASI 0.3's sending side (its host socket for egress), made at the first `send` (0.2
    /// makes it in `stream`).
    outgoing: Option<OutgoingDatagrams>,
    /// The inbox's part of the container's memory budget.
    _inbox_charge: Reservation,
}

impl UdpSocket {
    /// What a socket holds at most: its inbox.
    pub(crate) const BUDGET: u64 = INBOX_BYTES as u64;

    pub(crate) fn new(family: Family, charge: Reservation) -> UdpSocket {
        UdpSocket {
            _inbox_charge: charge,
            family,
            port: None,
            inbox: Arc::default(),
            remote: None,
            bind_started: false,
            hop_limit: 64,
            receive_buffer: INBOX_BYTES as u64,
            send_buffer: INBOX_BYTES as u64,
            outgoing: None,
        }
    }

    pub(super) fn family(&self) -> Family {
        self.family
    }

    /// Binds the socket's inbox to `addr` (port 0: an ephemeral port).
    pub(super) fn bind(
        &mut self,
        net: &Arc<PodNetwork>,
        addr: SocketAddr,
    ) -> Result<(), ErrorCode> {
        self.family.check(&addr)?;
        if self.port.is_some() || self.bind_started {
            return Err(ErrorCode::InvalidState);
        }
        self.port = Some(net.bind_udp(addr, self.inbox.clone())?);
        Ok(())
    }

    /// Binds an unbound socket to an ephemeral port (WASI 0.3's implicit bind): on the address
    /// datagrams to `remote` leave from (as a connected kernel socket's local address is), or on
    /// every address.
    pub(super) fn bind_implicitly(
        &mut self,
        net: &Arc<PodNetwork>,
        remote: Option<SocketAddr>,
    ) -> Result<(), ErrorCode> {
        if self.port.is_some() {
            return Ok(());
        }
        let ip = match (remote, self.family) {
            (Some(remote), _) => net.source_for(remote.ip()),
            (None, Family::V4) => Ipv4Addr::UNSPECIFIED.into(),
            (None, Family::V6) => Ipv6Addr::UNSPECIFIED.into(),
        };
        self.bind(net, SocketAddr::new(ip, 0))
    }

    /// Sets (or, with `None`, clears) the address the socket exchanges datagrams with.
    pub(super) fn set_remote(&mut self, remote: Option<SocketAddr>) -> Result<(), ErrorCode> {
        if let Some(remote) = &remote {
            self.family.check(remote)?;
            if remote.ip().is_unspecified() || remote.port() == 0 {
                return Err(ErrorCode::InvalidArgument);
            }
        }
        self.remote = remote;
        Ok(())
    }

    pub(super) fn local_address(&self) -> Result<SocketAddr, ErrorCode> {
        self.port
            .as_ref()
            .map(PortGuard::addr)
            .ok_or(ErrorCode::InvalidState)
    }

    pub(super) fn remote_address(&self) -> Result<SocketAddr, ErrorCode> {
        self.remote.ok_or(ErrorCode::InvalidState)
    }

    /// The inbox and the sender it accepts, for receiving; `None` while unbound.
    pub(super) fn receiving(&self) -> Option<(Arc<Inbox>, Option<SocketAddr>)> {
        self.port.as_ref()?;
        Some((self.inbox.clone(), self.remote))
    }

    /// Sends one datagram (WASI 0.3), to `to` or the connected address.
    pub(super) fn send(
        &mut self,
        net: &Arc<PodNetwork>,
        data: Vec<u8>,
        to: Option<SocketAddr>,
    ) -> Result<(), ErrorCode> {
        self.bind_implicitly(net, None)?;
        let local = self.local_address()?;
        let outgoing = self.outgoing.get_or_insert_with(|| OutgoingDatagrams {
            family: self.family,
            local,
            remote: None,
            inbox: self.inbox.clone(),
            host: None,
        });
        // Connected or not as the socket is now (`connect` and `disconnect` change it).
        outgoing.remote = self.remote;
        outgoing.send_to(net, data, to)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for UdpSocket {
    async fn ready(&mut self) {}
}

/// The receiving half of a socket's stream.
#[allow(
    unreachable_pub,
    reason = "the `wasi:sockets` bindings re-export it as a resource type"
)]
pub struct IncomingDatagrams {
    inbox: Arc<Inbox>,
    remote: Option<SocketAddr>,
}

#[wasmtime_wasi::async_trait]
impl Pollable for IncomingDatagrams {
    async fn ready(&mut self) {
        poll_fn(|cx| self.inbox.poll_ready(cx)).await
    }
}

/// The sending half of a socket's stream.
#[allow(
    unreachable_pub,
    reason = "the `wasi:sockets` bindings re-export it as a resource type"
)]
pub struct OutgoingDatagrams {
    family: Family,
    local: SocketAddr,
    remote: Option<SocketAddr>,
    inbox: Arc<Inbox>,
    host: Option<HostUdp>,
}

#[wasmtime_wasi::async_trait]
impl Pollable for OutgoingDatagrams {
    async fn ready(&mut self) {}
}

/// A host socket for egress datagrams; replies land in the guest socket's inbox.
struct HostUdp {
    socket: Arc<tokio::net::UdpSocket>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for HostUdp {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl HostUdp {
    fn open(family: Family, inbox: Arc<Inbox>) -> std::io::Result<HostUdp> {
        let any: SocketAddr = match family {
            Family::V4 => (Ipv4Addr::UNSPECIFIED, 0).into(),
            Family::V6 => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let std = std::net::UdpSocket::bind(any)?;
        std.set_nonblocking(true)?;
        let socket = Arc::new(tokio::net::UdpSocket::from_std(std)?);
        let rx = socket.clone();
        let reader = tokio::spawn(async move {
            let mut buf = vec![0; MAX_DATAGRAM];
            while let Ok((n, from)) = rx.recv_from(&mut buf).await {
                inbox.deliver(buf[..n].to_vec(), from);
            }
        });
        Ok(HostUdp { socket, reader })
    }
}

impl OutgoingDatagrams {
    fn send_to(
        &mut self,
        net: &Arc<PodNetwork>,
        data: Vec<u8>,
        to: Option<SocketAddr>,
    ) -> Result<(), ErrorCode> {
        let to = match (to, self.remote) {
            (Some(to), Some(remote)) if to != remote => return Err(ErrorCode::InvalidArgument),
            (Some(to), _) | (None, Some(to)) => to,
            (None, None) => return Err(ErrorCode::InvalidArgument),
        };
        self.family.check(&to)?;
        if to.ip().is_unspecified() || to.port() == 0 {
            return Err(ErrorCode::InvalidArgument);
        }
        if data.len() > MAX_DATAGRAM {
            return Err(ErrorCode::DatagramTooLarge);
        }
        match net.route(to.ip()) {
            Route::Pod(pod) => {
                let from = if self.local.ip().is_unspecified() {
                    SocketAddr::new(net.source_for(to.ip()), self.local.port())
                } else {
                    self.local
                };
                let inbox = pod
                    .udp()
                    .find(to, |ip| ip == std::net::IpAddr::V4(pod.ip()))
                    .cloned();
                if let Some(inbox) = inbox {
                    inbox.deliver(data, from);
                }
            }
            Route::Unreachable => {}
            Route::Outside if net.egress() == Egress::Deny => return Err(ErrorCode::AccessDenied),
            Route::Outside => {
                if self.host.is_none() {
                    let host = HostUdp::open(self.family, self.inbox.clone());
                    self.host = Some(host.map_err(|e| super::error::error_code(&e))?);
                }
                if let Some(host) = &self.host {
                    // A full host buffer drops the datagram, as UDP may.
                    let _ = host.socket.try_send_to(&data, to);
                }
            }
        }
        Ok(())
    }
}

impl Sockets<'_> {
    fn udp(&mut self, this: &Resource<UdpSocket>) -> SocketResult<&mut UdpSocket> {
        Ok(self.table.get_mut(this)?)
    }
}

impl udp::Host for Sockets<'_> {}

impl udp::HostUdpSocket for Sockets<'_> {
    fn start_bind(
        &mut self,
        this: Resource<UdpSocket>,
        _network: Resource<Network>,
        local_address: IpSocketAddress,
    ) -> SocketResult<()> {
        let net = self.net.clone();
        let socket = self.udp(&this)?;
        socket.bind(&net, local_address.into())?;
        socket.bind_started = true;
        Ok(())
    }

    fn finish_bind(&mut self, this: Resource<UdpSocket>) -> SocketResult<()> {
        let socket = self.udp(&this)?;
        if !std::mem::take(&mut socket.bind_started) {
            return Err(ErrorCode::NotInProgress.into());
        }
        Ok(())
    }

    fn stream(
        &mut self,
        this: Resource<UdpSocket>,
        remote_address: Option<IpSocketAddress>,
    ) -> SocketResult<(Resource<IncomingDatagrams>, Resource<OutgoingDatagrams>)> {
        let socket = self.udp(&this)?;
        let Some(port) = &socket.port else {
            return Err(ErrorCode::InvalidState.into());
        };
        let local = port.addr();
        let remote = remote_address.map(SocketAddr::from);
        socket.set_remote(remote)?;
        let incoming = IncomingDatagrams {
            inbox: socket.inbox.clone(),
            remote,
        };
        let outgoing = OutgoingDatagrams {
            family: socket.family,
            local,
            remote,
            inbox: socket.inbox.clone(),
            host: None,
        };
        let incoming = self.table.push_child(incoming, &this)?;
        let outgoing = self.table.push_child(outgoing, &this)?;
        Ok((incoming, outgoing))
    }

    fn local_address(&mut self, this: Resource<UdpSocket>) -> SocketResult<IpSocketAddress> {
        Ok(self.udp(&this)?.local_address()?.into())
    }

    fn remote_address(&mut self, this: Resource<UdpSocket>) -> SocketResult<IpSocketAddress> {
        Ok(self.udp(&this)?.remote_address()?.into())
    }

    fn address_family(&mut self, this: Resource<UdpSocket>) -> wasmtime::Result<IpAddressFamily> {
        Ok(self.table.get(&this)?.family.into())
    }

    fn unicast_hop_limit(&mut self, this: Resource<UdpSocket>) -> SocketResult<u8> {
        Ok(self.udp(&this)?.hop_limit)
    }

    fn set_unicast_hop_limit(&mut self, this: Resource<UdpSocket>, value: u8) -> SocketResult<()> {
        if value == 0 {
            return Err(ErrorCode::InvalidArgument.into());
        }
        self.udp(&this)?.hop_limit = value;
        Ok(())
    }

    fn receive_buffer_size(&mut self, this: Resource<UdpSocket>) -> SocketResult<u64> {
        Ok(self.udp(&this)?.receive_buffer)
    }

    fn set_receive_buffer_size(
        &mut self,
        this: Resource<UdpSocket>,
        value: u64,
    ) -> SocketResult<()> {
        if value == 0 {
            return Err(ErrorCode::InvalidArgument.into());
        }
        self.udp(&this)?.receive_buffer = value;
        Ok(())
    }

    fn send_buffer_size(&mut self, this: Resource<UdpSocket>) -> SocketResult<u64> {
        Ok(self.udp(&this)?.send_buffer)
    }

    fn set_send_buffer_size(&mut self, this: Resource<UdpSocket>, value: u64) -> SocketResult<()> {
        if value == 0 {
            return Err(ErrorCode::InvalidArgument.into());
        }
        self.udp(&this)?.send_buffer = value;
        Ok(())
    }

    fn subscribe(&mut self, this: Resource<UdpSocket>) -> wasmtime::Result<Resource<DynPollable>> {
        subscribe(self.table, this)
    }

    fn drop(&mut self, this: Resource<UdpSocket>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

impl udp::HostIncomingDatagramStream for Sockets<'_> {
    fn receive(
        &mut self,
        this: Resource<IncomingDatagrams>,
        max_results: u64,
    ) -> SocketResult<Vec<udp::IncomingDatagram>> {
        let stream = self.table.get(&this)?;
        Ok(stream
            .inbox
            .take(max_results.min(1024) as usize, stream.remote))
    }

    fn subscribe(
        &mut self,
        this: Resource<IncomingDatagrams>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        subscribe(self.table, this)
    }

    fn drop(&mut self, this: Resource<IncomingDatagrams>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

impl udp::HostOutgoingDatagramStream for Sockets<'_> {
    fn check_send(&mut self, _this: Resource<OutgoingDatagrams>) -> SocketResult<u64> {
        Ok(SEND_PERMITS)
    }

    fn send(
        &mut self,
        this: Resource<OutgoingDatagrams>,
        datagrams: Vec<udp::OutgoingDatagram>,
    ) -> SocketResult<u64> {
        if datagrams.len() as u64 > SEND_PERMITS {
            return Err(SocketError::Trap(wasmtime::Error::msg(
                "send: more datagrams than check-send permitted",
            )));
        }
        let net = self.net.clone();
        let stream = self.table.get_mut(&this)?;
        let mut sent = 0;
        for datagram in datagrams {
            let to = datagram.remote_address.map(SocketAddr::from);
            match stream.send_to(&net, datagram.data, to) {
                Ok(()) => sent += 1,
                Err(e) if sent == 0 => return Err(e.into()),
                Err(_) => break,
            }
        }
        Ok(sent)
    }

    fn subscribe(
        &mut self,
        this: Resource<OutgoingDatagrams>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        subscribe(self.table, this)
    }

    fn drop(&mut self, this: Resource<OutgoingDatagrams>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_datagrams_count_against_the_inbox() {
        let inbox = Inbox::default();
        let from = SocketAddr::from(([127, 0, 0, 1], 9));
        for _ in 0..1_000_000 {
            inbox.deliver(Vec::new(), from);
        }
        let kept = inbox.lock().queue.len();
        assert_eq!(kept, INBOX_BYTES / DATAGRAM_OVERHEAD);
        let taken = inbox.take(usize::MAX, None);
        assert_eq!(taken.len(), kept);
        assert_eq!(inbox.lock().bytes, 0);
    }
}
