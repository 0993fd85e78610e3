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

/// Any value of a boolean socket option.
pub(crate) fn any<T>(value: T) -> Result<T, ErrorCode> {
    Ok(value)
}

/// A socket's option getters and setters, the same in WASI 0.2 and 0.3 but for their names and
/// types: `socket` is the resource's type and `accessor` the binding's way from a resource to its
/// socket, then for each option its getter, setter, field of the socket, type, and the check of
/// a new value.
macro_rules! socket_options {
    ($socket:ty, $accessor:ident; $($getter:ident, $setter:ident: $($field:ident).+, $ty:ty, $check:ident;)*) => {
        $(
            fn $getter(&mut self, this: Resource<$socket>) -> SocketResult<$ty> {
                Ok(self.$accessor(&this)?.$($field).+)
            }

            fn $setter(&mut self, this: Resource<$socket>, value: $ty) -> SocketResult<()> {
                self.$accessor(&this)?.$($field).+ = $check(value)?;
                Ok(())
            }
        )*
    };
}
pub(crate) use socket_options;
