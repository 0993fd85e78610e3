//! The pod network: every pod gets a private, in-memory network namespace.
//!
//! A [`PodNetwork`] is what `wasi:sockets` means inside a pod. Its loopback (`127.0.0.1`, `::1`)
//! and its pod IP are virtual: binding a port registers a listener in the pod's own port table,
//! connecting to a pod address finds that listener and joins the two ends with in-memory
//! [`pipe`]s. Two pods therefore never collide on ports, and nothing outside reaches a pod's port
//! unless it is published ([`publish`]). A pod reaches another pod of the node by its pod IP
//! (the Kubernetes flat network, in miniature) through the node-wide [`NodeNetwork`]; any other
//! address leaves the process through real host sockets, if the node's [`Egress`] policy allows.
//!
//! [`wasi`] maps `wasi:sockets` onto this model for components; preview1 modules have no sockets.

pub(crate) mod client;
pub(crate) mod error;
#[cfg(feature = "http")]
pub(crate) mod http;
pub(crate) mod listener;
pub(crate) mod names;
pub(crate) mod pipe;
mod ports;
pub(crate) mod publish;
pub(crate) mod tcp;
pub(crate) mod udp;

use std::collections::HashMap;

pub(crate) use names::PodNames;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use error::ErrorCode;
#[cfg(feature = "http")]
pub(crate) use listener::HostListener;
pub(crate) use listener::Listener;
pub(crate) use pipe::HostStream;
pub use pipe::PodConnection;
pub(crate) use ports::PortGuard;
use ports::Ports;
use udp::Inbox;

/// Whether pods may open connections to addresses outside the node's pod network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Egress {
    /// Outside addresses are reached through the host's sockets, as Kubernetes pods can.
    #[default]
    Allow,
    /// Connections and name lookups beyond the node's pods fail with `access-denied`.
    Deny,
}

/// The node's pod IP range: 10.88.0.0/13 (10.88.0.0 to 10.95.255.255), the node at 10.88.0.1,
/// pod IPs from 10.88.0.2 up: half a million addresses, more pods than a process can hold.
const POD_NET: u32 = u32::from_be_bytes([10, 88, 0, 0]);
/// The range's prefix length.
const POD_NET_PREFIX: u32 = 13;
/// The pod IPs in the range (all but the network's, the node's and the broadcast address).
pub(crate) const POD_IPS: u32 = (1 << (32 - POD_NET_PREFIX)) - 3;
/// The node's own address in the range.
const NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 1);

/// Ports handed out for `bind(port 0)` and the client side of connections (Linux's range).
const EPHEMERAL: std::ops::RangeInclusive<u16> = 32768..=60999;

/// The node-wide network: allocates pod IPs and routes pod-to-pod traffic.
#[derive(Clone, Default)]
pub(crate) struct NodeNetwork(Arc<NodeState>);

#[derive(Default)]
struct NodeState {
    egress: Egress,
    /// Where connections to [`crate::KUBERNETES_SERVICE`] go.
    api_server: Option<SocketAddr>,
    pods: Mutex<Pods>,
}

#[derive(Default)]
struct Pods {
    by_ip: HashMap<Ipv4Addr, Weak<PodNetwork>>,
    next: u32,
}

impl NodeNetwork {
    /// A node network whose pods reach `api_server`, if any, as the `kubernetes` Service.
    pub(crate) fn new(egress: Egress, api_server: Option<SocketAddr>) -> NodeNetwork {
        NodeNetwork(Arc::new(NodeState {
            egress,
            api_server,
            pods: Mutex::default(),
        }))
    }

    /// The host address the `kubernetes` Service leads to, when the node has an API.
    pub(crate) fn api_server(&self) -> Option<SocketAddr> {
        self.0.api_server
    }

