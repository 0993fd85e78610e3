//! A container's `ports[]`, and the pod-wide rule that no two containers publish the same host
//! address and port.

use super::errors::{FieldError, FieldPath};
use super::model::{ContainerPort, ContainerSpec};
use super::names::check_label;
use k8s_openapi::api::core::v1 as k8s;

/// `ports[]`: numbers in range, names unique DNS-1123 labels of at most 15 characters, TCP or
/// UDP.
pub(super) fn convert_ports(
    path: &FieldPath,
    ports: &[k8s::ContainerPort],
    errors: &mut Vec<FieldError>,
) -> Vec<ContainerPort> {
    let mut out: Vec<ContainerPort> = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let at = path.child("ports").index(i);
        let number = |field: &str, v: i32, errors: &mut Vec<FieldError>| {
            u16::try_from(v).ok().filter(|v| *v > 0).or_else(|| {
                errors.push(FieldError::invalid(
                    at.child(field),
                    format!("invalid value {v}: must be between 1 and 65535"),
                ));
                None
            })
        };
        let Some(port) = number("containerPort", p.container_port, errors) else {
            continue;
        };
        let udp = match p.protocol.as_deref() {
            None | Some("TCP") => false,
            Some("UDP") => true,
            Some(other) => {
                errors.push(FieldError::unsupported(
                    at.child("protocol"),
                    format!("unsupported value {other:?}: wasmpod supports TCP and UDP"),
                ));
                false
            }
        };
        if let Some(name) = &p.name {
            if let Err(why) = check_label(name).and_then(|()| {
                if name.len() > 15 || !name.chars().any(|c| c.is_ascii_lowercase()) {
                    Err("must be at most 15 characters with at least one letter")
                } else {
                    Ok(())
                }
            }) {
                errors.push(FieldError::invalid(
                    at.child("name"),
                    format!("invalid value {name:?}: {why}"),
                ));
            }
            if out.iter().any(|o| o.name.as_ref() == Some(name)) {
                errors.push(FieldError::duplicate(
                    at.child("name"),
                    format!("duplicate value {name:?}"),
                ));
            }
        }
        let host_ip = match p.host_ip.as_deref() {
            None | Some("") => std::net::IpAddr::from([127, 0, 0, 1]),
            Some(ip) => match ip.parse() {
                Ok(ip) => ip,
                Err(_) => {
                    errors.push(FieldError::invalid(
                        at.child("hostIP"),
                        format!("invalid value {ip:?}: must be an IP address"),
                    ));
                    continue;
                }
            },
        };
        let host = match p.host_port {
            None | Some(0) => None,
            Some(_) if udp => {
                errors.push(FieldError::not_supported(
                    at.child("hostPort"),
                    "not supported by wasmpod for UDP ports",
                ));
                None
            }
            Some(hp) => {
                number("hostPort", hp, errors).map(|hp| std::net::SocketAddr::new(host_ip, hp))
            }
        };
        out.push(ContainerPort {
            name: p.name.clone(),
            port,
            udp,
            host,
        });
    }
    out
}

/// Two containers of a pod cannot publish the same host address and port.
pub(super) fn check_host_ports(containers: &[ContainerSpec], errors: &mut Vec<FieldError>) {
    let mut seen: Vec<std::net::SocketAddr> = Vec::new();
    for c in containers {
        for (i, p) in c.ports.iter().enumerate() {
            let Some(host) = p.host else { continue };
            if seen.contains(&host) {
                errors.push(FieldError::duplicate(
                    format!("{}.ports[{i}].hostPort", c.field),
                    format!("duplicate value {}", host.port()),
                ));
            }
            seen.push(host);
        }
    }
}
