//! Outgoing `wasi:http` requests of a pod's guests (`wasi:http/outgoing-handler`), routed as
//! their sockets are: the authority is resolved as the pod's name lookup resolves it, and each
//! address is reached as a socket would reach it — the pod's own loopback and the node's pods
//! through the pod network, anything else through the host when the node's [`Egress`] policy
//! allows. (A name is never handed to the host to connect to: a host lookup that answers a
//! loopback address must land on the pod's loopback, not the host's.)

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite};
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

use super::error::ErrorCode;
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

/// A connection, through the pod network or the host, plain or TLS.
trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// Sends `request` from `pod`.
pub(crate) async fn send(
    pod: Arc<PodNetwork>,
    mut request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
) -> Result<Sent, Error> {
    let uri = request.uri();
    let authority = uri.authority().ok_or(Error::HttpRequestUriInvalid)?;
    let tls = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
    let host = authority.host().to_owned();
    let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let connect_timeout = options
        .and_then(|o| o.connect_timeout)
        .unwrap_or(DEFAULT_TIMEOUT);
    let first_byte = options
        .and_then(|o| o.first_byte_timeout)
        .unwrap_or(DEFAULT_TIMEOUT);
    let stream = tokio::time::timeout(connect_timeout, async {
        let stream = connect(&pod, &host, port).await?;
        if tls {
            tls_connect(&host, stream).await
        } else {
            Ok(stream)
        }
    })
    .await
    .map_err(|_| Error::ConnectionTimeout)??;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(Error::from)?;
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
    // The connection is driven beside the request; a server that closes the connection right
    // after its response ends it before the response is picked up, which is not an error.
    let mut conn = Some(Box::pin(conn));
    let send = tokio::time::timeout(first_byte, sender.send_request(request));
    let mut send = std::pin::pin!(send);
    let response = loop {
        let driving = async {
            match conn.as_mut() {
                Some(c) => c.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            response = &mut send => {
                break response.map_err(|_| Error::ConnectionReadTimeout)?.map_err(Error::from)?;
            }
            ended = driving => {
                conn = None;
                ended.map_err(Error::from)?;
            }
        }
    };
    let response = response.map(|body| body.map_err(Error::from).boxed_unsync());
    Ok((
        response,
        Box::new(async move {
            match conn {
                Some(conn) => conn.await.map_err(Error::from),
                None => Ok(()),
            }
        }),
    ))
}

/// Connects from `pod` to `host:port`: each address the pod's lookup gives, in order, through
/// the pod network or (egress) the host.
async fn connect(pod: &Arc<PodNetwork>, host: &str, port: u16) -> Result<Box<dyn Io>, Error> {
    let ips = super::names::lookup(pod, host)
        .await
        .map_err(|code| match code {
            ErrorCode::NameUnresolvable if pod.egress() == Egress::Deny => Error::HttpRequestDenied,
            ErrorCode::InvalidArgument => Error::HttpRequestUriInvalid,
            _ => Error::DnsError {
                rcode: Some(format!("{code:?}")),
                info_code: None,
            },
        })?;
    let mut last = Error::DestinationNotFound;
    for ip in ips {
        let to = SocketAddr::new(ip, port);
        match pod.connect_within(to).await {
            Some(Ok(stream)) => return Ok(Box::new(stream)),
            Some(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                last = Error::ConnectionRefused;
            }
            Some(Err(_)) => last = Error::DestinationUnavailable,
            None if pod.egress() == Egress::Deny => return Err(Error::HttpRequestDenied),
            None => match tokio::net::TcpStream::connect(to).await {
                Ok(stream) => return Ok(Box::new(stream)),
                Err(e) => last = Error::Connect(e),
            },
        }
    }
    Err(last)
}

/// TLS over `stream` for `host`, verified against Mozilla's roots (webpki-roots).
async fn tls_connect(host: &str, stream: Box<dyn Io>) -> Result<Box<dyn Io>, Error> {
    static CONFIG: OnceLock<Option<Arc<rustls::ClientConfig>>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.into(),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?;
        Some(Arc::new(
            config.with_root_certificates(roots).with_no_client_auth(),
        ))
    });
    let config = config
        .clone()
        .ok_or(Error::InternalError(Some("no TLS configuration".into())))?;
    let name = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let name =
        rustls::pki_types::ServerName::try_from(name).map_err(|_| Error::HttpRequestUriInvalid)?;
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await
        .map_err(Error::Tls)?;
    Ok(Box::new(stream))
}
