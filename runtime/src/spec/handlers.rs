//! Probes and lifecycle handlers: `exec`, `httpGet`, `tcpSocket`, `grpc`, with the kubelet's
//! defaults.

use super::errors::{FieldError, FieldPath};
use super::model::{ContainerPort, Handler, HttpGet, Probe};
use super::names::bounded_seconds;
use k8s_openapi::api::core::v1 as k8s;
use std::time::Duration;

pub(super) fn exec_handler(
    path: &FieldPath,
    exec: &k8s::ExecAction,
    errors: &mut Vec<FieldError>,
) -> Option<Handler> {
    match exec.command.as_deref() {
        Some([first, ..]) if !first.is_empty() => {
            Some(Handler::Exec(exec.command.clone().unwrap_or_default()))
        }
        _ => {
            errors.push(FieldError::required(
                path.child("command"),
                "required value: the export or argv to run",
            ));
            None
        }
    }
}

/// A probe's or handler's port: a number, or the name of one of the container's ports.
pub(super) fn handler_port(
    at: &FieldPath,
    port: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString,
    ports: &[ContainerPort],
    errors: &mut Vec<FieldError>,
) -> Option<u16> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let found = match port {
        IntOrString::Int(n) => u16::try_from(*n).ok().filter(|n| *n > 0),
        IntOrString::String(name) => match name.parse::<u16>() {
            Ok(n) if n > 0 => Some(n),
            _ => ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.port),
        },
    };
    if found.is_none() {
        let at = at.child("port");
        errors.push(match port {
            IntOrString::Int(n) => FieldError::invalid(
                at,
                format!("invalid value {n}: must be between 1 and 65535"),
            ),
            IntOrString::String(name) => {
                FieldError::not_found(at, format!("not found: no container port named {name:?}"))
            }
        });
    }
    found
}

/// `host` other than the pod IP is not honoured: the handler always targets the pod.
pub(super) fn no_host(at: &FieldPath, host: &Option<String>, errors: &mut Vec<FieldError>) {
    if host.as_deref().is_some_and(|h| !h.is_empty()) {
        errors.push(FieldError::not_supported(
            at.child("host"),
            "not supported by wasmpod: probes and hooks always target the pod IP",
        ));
    }
}

pub(super) fn http_get(
    at: &FieldPath,
    get: &k8s::HTTPGetAction,
    ports: &[ContainerPort],
    errors: &mut Vec<FieldError>,
) -> Option<Handler> {
    no_host(at, &get.host, errors);
    match get.scheme.as_deref() {
        None | Some("HTTP") => {}
        Some(other) => errors.push(FieldError::unsupported(
            at.child("scheme"),
            format!("unsupported value {other:?}: wasmpod supports HTTP"),
        )),
    }
    let path = get.path.clone().unwrap_or_else(|| "/".into());
    if !path.starts_with('/') || path.contains(|c: char| c.is_whitespace() || c.is_control()) {
        errors.push(FieldError::invalid(
            at.child("path"),
            format!("invalid value {path:?}: must be an absolute path without spaces"),
        ));
    }
    let mut headers = Vec::new();
    for (i, h) in get.http_headers.iter().flatten().enumerate() {
        let bad = |s: &str| s.contains(['\r', '\n']);
        if h.name.is_empty() || h.name.contains([':', ' ']) || bad(&h.name) || bad(&h.value) {
            errors.push(FieldError::invalid(
                at.child("httpHeaders").index(i),
                format!("invalid header {:?}", h.name),
            ));
        }
        headers.push((h.name.clone(), h.value.clone()));
    }
    let port = handler_port(at, &get.port, ports, errors)?;
    Some(Handler::HttpGet(HttpGet {
        port,
        path,
        headers,
    }))
}

pub(super) fn convert_probe(
    path: &FieldPath,
    p: &k8s::Probe,
    threshold_one: bool,
    ports: &[ContainerPort],
    errors: &mut Vec<FieldError>,
) -> Option<Probe> {
    let kinds = [
        p.exec.is_some(),
        p.http_get.is_some(),
        p.tcp_socket.is_some(),
        p.grpc.is_some(),
    ];
    if kinds.iter().filter(|k| **k).count() > 1 {
        errors.push(FieldError::invalid(
            path,
            "may not specify more than one handler type",
        ));
        return None;
    }
    let handler = if let Some(exec) = &p.exec {
        exec_handler(&path.child("exec"), exec, errors)?
    } else if let Some(get) = &p.http_get {
        http_get(&path.child("httpGet"), get, ports, errors)?
    } else if let Some(tcp) = &p.tcp_socket {
        let at = path.child("tcpSocket");
        no_host(&at, &tcp.host, errors);
        Handler::TcpSocket(handler_port(&at, &tcp.port, ports, errors)?)
    } else if let Some(grpc) = &p.grpc {
        let at = path.child("grpc");
        let port = k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(grpc.port);
        Handler::Grpc {
            port: handler_port(&at, &port, ports, errors)?,
            service: grpc.service.clone().unwrap_or_default(),
        }
    } else {
        errors.push(FieldError::required(
            path,
            "must specify a handler type (exec, httpGet, tcpSocket or grpc)",
        ));
        return None;
    };
    let mut seconds = |field: &str, value: Option<i32>, default: i32, min: i32| -> u32 {
        let v = value.unwrap_or(default);
        if v < min {
            errors.push(FieldError::invalid(
                path.child(field),
                format!("invalid value {v}: must be >= {min}"),
            ));
            return default as u32;
        }
        v as u32
    };
    let initial_delay = seconds("initialDelaySeconds", p.initial_delay_seconds, 0, 0);
    let period = seconds("periodSeconds", p.period_seconds, 10, 1);
    let timeout = seconds("timeoutSeconds", p.timeout_seconds, 1, 1);
    let success_threshold = seconds("successThreshold", p.success_threshold, 1, 1);
    let failure_threshold = seconds("failureThreshold", p.failure_threshold, 3, 1);
    if threshold_one && success_threshold != 1 {
        errors.push(FieldError::invalid(
            path.child("successThreshold"),
            format!("invalid value {success_threshold}: must be 1"),
        ));
    }
    let grace = match p.termination_grace_period_seconds {
        Some(g) if threshold_one && g >= 0 => Some(bounded_seconds(g)),
        Some(_) if !threshold_one => {
            errors.push(FieldError::invalid(
                path.child("terminationGracePeriodSeconds"),
                "must not be set for readiness probes",
            ));
            None
        }
        Some(g) => {
            errors.push(FieldError::invalid(
                path.child("terminationGracePeriodSeconds"),
                format!("invalid value {g}: must be >= 0"),
            ));
            None
        }
        None => None,
    };
    Some(Probe {
        handler,
        initial_delay: Duration::from_secs(initial_delay.into()),
        period: Duration::from_secs(period.into()),
        timeout: Duration::from_secs(timeout.into()),
        success_threshold,
        failure_threshold,
        grace,
    })
}
