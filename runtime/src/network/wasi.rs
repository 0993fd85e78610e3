//! `wasi:sockets` for components, on the pod's virtual network.
//!
//! wasmtime-wasi links every other WASI interface; these definitions replace its sockets (which
//! would reach the host's network directly) with ones that see the pod's [`PodNetwork`].

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use super::{Egress, PodNetwork};

mod bindings {
    wasmtime::component::bindgen!({
        path: "src/network/wit",
        world: "wasmpod:network/sockets",
        imports: { default: trappable },
        require_store_data_send: true,
        trappable_error_type: {
            "wasi:sockets/network.error-code" => super::SocketError,
        },
        with: {
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
            "wasi:sockets/network.network": super::Network,
            "wasi:sockets/tcp.tcp-socket": crate::network::tcp::TcpSocket,
            "wasi:sockets/udp.udp-socket": crate::network::udp::UdpSocket,
            "wasi:sockets/udp.incoming-datagram-stream": crate::network::udp::IncomingDatagrams,
            "wasi:sockets/udp.outgoing-datagram-stream": crate::network::udp::OutgoingDatagrams,
            "wasi:sockets/ip-name-lookup.resolve-address-stream": super::ResolveAddresses,
        },
    });
}

pub(crate) use bindings::wasi::sockets::network::{
    ErrorCode, IpAddress, IpAddressFamily, IpSocketAddress, Ipv4SocketAddress, Ipv6SocketAddress,
};
pub(crate) use bindings::wasi::sockets::{tcp, udp};

/// A socket call's failure: an error code for the guest, or a trap.
pub(crate) enum SocketError {
    Code(ErrorCode),
    Trap(wasmtime::Error),
}

pub(crate) type SocketResult<T> = Result<T, SocketError>;

impl From<ErrorCode> for SocketError {
    fn from(code: ErrorCode) -> Self {
        SocketError::Code(code)
    }
}

impl From<wasmtime::component::ResourceTableError> for SocketError {
    fn from(e: wasmtime::component::ResourceTableError) -> Self {
        SocketError::Trap(e.into())
    }
}

impl From<std::io::Error> for SocketError {
    fn from(e: std::io::Error) -> Self {
        SocketError::Code(super::tcp::error_code(&e))
    }
}

/// The `network` resource: a capability handle; every socket of a store uses its pod's network.
#[allow(
    unreachable_pub,
    reason = "the `wasi:sockets` bindings re-export it as a resource type"
)]
pub struct Network;

/// What the socket interfaces need from a store: its resource table and its pod's network.
pub(crate) struct Sockets<'a> {
    pub(crate) table: &'a mut ResourceTable,
    pub(crate) net: &'a Arc<PodNetwork>,
    /// The container's memory budget, which socket buffers count against.
    pub(crate) budget: &'a Arc<crate::memory::Budget>,
}

struct HasSockets;

impl HasData for HasSockets {
    type Data<'a> = Sockets<'a>;
}

/// Implemented by store data that can hand out a [`Sockets`] view.
pub(crate) trait SocketsView: Send + 'static {
    fn sockets(&mut self) -> Sockets<'_>;
}

/// Replaces the `wasi:sockets` interfaces in `linker` (already holding wasmtime-wasi's) with the
/// pod network's.
pub(crate) fn add_to_linker<T: SocketsView>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    use bindings::wasi::sockets as s;
    linker.allow_shadowing(true);
    let options = bindings::LinkOptions::default();
    s::network::add_to_linker::<T, HasSockets>(linker, &(&options).into(), T::sockets)?;
    s::instance_network::add_to_linker::<T, HasSockets>(linker, T::sockets)?;
    s::tcp::add_to_linker::<T, HasSockets>(linker, T::sockets)?;
    s::tcp_create_socket::add_to_linker::<T, HasSockets>(linker, T::sockets)?;
    s::udp::add_to_linker::<T, HasSockets>(linker, T::sockets)?;
    s::udp_create_socket::add_to_linker::<T, HasSockets>(linker, T::sockets)?;
    s::ip_name_lookup::add_to_linker::<T, HasSockets>(linker, T::sockets)?;
    linker.allow_shadowing(false);
    Ok(())
}

impl s_network::Host for Sockets<'_> {
    fn convert_error_code(&mut self, error: SocketError) -> wasmtime::Result<ErrorCode> {
        match error {
            SocketError::Code(code) => Ok(code),
            SocketError::Trap(e) => Err(e),
        }
    }

    fn network_error_code(
        &mut self,
        _err: Resource<wasmtime_wasi::p2::bindings::io::error::Error>,
    ) -> wasmtime::Result<Option<ErrorCode>> {
        Ok(None)
    }
}

