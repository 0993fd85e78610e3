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

fn describe(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        _ => e.to_string(),
    }
}