    fn pods(&self) -> MutexGuard<'_, Pods> {
        self.0.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new pod network with the next free pod IP, which returns to the range when it is
    /// dropped; `None` when every one is taken.
    pub(crate) fn create_pod(&self, names: PodNames) -> Option<Arc<PodNetwork>> {
        let mut pods = self.pods();
        if pods.by_ip.len() >= POD_IPS as usize {
            return None;
        }
        // Some address is free: the search ends within one turn of the range.
        let ip = loop {
            let host = 2 + pods.next % POD_IPS;
            pods.next = pods.next.wrapping_add(1) % POD_IPS;
            let ip = Ipv4Addr::from(POD_NET | host);
            if !pods.by_ip.contains_key(&ip) {
                break ip;
            }
        };
        let pod = Arc::new(PodNetwork {
            ip,
            names,
            node: self.clone(),
            tcp: Mutex::default(),
            udp: Mutex::default(),
            next_port: Mutex::new(*EPHEMERAL.start()),
            outside: Arc::new(tokio::sync::Semaphore::new(MAX_OUTSIDE_CONNECTIONS)),
        });
        pods.by_ip.insert(ip, Arc::downgrade(&pod));
        Some(pod)
    }

    fn pod(&self, ip: Ipv4Addr) -> Option<Arc<PodNetwork>> {
        self.pods().by_ip.get(&ip).and_then(Weak::upgrade)
    }

    pub(crate) fn egress(&self) -> Egress {
        self.0.egress
    }
}

/// The `kubernetes` Service's address in the pod network (a cluster's first Service IP and
/// the API's port), which leads to [`crate::NodeOptions::api_server`].
pub const KUBERNETES_SERVICE: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    Ipv4Addr::new(10, 96, 0, 1),
    443,
));

