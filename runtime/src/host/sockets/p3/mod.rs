//! `wasi:sockets` 0.3 for components, on the same pod network as 0.2.
//!
//! The sockets are the 0.2 ones ([`TcpSocket`](super::tcp::TcpSocket),
//! [`UdpSocket`](super::udp::UdpSocket)) with 0.3's shape: `connect` and the UDP calls are async
//! functions, a connection's bytes are component-model streams, and `listen` gives a stream of
//! accepted sockets. wasmtime-wasi's 0.3 sockets, which these replace in pods, would reach the
//! host's network directly.

mod tcp;
mod udp;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use wasmtime::component::{Accessor, HasData, Linker};

use super::{Sockets, SocketsView};
use crate::network::error::ErrorCode as Code02;

mod bindings {
    wasmtime::component::bindgen!({
        path: "src/host/sockets/p3/wit",
        world: "wasmpod:network3/sockets",
        imports: {
            "wasi:sockets/types.[method]tcp-socket.listen": store | trappable,
            "wasi:sockets/types.[method]tcp-socket.send": store | trappable,
            "wasi:sockets/types.[method]tcp-socket.receive": store | trappable,
            default: trappable,
        },
        require_store_data_send: true,
        trappable_error_type: {
            "wasi:sockets/types.error-code" => super::SocketError,
        },
        with: {
            "wasi:clocks": wasmtime_wasi::p3::bindings::clocks,
            "wasi:sockets/types.tcp-socket": crate::network::tcp::TcpSocket,
            "wasi:sockets/types.udp-socket": crate::network::udp::UdpSocket,
        },
    });
}

use bindings::wasi::sockets::ip_name_lookup as lookup;
use bindings::wasi::sockets::types::{
    ErrorCode, IpAddress, IpAddressFamily, IpSocketAddress, Ipv4SocketAddress, Ipv6SocketAddress,
};

/// A 0.3 socket call's failure: an error code for the guest, or a trap.
pub(crate) enum SocketError {
    Code(ErrorCode),
    Trap(wasmtime::Error),
}

type SocketResult<T> = Result<T, SocketError>;

impl From<ErrorCode> for SocketError {
    fn from(code: ErrorCode) -> Self {
        SocketError::Code(code)
    }
}

/// The pod network's errors are 0.2's codes; 0.3 has fewer (no would-block or in-progress).
impl From<Code02> for SocketError {
    fn from(code: Code02) -> Self {
        SocketError::Code(code.into())
    }
}

impl From<wasmtime::component::ResourceTableError> for SocketError {
    fn from(e: wasmtime::component::ResourceTableError) -> Self {
        SocketError::Trap(e.into())
    }
}

impl From<Code02> for ErrorCode {
    fn from(code: Code02) -> Self {
        match code {
            Code02::AccessDenied => ErrorCode::AccessDenied,
            Code02::InvalidArgument => ErrorCode::InvalidArgument,
            Code02::OutOfMemory | Code02::NewSocketLimit => ErrorCode::OutOfMemory,
            Code02::Timeout => ErrorCode::Timeout,
            Code02::ConcurrencyConflict
            | Code02::NotInProgress
            | Code02::WouldBlock
            | Code02::InvalidState => ErrorCode::InvalidState,
            Code02::AddressNotBindable => ErrorCode::AddressNotBindable,
            Code02::AddressInUse => ErrorCode::AddressInUse,
            Code02::RemoteUnreachable => ErrorCode::RemoteUnreachable,
            Code02::ConnectionRefused => ErrorCode::ConnectionRefused,
            Code02::ConnectionReset => ErrorCode::ConnectionReset,
            Code02::ConnectionAborted => ErrorCode::ConnectionAborted,
            Code02::DatagramTooLarge => ErrorCode::DatagramTooLarge,
            Code02::Unknown | Code02::NameUnresolvable => ErrorCode::Other(None),
        }
    }
}

/// The `HasData` of the 0.3 socket interfaces: a store's [`Sockets`] view.
struct PodSockets;

impl HasData for PodSockets {
    type Data<'a> = Sockets<'a>;
}

