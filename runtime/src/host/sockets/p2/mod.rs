//! `wasi:sockets` for components, on the pod's virtual network.
//!
//! wasmtime-wasi links every other WASI interface; these definitions replace its sockets (which
//! would reach the host's network directly) with ones that see the pod's [`PodNetwork`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use wasmtime::component::{HasData, Linker, Resource};
use wasmtime_wasi::p2::{DynPollable, subscribe};

use super::{Sockets, SocketsView};
use crate::network::error::Family;
use crate::network::names::{ResolveAddresses, resolve};
use crate::network::tcp::TcpSocket;
use crate::network::udp::UdpSocket;

mod tcp;
mod udp;

mod bindings {
    wasmtime::component::bindgen!({
        path: "src/host/sockets/p2/wit",
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
            "wasi:sockets/ip-name-lookup.resolve-address-stream": crate::network::names::ResolveAddresses,
        },
    });
}

pub(crate) use bindings::wasi::sockets::network::{
    ErrorCode, IpAddress, IpAddressFamily, IpSocketAddress, Ipv4SocketAddress, Ipv6SocketAddress,
};
use bindings::wasi::sockets::{tcp as tcp_bindings, udp as udp_bindings};

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
        crate::network::error::error_code(&e).into()
    }
}

impl From<crate::network::error::ErrorCode> for SocketError {
    fn from(code: crate::network::error::ErrorCode) -> Self {
        SocketError::Code(code.into())
    }
}

impl From<crate::network::error::ErrorCode> for ErrorCode {
    fn from(code: crate::network::error::ErrorCode) -> Self {
        use crate::network::error::ErrorCode as E;
        match code {
            E::Unknown => ErrorCode::Unknown,
            E::AccessDenied => ErrorCode::AccessDenied,
            E::InvalidArgument => ErrorCode::InvalidArgument,
            E::OutOfMemory => ErrorCode::OutOfMemory,
            E::Timeout => ErrorCode::Timeout,
            E::ConcurrencyConflict => ErrorCode::ConcurrencyConflict,
            E::NotInProgress => ErrorCode::NotInProgress,
            E::WouldBlock => ErrorCode::WouldBlock,
            E::InvalidState => ErrorCode::InvalidState,
            E::NewSocketLimit => ErrorCode::NewSocketLimit,
            E::AddressNotBindable => ErrorCode::AddressNotBindable,
            E::AddressInUse => ErrorCode::AddressInUse,
            E::RemoteUnreachable => ErrorCode::RemoteUnreachable,
            E::ConnectionRefused => ErrorCode::ConnectionRefused,
            E::ConnectionReset => ErrorCode::ConnectionReset,
            E::ConnectionAborted => ErrorCode::ConnectionAborted,
            E::DatagramTooLarge => ErrorCode::DatagramTooLarge,
            E::NameUnresolvable => ErrorCode::NameUnresolvable,
        }
    }
}

/// The `network` resource: a capability handle; every socket of a store uses its pod's network.
#[allow(
    unreachable_pub,
    reason = "the `wasi:sockets` bindings re-export it as a resource type"
)]
pub struct Network;

struct HasSockets;

impl HasData for HasSockets {
    type Data<'a> = Sockets<'a>;
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

impl bindings::wasi::sockets::tcp_create_socket::Host for Sockets<'_> {
    fn create_tcp_socket(&mut self, family: IpAddressFamily) -> SocketResult<Resource<TcpSocket>> {
        let charge = self
            .budget
            .reserve(TcpSocket::BUDGET)
            .ok_or(ErrorCode::OutOfMemory)?;
        Ok(self.table.push(TcpSocket::new(family.into(), charge))?)
    }
}

impl bindings::wasi::sockets::udp_create_socket::Host for Sockets<'_> {
    fn create_udp_socket(&mut self, family: IpAddressFamily) -> SocketResult<Resource<UdpSocket>> {
        let charge = self
            .budget
            .reserve(UdpSocket::BUDGET)
            .ok_or(ErrorCode::OutOfMemory)?;
        Ok(self.table.push(UdpSocket::new(family.into(), charge))?)
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
        if let ResolveAddresses::Done(Err(crate::network::error::ErrorCode::InvalidArgument)) =
            stream
        {
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