use bindings::wasi::sockets::network as s_network;

impl s_network::HostNetwork for Sockets<'_> {
    fn drop(&mut self, this: Resource<Network>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

impl bindings::wasi::sockets::instance_network::Host for Sockets<'_> {
    fn instance_network(&mut self) -> wasmtime::Result<Resource<Network>> {
        Ok(self.table.push(Network)?)
    }
}

/// Socket address conversions between WIT and std.
impl From<IpSocketAddress> for SocketAddr {
    fn from(addr: IpSocketAddress) -> SocketAddr {
        match addr {
            IpSocketAddress::Ipv4(a) => {
                let (x, y, z, w) = a.address;
                SocketAddr::new(Ipv4Addr::new(x, y, z, w).into(), a.port)
            }
            IpSocketAddress::Ipv6(a) => {
                let (x0, x1, x2, x3, x4, x5, x6, x7) = a.address;
                let ip = Ipv6Addr::new(x0, x1, x2, x3, x4, x5, x6, x7);
                SocketAddr::V6(std::net::SocketAddrV6::new(
                    ip,
                    a.port,
                    a.flow_info,
                    a.scope_id,
                ))
            }
        }
    }
}

impl From<SocketAddr> for IpSocketAddress {
    fn from(addr: SocketAddr) -> IpSocketAddress {
        match addr {
            SocketAddr::V4(a) => IpSocketAddress::Ipv4(Ipv4SocketAddress {
                port: a.port(),
                address: ip_address_v4(*a.ip()),
            }),
            SocketAddr::V6(a) => IpSocketAddress::Ipv6(Ipv6SocketAddress {
                port: a.port(),
                flow_info: a.flowinfo(),
                scope_id: a.scope_id(),
                address: ip_address_v6(*a.ip()),
            }),
        }
    }
}

fn ip_address_v4(ip: Ipv4Addr) -> (u8, u8, u8, u8) {
    let [a, b, c, d] = ip.octets();
    (a, b, c, d)
}

fn ip_address_v6(ip: Ipv6Addr) -> (u16, u16, u16, u16, u16, u16, u16, u16) {
    let [a, b, c, d, e, f, g, h] = ip.segments();
    (a, b, c, d, e, f, g, h)
}

impl From<IpAddr> for IpAddress {
    fn from(ip: IpAddr) -> IpAddress {
        match ip {
            IpAddr::V4(v4) => IpAddress::Ipv4(ip_address_v4(v4)),
            IpAddr::V6(v6) => IpAddress::Ipv6(ip_address_v6(v6)),
        }
    }
}

/// The address family of a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    V4,
    V6,
}

impl Family {
    pub(crate) fn of(addr: &SocketAddr) -> Family {
        if addr.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }

    /// Checks that `addr` suits a socket of this family (no IPv4-mapped IPv6 addresses, as
    /// `wasi:sockets` specifies).
    pub(crate) fn check(self, addr: &SocketAddr) -> Result<(), ErrorCode> {
        let mapped = matches!(addr, SocketAddr::V6(a) if a.ip().to_ipv4_mapped().is_some());
        if Family::of(addr) != self || mapped {
            return Err(ErrorCode::InvalidArgument);
        }
        Ok(())
    }
}

impl From<IpAddressFamily> for Family {
    fn from(f: IpAddressFamily) -> Family {
        match f {
            IpAddressFamily::Ipv4 => Family::V4,
            IpAddressFamily::Ipv6 => Family::V6,
        }
    }
}

impl From<Family> for IpAddressFamily {
    fn from(f: Family) -> IpAddressFamily {
        match f {
            Family::V4 => IpAddressFamily::Ipv4,
            Family::V6 => IpAddressFamily::Ipv6,
        }
    }
}

/// The addresses a name resolves to, or the lookup still under way on the host.
#[allow(
    unreachable_pub,
    reason = "the `wasi:sockets` bindings re-export it as a resource type"
)]
pub enum ResolveAddresses {
    Done(Result<VecDeque<IpAddr>, ErrorCode>),
    Pending(tokio::task::JoinHandle<Result<VecDeque<IpAddr>, ErrorCode>>),
}

#[wasmtime_wasi::async_trait]
impl Pollable for ResolveAddresses {
    async fn ready(&mut self) {
        if let ResolveAddresses::Pending(task) = self {
            let result = task.await.unwrap_or(Err(ErrorCode::Unknown));
            *self = ResolveAddresses::Done(result);
        }
    }
}

