//! A socket operation's failure as the pod network reports it, whichever WASI version asked
//! (the `wasi:sockets` bindings turn it into their own `error-code`), and the address family of
//! a socket.

use std::io;
use std::net::SocketAddr;

/// Why a socket operation failed: those of `wasi:sockets` 0.2's error codes the pod network
/// gives (0.3's fold some together).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorCode {
    Unknown,
    AccessDenied,
    InvalidArgument,
    OutOfMemory,
    Timeout,
    ConcurrencyConflict,
    NotInProgress,
    WouldBlock,
    InvalidState,
    NewSocketLimit,
    AddressNotBindable,
    AddressInUse,
    RemoteUnreachable,
    ConnectionRefused,
    ConnectionReset,
    ConnectionAborted,
    DatagramTooLarge,
    NameUnresolvable,
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// The error for a host socket error.
pub(crate) fn error_code(e: &io::Error) -> ErrorCode {
    use io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => ErrorCode::ConnectionRefused,
        K::ConnectionReset => ErrorCode::ConnectionReset,
        K::ConnectionAborted => ErrorCode::ConnectionAborted,
        K::TimedOut => ErrorCode::Timeout,
        K::PermissionDenied => ErrorCode::AccessDenied,
        K::AddrNotAvailable | K::NetworkUnreachable | K::HostUnreachable => {
            ErrorCode::RemoteUnreachable
        }
        _ => ErrorCode::Unknown,
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
