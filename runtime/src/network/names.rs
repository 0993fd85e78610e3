//! A pod's name lookup: the names it answers itself (`localhost`, its hostname, its
//! `hostAliases`) and the names tried for a lookup (`dnsConfig.searches` with `ndots`, as a
//! `resolv.conf` search list gives them).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::spec::Dns;

/// The pod's own names and search rules.
#[derive(Debug, Default)]
pub(crate) struct PodNames {
    pub hostname: String,
    pub dns: Dns,
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
        if name.matches('.').count() >= self.dns.ndots {
            std::iter::once(name.to_owned()).chain(searched).collect()
        } else {
            searched.chain(std::iter::once(name.to_owned())).collect()
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

/// A pod's own name servers (`dnsConfig.nameservers`): port 53, UDP then TCP, 2 s a server and
/// two tries, no cache and no search list (the pod's candidates are asked one by one).
pub(crate) struct NameServers(hickory_resolver::TokioResolver);

impl NameServers {
    pub(crate) fn new(nameservers: &[IpAddr]) -> NameServers {
        use hickory_resolver::Resolver;
        use hickory_resolver::config::{
            LookupIpStrategy, NameServerConfigGroup, ResolveHosts, ResolverConfig, ResolverOpts,
        };
        use hickory_resolver::name_server::TokioConnectionProvider;

        let servers = NameServerConfigGroup::from_ips_clear(nameservers, 53, true);
        let config = ResolverConfig::from_parts(None, Vec::new(), servers);
        let mut options = ResolverOpts::default();
        options.timeout = std::time::Duration::from_secs(2);
        options.attempts = 2;
        options.ndots = 0;
        options.cache_size = 0;
        options.use_hosts_file = ResolveHosts::Never;
        options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_domains_come_first_for_short_names() {
        let names = PodNames {
            hostname: "web".into(),
            dns: Dns {
                aliases: vec![("db.internal".into(), "10.1.2.3".parse().unwrap())],
                searches: vec!["internal".into(), "corp".into()],
                ndots: 2,
                nameservers: Vec::new(),
                node_resolver: true,
            },
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
    }
}
