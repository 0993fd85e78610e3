//! A pod's name lookup: the names it answers itself (`localhost`, its hostname, its
//! `hostAliases`) and the names tried for a lookup (`dnsConfig.searches` with `ndots`, as a
//! `resolv.conf` search list gives them).

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use wasmtime_wasi::p2::Pollable;

use super::error::ErrorCode;
use super::{Egress, PodNetwork};
use crate::spec::{Dns, ResolverOptions};

/// The pod's own names and search rules.
#[derive(Debug, Default)]
pub(crate) struct PodNames {
    pub hostname: String,
    pub dns: Arc<Dns>,
}

impl PodNames {
    /// The names to try for `name` (lower-case), in order: a name ending in `.` as it is;
    /// one with at least `ndots` dots as it is, then with each search domain; a shorter one
    /// with each search domain first.
    pub(crate) fn candidates(&self, name: &str) -> Vec<String> {
        if let Some(absolute) = name.strip_suffix('.') {
            return vec![absolute.to_owned()];
        }
        let searched = self
            .dns
            .searches
            .iter()
            .map(|domain| format!("{name}.{domain}"))
            .filter(|n| n.len() <= 253);
        // `no-tld-query`: a name without a dot is only tried with the search domains.
        let as_is =
            (!self.dns.resolver.no_tld_query || name.contains('.')).then(|| name.to_owned());
        if name.matches('.').count() >= self.dns.ndots {
            as_is.into_iter().chain(searched).collect()
        } else {
            searched.chain(as_is).collect()
        }
    }

    /// What the pod itself answers for `name`: `localhost`, its hostname (`ip`), its
    /// `hostAliases`; `None` for a name it leaves to the node's resolver.
    pub(crate) fn local(&self, name: &str, ip: IpAddr) -> Option<Vec<IpAddr>> {
        if name == "localhost" || name.ends_with(".localhost") {
            return Some(vec![Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()]);
        }
        if name == self.hostname {
            return Some(vec![ip]);
        }
        let aliased: Vec<IpAddr> = self
            .dns
            .aliases
            .iter()
            .filter(|(alias, _)| alias == name)
            .map(|(_, ip)| *ip)
            .collect();
        (!aliased.is_empty()).then_some(aliased)
    }
}

/// A pod's own name servers (`dnsConfig.nameservers`): port 53, UDP then TCP (TCP only with
/// `use-vc`), asked one at a time in order (round-robin with `rotate`), each `timeout` (2 s)
/// and `attempts` (2) times, no cache and no search list (the pod's candidates are asked one by
/// one).
pub(crate) struct NameServers(hickory_resolver::TokioResolver);

impl NameServers {
    pub(crate) fn new(nameservers: &[IpAddr], how: &ResolverOptions) -> NameServers {
        use hickory_resolver::Resolver;
        use hickory_resolver::config::{
            LookupIpStrategy, NameServerConfigGroup, ResolveHosts, ResolverConfig, ResolverOpts,
            ServerOrderingStrategy,
        };
        use hickory_resolver::name_server::TokioConnectionProvider;
        use hickory_resolver::proto::xfer::Protocol;

        let mut servers = NameServerConfigGroup::from_ips_clear(nameservers, 53, true);
        if how.use_vc {
            servers.retain(|s| s.protocol == Protocol::Tcp);
        }
        let config = ResolverConfig::from_parts(None, Vec::new(), servers);
        let mut options = ResolverOpts::default();
        options.timeout = how.timeout;
        options.attempts = how.attempts;
        options.edns0 = how.edns0;
        options.num_concurrent_reqs = 1;
        options.server_ordering_strategy = if how.rotate {
            ServerOrderingStrategy::RoundRobin
        } else {
            ServerOrderingStrategy::UserProvidedOrder
        };
        options.ndots = 0;
        options.cache_size = 0;
        options.use_hosts_file = ResolveHosts::Never;
        options.ip_strategy = if how.no_aaaa {
            LookupIpStrategy::Ipv4Only
        } else {
            LookupIpStrategy::Ipv4AndIpv6
        };
        NameServers(
            Resolver::builder_with_config(config, TokioConnectionProvider::default())
                .with_options(options)
                .build(),
        )
    }

    /// The addresses `name` (fully qualified, without its final dot) has: its A and AAAA
    /// records, at most 64. Empty when no server answers with one.
    pub(crate) async fn ask(&self, name: &str) -> Vec<IpAddr> {
        let Ok(found) = self.0.lookup_ip(format!("{name}.")).await else {
            return Vec::new();
        };
        let mut ips: Vec<IpAddr> = Vec::new();
        for ip in found.iter().take(64) {
            if !ips.contains(&ip) {
                ips.push(ip);
            }
        }
        ips
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
pub(crate) fn resolve(pod: &PodNetwork, name: &str) -> ResolveAddresses {
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
    let how = dns.resolver.clone();
    let nameservers =
        (!dns.nameservers.is_empty()).then(|| NameServers::new(&dns.nameservers, &how));
    // The node's resolver takes its own options from the node's resolv.conf; the pod's bound
    // what a lookup may take, and `no-aaaa` what it may give.
    let node_limit = how.timeout.saturating_mul(how.attempts as u32);
    ResolveAddresses::Pending(tokio::spawn(async move {
        for host in candidates {
            let mut ips: VecDeque<IpAddr> = VecDeque::new();
            if node_resolver
                && let Ok(Ok(addrs)) =
                    tokio::time::timeout(node_limit, tokio::net::lookup_host((host.as_str(), 0)))
                        .await
            {
                for ip in addrs.map(|a| a.ip()) {
                    let unwanted = how.no_aaaa && ip.is_ipv6();
                    if !unwanted && !ips.contains(&ip) {
                        ips.push_back(ip);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_domains_come_first_for_short_names() {
        let names = PodNames {
            hostname: "web".into(),
            dns: Arc::new(Dns {
                aliases: vec![("db.internal".into(), "10.1.2.3".parse().unwrap())],
                searches: vec!["internal".into(), "corp".into()],
                ndots: 2,
                nameservers: Vec::new(),
                node_resolver: true,
                resolver: ResolverOptions::default(),
            }),
        };
        assert_eq!(names.candidates("db"), ["db.internal", "db.corp", "db"]);
        assert_eq!(
            names.candidates("a.b.c"),
            ["a.b.c", "a.b.c.internal", "a.b.c.corp"]
        );
        assert_eq!(names.candidates("db.internal."), ["db.internal"]);
        let ip: IpAddr = "10.88.0.2".parse().unwrap();
        assert_eq!(names.local("web", ip), Some(vec![ip]));
        assert_eq!(
            names.local("db.internal", ip),
            Some(vec!["10.1.2.3".parse().unwrap()])
        );
        assert_eq!(names.local("db", ip), None);
        // `no-tld-query`: a name without a dot only with the search domains.
        let mut names = names;
        Arc::make_mut(&mut names.dns).resolver.no_tld_query = true;
        assert_eq!(names.candidates("db"), ["db.internal", "db.corp"]);
        assert_eq!(names.candidates("db.x")[0], "db.x.internal");
    }
}
