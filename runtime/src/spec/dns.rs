//! A pod's name lookup: `hostAliases` (its `/etc/hosts` entries), `dnsPolicy` and `dnsConfig`
//! (its `resolv.conf`), validated as the API server validates them.
//!
//! The pod network answers `localhost`, the pod's hostname and its `hostAliases`, and asks for
//! the rest (when egress is allowed) the node's resolver and the pod's own
//! `dnsConfig.nameservers`, in that order — only the pod's name servers under `dnsPolicy: None`,
//! as a `resolv.conf` with only them would. `dnsConfig.searches` and the `ndots` option give the
//! names tried, as a `resolv.conf` search list does.

use std::net::IpAddr;

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
}

/// The API server's limit on `dnsConfig.nameservers`.
const MAX_NAMESERVERS: usize = 3;

/// The API server's limits on `dnsConfig.searches`.
const MAX_SEARCHES: usize = 32;
const MAX_SEARCHES_LEN: usize = 2048;

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
        let oat = at.child("options").index(i);
        match option.name.as_deref() {
            Some("ndots") => match option.value.as_deref().map(str::parse::<usize>) {
                // resolv.conf caps ndots at 15.
                Some(Ok(n)) => dns.ndots = n.min(15),
                _ => errors.push(FieldError::invalid(
                    oat.child("value"),
                    "must be a non-negative integer for ndots",
                )),
            },
            None | Some("") => {
                errors.push(FieldError::required(oat.child("name"), "Required value"))
            }
            Some(other) => errors.push(FieldError::not_supported(
                oat.child("name"),
                format!(
                    "not supported by wasmpod: {other:?} tunes a resolv.conf resolver, which a \
                     wasm pod does not have (only ndots shapes its name lookup)"
                ),
            )),
        }
    }
    dns
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
