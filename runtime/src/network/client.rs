//! The kubelet's side of network probes and `httpGet` hooks: connections from the host into a
//! pod's network, to the pod IP.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::PodNetwork;
use crate::spec::HttpGet;

/// The most response bytes read looking for the status line and headers.
const MAX_HEAD: usize = 16 * 1024;

/// Succeeds when something in the pod accepts a TCP connection on `port`.
pub(crate) async fn tcp_check(pod: &PodNetwork, port: u16) -> Result<(), String> {
    pod.connect_from_host(port)
        .await
        .map(drop)
        .map_err(|e| format!("dial tcp {}:{port}: connect: {}", pod.ip(), describe(&e)))
}

/// Sends the GET and succeeds on a status from 200 to 399, as the kubelet does.
pub(crate) async fn http_get(pod: &PodNetwork, get: &HttpGet) -> Result<(), String> {
    let url = format!("http://{}:{}{}", pod.ip(), get.port, get.path);
    let mut stream = pod
        .connect_from_host(get.port)
        .await
        .map_err(|e| format!("Get {url:?}: dial tcp: connect: {}", describe(&e)))?;
    let mut request = format!(
        "GET {} HTTP/1.1\r\nHost: {}:{}\r\n",
        get.path,
        pod.ip(),
        get.port
    );
    let has = |name: &str| {
        get.headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    };
    if !has("user-agent") {
        request.push_str("User-Agent: kube-probe/1.33\r\n");
    }
    if !has("accept") {
        request.push_str("Accept: */*\r\n");
    }
    for (name, value) in &get.headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("Connection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("Get {url:?}: {e}"))?;
    let mut head = Vec::new();
    let mut buf = [0; 4096];
    while !head.windows(2).any(|w| w == b"\r\n") && head.len() < MAX_HEAD {
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|e| format!("Get {url:?}: {e}"))?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let code = match (parts.next(), parts.next()) {
        (Some(v), Some(code)) if v.starts_with("HTTP/") => code.parse::<u16>().ok(),
        _ => None,
    };
    match code {
        Some(code) if (200..400).contains(&code) => Ok(()),
        Some(code) => Err(format!("HTTP probe failed with statuscode: {code}")),
        None if head.is_empty() => Err(format!("Get {url:?}: EOF")),
        None => Err(format!("Get {url:?}: malformed HTTP response {line:?}")),
    }
}

/// The gRPC health-checking protocol (`grpc.health.v1.Health/Check`) over HTTP/2 without TLS,
/// as the kubelet's gRPC probe: success when the server answers `SERVING`.
pub(crate) async fn grpc_check(pod: &PodNetwork, port: u16, service: &str) -> Result<(), String> {
    let target = format!("{}:{port}", pod.ip());
    let stream = pod
        .connect_from_host(port)
        .await
        .map_err(|e| format!("failed to connect service {target:?}: {}", describe(&e)))?;
    let rpc_error = |e: h2::Error| format!("health rpc to {target:?} failed: {e}");
    let (client, connection) = h2::client::handshake(stream).await.map_err(rpc_error)?;
    let connection = tokio::spawn(connection);
    let result = async {
        let mut client = client.ready().await.map_err(rpc_error)?;
        let request = http::Request::post(format!("http://{target}/grpc.health.v1.Health/Check"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("user-agent", "kube-probe/1.33")
            .body(())
            .map_err(|e| e.to_string())?;
        let (response, mut send) = client.send_request(request, false).map_err(rpc_error)?;
        // HealthCheckRequest { service = 1 }, in a gRPC message frame.
        let mut message = vec![0x0a];
        message.extend(varint(service.len() as u64));
        message.extend(service.as_bytes());
        let mut frame = vec![0];
        frame.extend((message.len() as u32).to_be_bytes());
        frame.extend(message);
        send.send_data(frame.into(), true).map_err(rpc_error)?;
        let mut body = response.await.map_err(rpc_error)?.into_body();
        let mut data = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(rpc_error)?;
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await.map_err(rpc_error)?;
        let code = trailers
            .as_ref()
            .and_then(|t| t.get("grpc-status"))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("0");
        if code != "0" {
            return Err(format!(
                "health rpc to {target:?} failed: grpc-status {code}"
            ));
        }
        // HealthCheckResponse { status = 1 }: SERVING is 1.
        let status = match data.get(5..) {
            Some([0x08, status, ..]) => *status,
            _ => 0,
        };
        match status {
            1 => Ok(()),
            other => {
                let name = ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"]
                    .get(other as usize)
                    .unwrap_or(&"UNKNOWN");
                Err(format!("service unhealthy (responded with {name:?})"))
            }
        }
    }
    .await;
    connection.abort();
    result
}

fn varint(mut n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

fn describe(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        _ => e.to_string(),
    }
}
