//! Outgoing `wasi:http` requests of a pod's guests (`wasi:http/outgoing-handler`), routed as
//! their sockets are: to the pod itself and the node's pods through the pod network, anywhere
//! else through the host, when the node's [`Egress`] policy allows.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

use super::{Egress, PodNetwork};

/// The guest's request's wait for a connection and for its response's first byte, unless its
/// options say otherwise (wasmtime's default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// What [`send`] gives wasmtime-wasi-http: the response, and a future that ends with the
/// connection.
pub(crate) type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
);

/// Sends `request` from `pod`.
pub(crate) async fn send(
    pod: Arc<PodNetwork>,
    request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
) -> Result<Sent, Error> {
    let uri = request.uri();
    let authority = uri.authority().ok_or(Error::HttpRequestUriInvalid)?;
    let tls = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
    let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let within = local_ip(&pod, authority.host()).map(|ip| SocketAddr::new(ip, port));
    let connect = options
        .and_then(|o| o.connect_timeout)
        .unwrap_or(DEFAULT_TIMEOUT);
    let first_byte = options
        .and_then(|o| o.first_byte_timeout)
        .unwrap_or(DEFAULT_TIMEOUT);
    let connected = match within {
        Some(to) => tokio::time::timeout(connect, pod.connect_within(to))
            .await
            .map_err(|_| Error::ConnectionTimeout)?,
        None => None,
    };
    let stream = match connected {
        Some(Ok(stream)) => stream,
        Some(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(Error::ConnectionRefused);
        }
        Some(Err(_)) => return Err(Error::DestinationUnavailable),
        None if pod.egress() == Egress::Deny => return Err(Error::HttpRequestDenied),
        None => {
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            return Ok((response.map(BodyExt::boxed_unsync), Box::new(io)));
        }
    };
    // Inside the pod network there is no TLS to speak: the pod's own servers are plain TCP.
    if tls {
        return Err(Error::TlsProtocolError);
    }
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(Error::from)?;
    let mut request = request;
    // The request line carries the path only; the authority is in `host`.
    *request.uri_mut() = http::Uri::builder()
        .path_and_query(
            request
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned(),
        )
        .build()
        .map_err(|_| Error::HttpRequestUriInvalid)?;
    let mut conn = Box::pin(conn);
    let response = tokio::select! {
        response = tokio::time::timeout(first_byte, sender.send_request(request)) => {
            response.map_err(|_| Error::ConnectionReadTimeout)?.map_err(Error::from)?
        }
        ended = &mut conn => {
            ended.map_err(Error::from)?;
            return Err(Error::HttpResponseIncomplete);
        }
    };
    let response = response.map(|body| body.map_err(Error::from).boxed_unsync());
    Ok((
        response,
        Box::new(async move { conn.await.map_err(Error::from) }),
    ))
}

/// The address `host` names inside the pod network: an IP literal of the pod or the node's pods,
/// or a name the pod answers itself (`localhost`, its hostname, its `hostAliases`). `None`:
/// the host's network.
fn local_ip(pod: &PodNetwork, host: &str) -> Option<IpAddr> {
    let literal = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = literal.parse::<IpAddr>() {
        return (pod.is_own(ip) || super::in_pod_range(ip)).then_some(ip);
    }
    let lower = host.to_ascii_lowercase();
    pod.names()
        .candidates(&lower)
        .iter()
        .find_map(|name| pod.names().local(name, pod.ip().into()))
        .and_then(|ips| ips.first().copied())
}
