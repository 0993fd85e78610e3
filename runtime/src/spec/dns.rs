//! A pod's name lookup: `hostAliases` (its `/etc/hosts` entries), `dnsPolicy` and `dnsConfig`
//! (its `resolv.conf`), validated as the API server validates them.
//!
//! The pod network answers `localhost`, the pod's hostname and its `hostAliases`, and asks for
//! the rest (when egress is allowed) the node's resolver and the pod's own
//! `dnsConfig.nameservers`, in that order — only the pod's name servers under `dnsPolicy: None`,
//! as a `resolv.conf` with only them would. `dnsConfig.searches` and the `ndots` option give the
//! names tried, as a `resolv.conf` search list does, and the other `dnsConfig.options` a glibc
//! resolver honours shape the lookups as they shape its own ([`ResolverOptions`]).

use std::net::IpAddr;
use std::sync::{Arc, LazyLock};

use k8s_openapi::api::core::v1 as k8s;

use super::errors::{FieldError, FieldPath};
use super::names::check_subdomain;

/// What a pod's name lookup answers and tries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Dns {
    /// `hostAliases`, lower-cased: each name with its addresses, in order.
    pub aliases: Vec<(String, IpAddr)>,
    /// `dnsConfig.searches`, without trailing dots.
    pub searches: Vec<String>,
    /// A name with fewer dots than this is tried with the search domains first.
    pub ndots: usize,
    /// `dnsConfig.nameservers`: asked after the node's resolver, or alone.
    pub nameservers: Vec<IpAddr>,
    /// Whether the node's resolver is asked (all policies but `None`).
    pub node_resolver: bool,
    /// The `dnsConfig.options` besides `ndots`.
    pub resolver: ResolverOptions,
}

/// The `resolv.conf` options (`dnsConfig.options`) that shape a pod's lookups, with glibc's
/// meaning and bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResolverOptions {
    /// `timeout:n`: how long the pod's name servers have to answer a query, 1–30 s.
    pub timeout: std::time::Duration,
    /// `attempts:n`: how many times each is asked, 1–5.
    pub attempts: usize,
    /// `rotate`: the pod's name servers are asked round-robin rather than in order.
    pub rotate: bool,
    /// `edns0`: queries carry the EDNS0 extension.
    pub edns0: bool,
    /// `use-vc`: queries go over TCP.
    pub use_vc: bool,
    /// `no-aaaa`: no AAAA queries, and no IPv6 addresses from DNS.
    pub no_aaaa: bool,
    /// `no-tld-query`: a name without a dot is never asked as it is, only with the search
    /// domains.
    pub no_tld_query: bool,
}

impl Default for ResolverOptions {
    fn default() -> Self {
        ResolverOptions {
            timeout: std::time::Duration::from_secs(2),
            attempts: 2,
            rotate: false,
            edns0: false,
            use_vc: false,
            no_aaaa: false,
            no_tld_query: false,
        }
    }
}

/// glibc's bounds on `timeout` and `attempts` (`RES_MAXRETRANS`, `RES_MAXRETRY`).
const MAX_TIMEOUT: u64 = 30;
const MAX_ATTEMPTS: usize = 5;

/// The API server's limit on `dnsConfig.nameservers`.
const MAX_NAMESERVERS: usize = 3;

/// The API server's limits on `dnsConfig.searches`.
const MAX_SEARCHES: usize = 32;
const MAX_SEARCHES_LEN: usize = 2048;

/// `dns`, shared: the lookups of a pod with neither `hostAliases` nor `dnsConfig` are the same
/// for all of them (its spec and its network keep one `Dns`, not a copy each).
pub(super) fn shared(dns: Dns) -> Arc<Dns> {
    static CLUSTER_FIRST: LazyLock<Arc<Dns>> = LazyLock::new(|| {
        Arc::new(Dns {
            ndots: 5,
            node_resolver: true,
            ..Dns::default()
        })
    });
    if dns == **CLUSTER_FIRST {
        CLUSTER_FIRST.clone()
    } else {
        Arc::new(dns)
    }
}