/// The environment a cluster gives every container for the `kubernetes` Service (the kubelet's
/// service links of the API, which it adds whatever `enableServiceLinks` says).
pub(crate) fn kubernetes_service_env() -> Vec<(String, String)> {
    let (host, port) = (KUBERNETES_SERVICE.ip(), KUBERNETES_SERVICE.port());
    let url = format!("tcp://{host}:{port}");
    [
        ("KUBERNETES_SERVICE_HOST", host.to_string()),
        ("KUBERNETES_SERVICE_PORT", port.to_string()),
        ("KUBERNETES_SERVICE_PORT_HTTPS", port.to_string()),
        ("KUBERNETES_PORT", url.clone()),
        ("KUBERNETES_PORT_443_TCP", url),
        ("KUBERNETES_PORT_443_TCP_PROTO", "tcp".into()),
        ("KUBERNETES_PORT_443_TCP_PORT", port.to_string()),
        ("KUBERNETES_PORT_443_TCP_ADDR", host.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// Where an address a pod talks to lives.
pub(crate) enum Route {
    /// In this pod or another pod of the node.
    Pod(Arc<PodNetwork>),
    /// In the node's pod range, but no pod has it.
    Unreachable,
    /// Outside: the host's network.
    Outside,
}

/// Is the address one of the node's pod IPs (allocated or not)?
fn in_pod_range(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V4(v4) if u32::from(v4) >> (32 - POD_NET_PREFIX) == POD_NET >> (32 - POD_NET_PREFIX))
}

/// One pod's network namespace: its IP, its hostname and its port tables.
pub(crate) struct PodNetwork {
    ip: Ipv4Addr,
    names: PodNames,
    node: NodeNetwork,
    tcp: Mutex<Ports<Option<Arc<Listener>>>>,
    udp: Mutex<Ports<Arc<Inbox>>>,
    next_port: Mutex<u16>,
    /// Slots for connections through the host's network, each a host descriptor.
    outside: Arc<tokio::sync::Semaphore>,
}

/// TCP connections one pod may have through the host's network at once (each holds a host
/// descriptor); past it a connect fails with `new-socket-limit`.
const MAX_OUTSIDE_CONNECTIONS: usize = 1024;

impl PodNetwork {
    /// A slot for one more connection through the host's network, while the pod has one.
    pub(crate) fn outside_slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.outside.clone().try_acquire_owned().ok()
    }

    /// The pod's IP, as `status.podIP` shows it.
    pub(crate) fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// What the pod's name lookup answers and tries.
    pub(crate) fn names(&self) -> &PodNames {
        &self.names
    }

    pub(crate) fn egress(&self) -> Egress {
        self.node.egress()
    }

    /// Where a connection to `to` goes when `to` is the `kubernetes` Service of a node that
    /// has an API.
    pub(crate) fn service(&self, to: SocketAddr) -> Option<SocketAddr> {
        (to == KUBERNETES_SERVICE)
            .then(|| self.node.api_server())
            .flatten()
    }

    /// Is `ip` an address of this pod (loopback or the pod IP)?
    fn is_own(&self, ip: IpAddr) -> bool {
        ip.is_loopback() || ip == IpAddr::V4(self.ip)
    }

    /// The address this pod uses as the source when talking to `remote`.
    fn source_for(&self, remote: IpAddr) -> IpAddr {
        match remote {
            IpAddr::V4(v4) if v4.is_loopback() => remote,
            IpAddr::V4(_) => IpAddr::V4(self.ip),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        }
    }

    /// Where packets to `ip` go from this pod.
    fn route(self: &Arc<Self>, ip: IpAddr) -> Route {
        if self.is_own(ip) {
            return Route::Pod(self.clone());
        }
        match ip {
            IpAddr::V4(v4) if in_pod_range(ip) => match self.node.pod(v4) {
                Some(pod) => Route::Pod(pod),
                None => Route::Unreachable,
            },
            _ => Route::Outside,
        }
    }

    /// May a socket bind `ip` in this pod?
    fn bindable(&self, ip: IpAddr) -> bool {
        ip.is_unspecified() || self.is_own(ip)
    }

    /// Binds a TCP socket to `addr` (port 0: an ephemeral port); the guard releases it.
    fn bind_tcp(self: &Arc<Self>, addr: SocketAddr) -> Result<PortGuard, ErrorCode> {
        self.bind(&self.tcp, addr, None, false)
    }

    /// Binds a UDP socket's `inbox` to `addr` (port 0: an ephemeral port).
    fn bind_udp(
        self: &Arc<Self>,
        addr: SocketAddr,
        inbox: Arc<Inbox>,
    ) -> Result<PortGuard, ErrorCode> {
        self.bind(&self.udp, addr, inbox, true)
    }

    fn bind<T>(
        self: &Arc<Self>,
        table: &Mutex<Ports<T>>,
        mut addr: SocketAddr,
        item: T,
        udp: bool,
    ) -> Result<PortGuard, ErrorCode> {
        if !self.bindable(addr.ip()) {
            return Err(ErrorCode::AddressNotBindable);
        }
        let mut ports = table.lock().unwrap_or_else(|e| e.into_inner());
        if addr.port() == 0 {
            addr.set_port(self.ephemeral(&ports).ok_or(ErrorCode::AddressInUse)?);
        }
        if !ports.bind(addr, item) {
            return Err(ErrorCode::AddressInUse);
        }
        Ok(PortGuard {
            pod: self.clone(),
            addr,
            udp,
        })
    }

    /// A free ephemeral port in `ports`.
    fn ephemeral<T>(&self, ports: &Ports<T>) -> Option<u16> {
        let mut next = self.next_port.lock().unwrap_or_else(|e| e.into_inner());
        let span = EPHEMERAL.end() - EPHEMERAL.start() + 1;
        for _ in 0..span {
            let port = *next;
            *next = if port == *EPHEMERAL.end() {
                *EPHEMERAL.start()
            } else {
                port + 1
            };
            if !ports.is_bound(port) {
                return Some(port);
            }
        }
        None
    }

    fn tcp(&self) -> MutexGuard<'_, Ports<Option<Arc<Listener>>>> {
        self.tcp.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn udp(&self) -> MutexGuard<'_, Ports<Arc<Inbox>>> {
        self.udp.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The TCP listener that takes connections to `addr` in this pod, if any.
    fn listener(&self, addr: SocketAddr) -> Option<Arc<Listener>> {
        self.tcp()
            .find(addr, |pod_ip| pod_ip == IpAddr::V4(self.ip))
            .and_then(|l| l.clone())
    }

    /// Connects the host to `port` on the pod IP (what published ports and network probes do);
    /// the connection comes from the node's address in the pod range, 10.88.0.1.
    pub(crate) async fn connect_from_host(&self, port: u16) -> std::io::Result<HostStream> {
        let to = SocketAddr::new(IpAddr::V4(self.ip), port);
        let from = SocketAddr::new(IpAddr::V4(NODE_IP), 0);
        let listener = self
            .listener(to)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::ConnectionRefused))?;
        listener.connect_host(from, to).await
    }
}

