//! Virtual UDP: each bound socket has an inbox in its pod's port table; sending puts a datagram,
//! with its sender's address, into the inbox bound to the destination (or drops it, as UDP
//! does, when nothing is bound or the inbox is full). Datagrams to outside addresses go through a
//! host socket when egress is allowed.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use wasmtime_wasi::p2::Pollable;

use super::error::{ErrorCode, Family};
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
pub(crate) const SEND_PERMITS: u64 = 64;

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

    fn take(&self, max: usize, from: Option<SocketAddr>) -> Vec<(Vec<u8>, SocketAddr)> {
        let mut out = Vec::new();
        while out.len() < max {
            let Some(datagram) = self.take_one(from) else {
                break;
            };
            out.push(datagram);
        }
        out
    }

    /// The next datagram from `from` (any sender: `None`); others before it are dropped, as a
    /// connected socket's are.
    pub(crate) fn take_one(&self, from: Option<SocketAddr>) -> Option<(Vec<u8>, SocketAddr)> {
        let mut s = self.lock();
        while let Some((data, remote)) = s.queue.pop_front() {
            s.bytes -= data.len() + DATAGRAM_OVERHEAD;
            if from.is_none_or(|f| f == remote) {
                return Some((data, remote));
            }
        }
        None
    }

    pub(crate) fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
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
    pub(crate) hop_limit: u8,
    pub(crate) receive_buffer: u64,
    pub(crate) send_buffer: u64,
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

    pub(crate) fn family(&self) -> Family {
        self.family
    }

    /// Binds the socket's inbox to `addr` (port 0: an ephemeral port).
    pub(crate) fn bind(
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
    pub(crate) fn bind_implicitly(
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
    /// `start-bind`: bound to `addr`, the bind to be finished.
    pub(crate) fn start_bind(
        &mut self,
        net: &Arc<PodNetwork>,
        addr: SocketAddr,
    ) -> Result<(), ErrorCode> {
        self.bind(net, addr)?;
        self.bind_started = true;
        Ok(())
    }

    /// `finish-bind`.
    pub(crate) fn finish_bind(&mut self) -> Result<(), ErrorCode> {
        if !std::mem::take(&mut self.bind_started) {
            return Err(ErrorCode::NotInProgress);
        }
        Ok(())
    }

    /// WASI 0.2's `stream`: the bound socket's receiving and sending halves, limited to
    /// `remote` when given.
    pub(crate) fn streams(
        &mut self,
        remote: Option<SocketAddr>,
    ) -> Result<(IncomingDatagrams, OutgoingDatagrams), ErrorCode> {
        let Some(port) = &self.port else {
            return Err(ErrorCode::InvalidState);
        };
        let local = port.addr();
        self.set_remote(remote)?;
        let incoming = IncomingDatagrams {
            inbox: self.inbox.clone(),
            remote,
        };
        let outgoing = OutgoingDatagrams {
            family: self.family,
            local,
            remote,
            inbox: self.inbox.clone(),
            host: None,
        };
        Ok((incoming, outgoing))
    }

    pub(crate) fn set_remote(&mut self, remote: Option<SocketAddr>) -> Result<(), ErrorCode> {
        if let Some(remote) = &remote {
            self.family.check(remote)?;
            if remote.ip().is_unspecified() || remote.port() == 0 {
                return Err(ErrorCode::InvalidArgument);
            }
        }
        self.remote = remote;
        Ok(())
    }

    pub(crate) fn local_address(&self) -> Result<SocketAddr, ErrorCode> {
        self.port
            .as_ref()
            .map(PortGuard::addr)
            .ok_or(ErrorCode::InvalidState)
    }

    pub(crate) fn remote_address(&self) -> Result<SocketAddr, ErrorCode> {
        self.remote.ok_or(ErrorCode::InvalidState)
    }

    /// The inbox and the sender it accepts, for receiving; `None` while unbound.
    pub(crate) fn receiving(&self) -> Option<(Arc<Inbox>, Option<SocketAddr>)> {
        self.port.as_ref()?;
        Some((self.inbox.clone(), self.remote))
    }

    /// Sends one datagram (WASI 0.3), to `to` or the connected address.
    pub(crate) fn send(
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

impl IncomingDatagrams {
    /// At most `max` datagrams received, with their senders.
    pub(crate) fn receive(&self, max: usize) -> Vec<(Vec<u8>, SocketAddr)> {
        self.inbox.take(max, self.remote)
    }
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
    pub(crate) fn send_to(
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