pub(super) fn check(spec: &k8s::PodSpec, errors: &mut Vec<FieldError>) -> Dns {
    let mut dns = Dns {
        aliases: aliases(spec.host_aliases.as_deref().unwrap_or_default(), errors),
        // The kubelet writes `ndots:5` for the cluster policies; `Default` is the node's, whose
        // resolver starts at 1.
        ndots: if spec.dns_policy.as_deref() == Some("Default") {
            1
        } else {
            5
        },
        searches: Vec::new(),
        nameservers: Vec::new(),
        node_resolver: true,
        resolver: ResolverOptions::default(),
    };
    match spec.dns_policy.as_deref() {
        None | Some("ClusterFirst" | "Default" | "ClusterFirstWithHostNet") => {}
        Some("None") => {
            // What the pod's `resolv.conf` would have: its dnsConfig, nothing of the node's.
            dns.node_resolver = false;
            dns.ndots = 1;
            if spec
                .dns_config
                .as_ref()
                .and_then(|c| c.nameservers.as_ref())
                .is_none_or(Vec::is_empty)
            {
                errors.push(FieldError::required(
                    "spec.dnsConfig.nameservers",
                    "Required value: must provide at least one DNS nameserver when `dnsPolicy` \
                     is None",
                ));
            }
        }
        Some(other) => errors.push(FieldError::unsupported(
            "spec.dnsPolicy",
            format!(
                "unsupported value {other:?}: must be ClusterFirst, ClusterFirstWithHostNet, \
                 Default or None"
            ),
        )),
    }
    let Some(config) = &spec.dns_config else {
        return dns;
    };
    let at = FieldPath::new("spec").child("dnsConfig");
    let nameservers = config.nameservers.as_deref().unwrap_or_default();
    if nameservers.len() > MAX_NAMESERVERS {
        errors.push(FieldError::invalid(
            at.child("nameservers"),
            format!("must not have more than {MAX_NAMESERVERS} nameservers"),
        ));
    }
    for (i, server) in nameservers.iter().enumerate().take(MAX_NAMESERVERS) {
        match server.parse::<IpAddr>() {
            Ok(ip) => dns.nameservers.push(ip),
            Err(_) => errors.push(FieldError::invalid(
                at.child("nameservers").index(i),
                format!("Invalid value: {server:?}: must be a valid IP address"),
            )),
        }
    }

    let searches = config.searches.as_deref().unwrap_or_default();
    if searches.len() > MAX_SEARCHES {
        errors.push(FieldError::invalid(
            at.child("searches"),
            format!("must not have more than {MAX_SEARCHES} search paths"),
        ));
    }
    if searches.iter().map(|s| s.len() + 1).sum::<usize>() > MAX_SEARCHES_LEN {
        errors.push(FieldError::invalid(
            at.child("searches"),
            format!("must not have more than {MAX_SEARCHES_LEN} characters (including spaces)"),
        ));
    }
    for (i, s) in searches.iter().enumerate().take(MAX_SEARCHES) {
        let domain = s.trim_end_matches('.').to_ascii_lowercase();
        if let Err(why) = check_subdomain(&domain) {
            errors.push(FieldError::invalid(
                at.child("searches").index(i),
                format!("Invalid value: {s:?}: {why}"),
            ));
        } else {
            dns.searches.push(domain);
        }
    }
    for (i, option) in config.options.iter().flatten().enumerate() {
        resolver_option(&at.child("options").index(i), option, &mut dns, errors);
    }
    dns
}

