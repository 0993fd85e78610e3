//! A pod's port tables: which addresses are bound on each port, and the guard that releases a
//! binding.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::PodNetwork;

/// A port table: which addresses are bound on each port.
pub(super) struct Ports<T>(HashMap<u16, Vec<(IpAddr, T)>>);

impl<T> Default for Ports<T> {
    fn default() -> Self {
        Ports(HashMap::new())
    }
}

impl<T> Ports<T> {
    /// Binds `addr` unless an overlapping address of the same family holds the port.
    pub(super) fn bind(&mut self, addr: SocketAddr, item: T) -> bool {
        let taken = self.0.get(&addr.port()).is_some_and(|bound| {
            bound.iter().any(|(ip, _)| {
                ip.is_ipv4() == addr.is_ipv4()
                    && (ip.is_unspecified() || addr.ip().is_unspecified() || *ip == addr.ip())
            })
        });
        if !taken {
            self.0
                .entry(addr.port())
                .or_default()
                .push((addr.ip(), item));
        }
        !taken
    }

    /// Whether any address holds `port`.
    pub(super) fn is_bound(&self, port: u16) -> bool {
        self.0.contains_key(&port)
    }

    pub(super) fn unbind(&mut self, addr: SocketAddr) {
        if let Some(bound) = self.0.get_mut(&addr.port()) {
            bound.retain(|(ip, _)| *ip != addr.ip());
            if bound.is_empty() {
                self.0.remove(&addr.port());
            }
        }
    }

    pub(super) fn get_mut(&mut self, addr: SocketAddr) -> Option<&mut T> {
        self.0
            .get_mut(&addr.port())?
            .iter_mut()
            .find(|(ip, _)| *ip == addr.ip())
            .map(|(_, item)| item)
    }

    /// What receives traffic to `to`: a binding of that exact address, or of the unspecified
    /// address of its family. `is_pod_ip` tells the pod IP apart from other addresses.
    pub(super) fn find(&self, to: SocketAddr, is_pod_ip: impl Fn(IpAddr) -> bool) -> Option<&T> {
        let bound = self.0.get(&to.port())?;
        let target = if to.ip().is_loopback() || is_pod_ip(to.ip()) {
            to.ip()
        } else {
            return None;
        };
        bound
            .iter()
            .find(|(ip, _)| *ip == target)
            .or_else(|| {
                bound
                    .iter()
                    .find(|(ip, _)| ip.is_unspecified() && ip.is_ipv4() == target.is_ipv4())
            })
            .map(|(_, item)| item)
    }
}

/// A port bound in a pod, released when dropped.
pub(crate) struct PortGuard {
    pub(super) pod: Arc<PodNetwork>,
    pub(super) addr: SocketAddr,
    pub(super) udp: bool,
}

impl PortGuard {
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for PortGuard {
    fn drop(&mut self) {
        if self.udp {
            self.pod.udp().unbind(self.addr);
        } else {
            self.pod.tcp().unbind(self.addr);
        }
    }
}
