//! `wasi:sockets` for components, on the pod's virtual network: the 0.2 bindings ([`p2`]) and
//! the 0.3 ones ([`p3`]) over the same socket state machines (`crate::network`'s [`TcpSocket`]
//! and [`UdpSocket`]). They replace wasmtime-wasi's sockets, which would reach the host's
//! network directly.
//!
//! [`TcpSocket`]: crate::network::tcp::TcpSocket
//! [`UdpSocket`]: crate::network::udp::UdpSocket

pub(crate) mod p2;
pub(crate) mod p3;

use std::sync::Arc;

use wasmtime::component::ResourceTable;

use crate::network::PodNetwork;
use crate::network::error::ErrorCode;

/// What the socket interfaces need from a store: its resource table and its pod's network.
pub(crate) struct Sockets<'a> {
    pub(crate) table: &'a mut ResourceTable,
    pub(crate) net: &'a Arc<PodNetwork>,
    /// The container's memory budget, which socket buffers count against.
    pub(crate) budget: &'a Arc<crate::memory::Budget>,
}

/// Implemented by store data that can hand out a [`Sockets`] view.
pub(crate) trait SocketsView: Send + 'static {
    fn sockets(&mut self) -> Sockets<'_>;
}

/// Zero is not a valid value for the numeric socket options.
pub(crate) fn positive<T: Default + PartialEq>(value: T) -> Result<T, ErrorCode> {
    if value == T::default() {
        return Err(ErrorCode::InvalidArgument);
    }
    Ok(value)
}