/// One of `dnsConfig.options`: a glibc resolver option, with its value where it takes one.
fn resolver_option(
    at: &FieldPath,
    option: &k8s::PodDNSConfigOption,
    dns: &mut Dns,
    errors: &mut Vec<FieldError>,
) {
    let value = option.value.as_deref().filter(|v| !v.is_empty());
    let number = |max: u64, errors: &mut Vec<FieldError>| match value.map(str::parse::<u64>) {
        Some(Ok(n)) => Some(n.min(max)),
        _ => {
            errors.push(FieldError::invalid(
                at.child("value"),
                format!(
                    "must be a non-negative integer for {}",
                    option.name.as_deref().unwrap_or_default()
                ),
            ));
            None
        }
    };
    let options = &mut dns.resolver;
    let mut no_effect = false;
    let flag = match option.name.as_deref() {
        // resolv.conf caps ndots at 15.
        Some("ndots") => {
            if let Some(n) = number(15, errors) {
                dns.ndots = n as usize;
            }
            return;
        }
        Some("timeout") => {
            if let Some(n) = number(MAX_TIMEOUT, errors) {
                options.timeout = std::time::Duration::from_secs(n.max(1));
            }
            return;
        }
        Some("attempts") => {
            if let Some(n) = number(MAX_ATTEMPTS as u64, errors) {
                options.attempts = (n as usize).max(1);
            }
            return;
        }
        Some("rotate") => &mut options.rotate,
        Some("edns0") => &mut options.edns0,
        Some("use-vc") => &mut options.use_vc,
        Some("no-aaaa") => &mut options.no_aaaa,
        Some("no-tld-query") => &mut options.no_tld_query,
        // What these change cannot be seen in the addresses a pod is given: its lookups send one
        // query at a time, check names as loosely as glibc without checks, and hand no DNSSEC
        // bits to the guest.
        Some("single-request" | "single-request-reopen" | "no-check-names" | "trust-ad") => {
            &mut no_effect
        }
        None | Some("") => {
            errors.push(FieldError::required(at.child("name"), "Required value"));
            return;
        }
        Some(
            name @ ("debug" | "no-reload" | "inet6" | "ip6-bytestring" | "ip6-dotint"
            | "no-ip6-dotint"),
        ) => {
            errors.push(FieldError::not_supported(
                at.child("name"),
                format!(
                    "not supported by wasmpod: {name:?} has no meaning for a pod's resolver \
                     (it prints resolver debugging, reloads a resolv.conf file, or is a \
                     removed IPv6 option); supported: ndots, timeout, attempts, rotate, edns0, \
                     use-vc, no-aaaa, no-tld-query, single-request, single-request-reopen, \
                     no-check-names, trust-ad"
                ),
            ));
            return;
        }
        Some(other) => {
            errors.push(FieldError::not_supported(
                at.child("name"),
                format!(
                    "not supported by wasmpod: {other:?} is not a resolv.conf option; \
                     supported: ndots, timeout, attempts, rotate, edns0, use-vc, no-aaaa, \
                     no-tld-query, single-request, single-request-reopen, no-check-names, \
                     trust-ad"
                ),
            ));
            return;
        }
    };
    if value.is_some() {
        errors.push(FieldError::invalid(
            at.child("value"),
            format!(
                "must be empty: {} takes no value",
                option.name.as_deref().unwrap_or_default()
            ),
        ));
    }
    *flag = true;
}

fn aliases(list: &[k8s::HostAlias], errors: &mut Vec<FieldError>) -> Vec<(String, IpAddr)> {
    let at = FieldPath::new("spec").child("hostAliases");
    let mut aliases = Vec::new();
    for (i, alias) in list.iter().enumerate() {
        let ip = match alias.ip.parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                errors.push(FieldError::invalid(
                    at.index(i).child("ip"),
                    format!("Invalid value: {:?}: must be a valid IP address", alias.ip),
                ));
                None
            }
        };
        for (j, name) in alias.hostnames.iter().flatten().enumerate() {
            if let Err(why) = check_subdomain(name) {
                errors.push(FieldError::invalid(
                    at.index(i).child("hostnames").index(j),
                    format!("Invalid value: {name:?}: {why}"),
                ));
            } else if let Some(ip) = ip {
                aliases.push((name.to_ascii_lowercase(), ip));
            }
        }
    }
    aliases
}