impl PodNetwork {
    /// Listens on `port` of every address of the pod for the host (an HTTP handler container's
    /// server), as a guest binding `0.0.0.0:port` would.
    #[cfg(feature = "http")]
    pub(crate) fn listen_host(self: &Arc<Self>, port: u16) -> Result<HostListener, ErrorCode> {
        let port = self.bind_tcp(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port))?;
        let listener = Listener::new(listener::DEFAULT_BACKLOG);
        if let Some(slot) = self.tcp().get_mut(port.addr()) {
            *slot = Some(listener.clone());
        }
        Ok(HostListener {
            listener,
            _port: port,
        })
    }

    /// Connects from this pod to `to` in this pod or another of the node (outgoing `wasi:http`
    /// requests): `None` when `to` is outside the pod network.
    #[cfg(feature = "http")]
    pub(crate) async fn connect_within(
        self: &Arc<Self>,
        to: SocketAddr,
    ) -> Option<std::io::Result<HostStream>> {
        let refused = || std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let pod = match self.route(to.ip()) {
            Route::Outside => return None,
            Route::Unreachable => {
                return Some(Err(std::io::Error::from(
                    std::io::ErrorKind::HostUnreachable,
                )));
            }
            Route::Pod(pod) => pod,
        };
        let Some(listener) = pod.listener(to) else {
            return Some(Err(refused()));
        };
        let port = self.ephemeral(&self.tcp()).unwrap_or(0);
        let from = SocketAddr::new(self.source_for(to.ip()), port);
        Some(listener.connect_host(from, to).await)
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        // The pod IP returns to the pool.
        self.node.pods().by_ip.remove(&self.ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_get_distinct_ips_and_reuse_freed_ones_later() {
        let node = NodeNetwork::new(Egress::Allow, None);
        let a = node
            .create_pod(PodNames {
                hostname: "a".into(),
                ..PodNames::default()
            })
            .unwrap();
        let b = node
            .create_pod(PodNames {
                hostname: "b".into(),
                ..PodNames::default()
            })
            .unwrap();
        assert_ne!(a.ip(), b.ip());
        assert!(in_pod_range(IpAddr::V4(a.ip())));
        assert!(matches!(a.route(IpAddr::V4(b.ip())), Route::Pod(p) if p.ip() == b.ip()));
        let gone = b.ip();
        drop(b);
        assert!(matches!(a.route(IpAddr::V4(gone)), Route::Unreachable));
        assert!(matches!(
            a.route("1.1.1.1".parse().unwrap()),
            Route::Outside
        ));
    }

    /// Past 65,533 pods (a /16) addresses come from the rest of the /13; when all are taken a
    /// pod gets none (an error, never a search without end), and a freed one is found again.
    #[test]
    fn the_pod_range_holds_half_a_million_pods_and_says_when_it_is_full() {
        let node = NodeNetwork::new(Egress::Allow, None);
        let mut pods: Vec<_> = (0..POD_IPS)
            .map(|_| {
                node.create_pod(PodNames::default())
                    .expect("a free address")
            })
            .collect();
        let last = pods.last().unwrap().ip();
        assert_eq!(last, Ipv4Addr::new(10, 95, 255, 254));
        assert!(in_pod_range(IpAddr::V4(last)));
        assert!(!in_pod_range("10.96.0.1".parse().unwrap()));
        assert!(node.create_pod(PodNames::default()).is_none(), "full");
        let freed = pods.swap_remove(70_000).ip();
        let again = node.create_pod(PodNames::default()).unwrap();
        assert_eq!(again.ip(), freed);
    }

    #[test]
    fn overlapping_binds_conflict_and_distinct_addresses_do_not() {
        let mut ports = Ports::default();
        let any: SocketAddr = "0.0.0.0:80".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:80".parse().unwrap();
        let lo6: SocketAddr = "[::1]:80".parse().unwrap();
        assert!(ports.bind(lo, 1));
        assert!(!ports.bind(any, 2));
        assert!(!ports.bind(lo, 3));
        assert!(ports.bind(lo6, 4));
        ports.unbind(lo);
        assert!(ports.bind(any, 5));
        assert_eq!(ports.find(lo, |_| false), Some(&5));
        assert_eq!(ports.find("8.8.8.8:80".parse().unwrap(), |_| false), None);
    }
}