/// [`resolve`], awaited: the addresses `name` has for `pod`.
pub(crate) async fn lookup(pod: &PodNetwork, name: &str) -> Result<VecDeque<IpAddr>, ErrorCode> {
    match resolve(pod, name) {
        ResolveAddresses::Done(result) => result,
        ResolveAddresses::Pending(task) => task.await.unwrap_or(Err(ErrorCode::Unknown)),
    }
}

/// Resolves `name` as seen from inside `pod`: IP literals, then each name the pod's search
/// rules give, answered by the pod itself (`localhost`, its hostname, its `hostAliases`) or
/// (when egress is allowed) by the host's resolver.
fn resolve(pod: &PodNetwork, name: &str) -> ResolveAddresses {
    let done = |ips: &[IpAddr]| ResolveAddresses::Done(Ok(ips.iter().copied().collect()));
    let literal = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    if let Ok(ip) = literal.parse::<IpAddr>() {
        return done(&[ip]);
    }
    let lower = name.to_ascii_lowercase();
    let bare = lower.trim_end_matches('.');
    if bare.is_empty()
        || bare.len() > 253
        || lower.ends_with("..")
        || lower.contains(|c: char| c.is_whitespace())
    {
        return ResolveAddresses::Done(Err(ErrorCode::InvalidArgument));
    }
    let candidates = pod.names().candidates(&lower);
    for candidate in &candidates {
        if let Some(ips) = pod.names().local(candidate, pod.ip().into()) {
            return done(&ips);
        }
    }
    if pod.egress() == Egress::Deny {
        return ResolveAddresses::Done(Err(ErrorCode::NameUnresolvable));
    }
    let dns = &pod.names().dns;
    let node_resolver = dns.node_resolver;
    let nameservers =
        (!dns.nameservers.is_empty()).then(|| super::names::NameServers::new(&dns.nameservers));
    ResolveAddresses::Pending(tokio::spawn(async move {
        for host in candidates {
            let mut ips: VecDeque<IpAddr> = VecDeque::new();
            if node_resolver && let Ok(addrs) = tokio::net::lookup_host((host.as_str(), 0)).await {
                for a in addrs {
                    if !ips.contains(&a.ip()) {
                        ips.push_back(a.ip());
                    }
                }
            }
            if ips.is_empty()
                && let Some(servers) = &nameservers
            {
                ips = servers.ask(&host).await.into();
            }
            if !ips.is_empty() {
                return Ok(ips);
            }
        }
        Err(ErrorCode::NameUnresolvable)
    }))
}

impl bindings::wasi::sockets::tcp_create_socket::Host for Sockets<'_> {
    fn create_tcp_socket(
        &mut self,
        family: IpAddressFamily,
    ) -> SocketResult<Resource<super::tcp::TcpSocket>> {
        let charge = self
            .budget
            .reserve(super::tcp::TcpSocket::BUDGET)
            .ok_or(ErrorCode::OutOfMemory)?;
        Ok(self
            .table
            .push(super::tcp::TcpSocket::new(family.into(), charge))?)
    }
}

impl bindings::wasi::sockets::udp_create_socket::Host for Sockets<'_> {
    fn create_udp_socket(
        &mut self,
        family: IpAddressFamily,
    ) -> SocketResult<Resource<super::udp::UdpSocket>> {
        let charge = self
            .budget
            .reserve(super::udp::UdpSocket::BUDGET)
            .ok_or(ErrorCode::OutOfMemory)?;
        Ok(self
            .table
            .push(super::udp::UdpSocket::new(family.into(), charge))?)
    }
}

use bindings::wasi::sockets::ip_name_lookup as lookup;

impl lookup::Host for Sockets<'_> {
    fn resolve_addresses(
        &mut self,
        _network: Resource<Network>,
        name: String,
    ) -> SocketResult<Resource<ResolveAddresses>> {
        let stream = resolve(self.net, &name);
        if let ResolveAddresses::Done(Err(ErrorCode::InvalidArgument)) = stream {
            return Err(ErrorCode::InvalidArgument.into());
        }
        Ok(self.table.push(stream)?)
    }
}

impl lookup::HostResolveAddressStream for Sockets<'_> {
    fn resolve_next_address(
        &mut self,
        this: Resource<ResolveAddresses>,
    ) -> SocketResult<Option<IpAddress>> {
        match self.table.get_mut(&this)? {
            ResolveAddresses::Pending(_) => Err(ErrorCode::WouldBlock.into()),
            ResolveAddresses::Done(Ok(ips)) => Ok(ips.pop_front().map(IpAddress::from)),
            ResolveAddresses::Done(Err(code)) => Err((*code).into()),
        }
    }

    fn subscribe(
        &mut self,
        this: Resource<ResolveAddresses>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        subscribe(self.table, this)
    }

    fn drop(&mut self, this: Resource<ResolveAddresses>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}