/// Replaces WASI 0.3's `wasi:sockets` in `linker` (already holding wasmtime-wasi's) with the pod
/// network's.
pub(crate) fn add_to_linker<T: SocketsView>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    use bindings::wasi::sockets as s;
    linker.allow_shadowing(true);
    s::types::add_to_linker::<T, PodSockets>(linker, T::sockets)?;
    s::ip_name_lookup::add_to_linker::<T, PodSockets>(linker, T::sockets)?;
    linker.allow_shadowing(false);
    Ok(())
}

impl bindings::wasi::sockets::types::Host for Sockets<'_> {
    fn convert_error_code(&mut self, error: SocketError) -> wasmtime::Result<ErrorCode> {
        match error {
            SocketError::Code(code) => Ok(code),
            SocketError::Trap(e) => Err(e),
        }
    }
}

impl From<IpSocketAddress> for SocketAddr {
    fn from(addr: IpSocketAddress) -> SocketAddr {
        match addr {
            IpSocketAddress::Ipv4(a) => {
                let (x, y, z, w) = a.address;
                SocketAddrV4::new(Ipv4Addr::new(x, y, z, w), a.port).into()
            }
            IpSocketAddress::Ipv6(a) => {
                let (x0, x1, x2, x3, x4, x5, x6, x7) = a.address;
                let ip = Ipv6Addr::new(x0, x1, x2, x3, x4, x5, x6, x7);
                SocketAddrV6::new(ip, a.port, a.flow_info, a.scope_id).into()
            }
        }
    }
}

impl From<SocketAddr> for IpSocketAddress {
    fn from(addr: SocketAddr) -> IpSocketAddress {
        match addr {
            SocketAddr::V4(a) => {
                let [x, y, z, w] = a.ip().octets();
                IpSocketAddress::Ipv4(Ipv4SocketAddress {
                    port: a.port(),
                    address: (x, y, z, w),
                })
            }
            SocketAddr::V6(a) => {
                let [x0, x1, x2, x3, x4, x5, x6, x7] = a.ip().segments();
                IpSocketAddress::Ipv6(Ipv6SocketAddress {
                    port: a.port(),
                    flow_info: a.flowinfo(),
                    address: (x0, x1, x2, x3, x4, x5, x6, x7),
                    scope_id: a.scope_id(),
                })
            }
        }
    }
}

impl From<IpAddr> for IpAddress {
    fn from(ip: IpAddr) -> IpAddress {
        match ip {
            IpAddr::V4(ip) => {
                let [x, y, z, w] = ip.octets();
                IpAddress::Ipv4((x, y, z, w))
            }
            IpAddr::V6(ip) => {
                let [x0, x1, x2, x3, x4, x5, x6, x7] = ip.segments();
                IpAddress::Ipv6((x0, x1, x2, x3, x4, x5, x6, x7))
            }
        }
    }
}

impl From<IpAddressFamily> for crate::network::error::Family {
    fn from(f: IpAddressFamily) -> Self {
        match f {
            IpAddressFamily::Ipv4 => crate::network::error::Family::V4,
            IpAddressFamily::Ipv6 => crate::network::error::Family::V6,
        }
    }
}

impl From<crate::network::error::Family> for IpAddressFamily {
    fn from(f: crate::network::error::Family) -> Self {
        match f {
            crate::network::error::Family::V4 => IpAddressFamily::Ipv4,
            crate::network::error::Family::V6 => IpAddressFamily::Ipv6,
        }
    }
}

impl<T> lookup::HostWithStore<T> for PodSockets {
    async fn resolve_addresses(
        store: &Accessor<T, Self>,
        name: String,
    ) -> wasmtime::Result<Result<Vec<IpAddress>, lookup::ErrorCode>> {
        let net = store.with(|mut view| view.get().net.clone());
        Ok(match crate::network::names::lookup(&net, &name).await {
            Ok(ips) => Ok(ips.into_iter().map(IpAddress::from).collect()),
            Err(code) => Err(match code {
                Code02::InvalidArgument => lookup::ErrorCode::InvalidArgument,
                Code02::AccessDenied => lookup::ErrorCode::AccessDenied,
                Code02::NameUnresolvable => lookup::ErrorCode::NameUnresolvable,
                _ => lookup::ErrorCode::Other(None),
            }),
        })
    }
}

impl lookup::Host for Sockets<'_> {}
