//! HTTP handler containers: a `wasi:http/proxy` component served on its container port, a fresh
//! instance per request. The requests come from the host through published ports, from
//! another pod through the pod network, and from the handler's own outgoing requests.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use wasmpod::Egress;
use wasmpod::k8s_openapi::api::core::v1::PodStatus;
use wasmpod_tests::{
    PodYaml, TestNode, container, free_port, is_running, read, remove, wait_for, wait_terminated,
};

const LIMIT: Duration = Duration::from_secs(30);

/// What a GET answered: the status, and the body, or what the connection gave before it was cut.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) body: String,
    /// The connection ended before the whole body came.
    pub(crate) cut: bool,
}

/// One GET over a fresh keep-alive connection (blocking), read until the response is complete
/// or the connection ends.
pub(crate) fn get_once(addr: SocketAddr, path: &str) -> std::io::Result<Reply> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(LIMIT))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n")?;
    let mut raw = Vec::new();
    let mut buf = [0; 4096];
    loop {
        if let Some(reply) = parse(&raw, false) {
            return Ok(reply);
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) if !raw.is_empty() => {
                return parse(&raw, true).ok_or_else(|| std::io::Error::other("no response head"));
            }
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) => return Err(e),
        }
    }
}

/// The response in `raw` if it is complete, or (`ended`: the connection ended) as far as it came.
fn parse(raw: &[u8], ended: bool) -> Option<Reply> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let lower = head.to_ascii_lowercase();
    let length = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    let (body, complete) = if lower.contains("transfer-encoding: chunked") {
        dechunk(body)
    } else if let Some(length) = length {
        (body.to_owned(), body.len() >= length)
    } else {
        (body.to_owned(), ended)
    };
    (complete || ended).then_some(Reply {
        status,
        body,
        cut: !complete,
    })
}

/// A chunked body's data, and whether its last chunk came.
fn dechunk(mut rest: &str) -> (String, bool) {
    let mut body = String::new();
    loop {
        let Some((size, after)) = rest.split_once("\r\n") else {
            return (body, false);
        };
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            return (body, false);
        };
        if size == 0 {
            return (body, true);
        }
        if after.len() < size {
            body.push_str(after);
            return (body, false);
        }
        body.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
}

/// GETs `path` until the server answers (it may still be starting).
pub(crate) async fn get(addr: SocketAddr, path: &str) -> Reply {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        loop {
            match get_once(addr, &path) {
                Ok(reply) => return reply,
                Err(e) if start.elapsed() < LIMIT => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("no answer from {addr}{path}: {e}"),
            }
        }
    })
    .await
    .unwrap()
}

/// Waits until the handler's log has `line` (a request started).
async fn started(pod: &wasmpod::PodHandle, line: &str) {
    let file = pod.log_file("web", 0);
    let start = Instant::now();
    while !std::fs::read_to_string(&file)
        .unwrap_or_default()
        .contains(line)
    {
        assert!(start.elapsed() < LIMIT, "{line:?} never logged");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn ready(status: &PodStatus) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn handler_pod(name: &str, host_port: u16, annotations: &str, more: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  annotations: {{ {annotations} }}
spec:
  terminationGracePeriodSeconds: 10
  volumes: [ {{ name: data, emptyDir: {{}} }} ]
  initContainers:
  - {{ name: seed, image: "{{p2}}", args: [write, /data/motd, "from the volume"],
      volumeMounts: [ {{ name: data, mountPath: /data }} ] }}
  containers:
  - name: web
    image: "{{http}}"
    env: [ {{ name: GREETING, value: bonjour }} ]
    volumeMounts: [ {{ name: data, mountPath: /data }} ]
    ports: [ {{ containerPort: 8080, hostPort: {host_port} }} ]
    readinessProbe: {{ httpGet: {{ path: /, port: 8080 }}, periodSeconds: 1 }}
{more}
"#
    )
}

/// A node serving `handler_pod(name, .., more)` on a free published port, once Ready.
async fn serving(name: &str, more: &str) -> (TestNode, wasmpod::PodHandle, SocketAddr) {
    let node = TestNode::new();
    let port = free_port();
    let pod = node.start(&handler_pod(name, port, "", more)).await;
    wait_for(&pod, LIMIT, ready).await;
    (node, pod, ([127, 0, 0, 1], port).into())
}

/// A handler pod turns Ready through an `httpGet` probe on its port, answers each request from
/// a fresh instance (the count the guest keeps is 1 every time) with the container's env and
/// volumes, runs requests concurrently, and bounds how many run at once when asked.
#[tokio::test]
async fn a_handler_serves_concurrent_requests_each_in_a_fresh_instance() {
    let node = TestNode::new();
    let port = free_port();
    let pod = node.start(&handler_pod("web", port, "", "")).await;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let status = wait_for(&pod, LIMIT, ready).await;
    assert!(is_running(&status, "web"), "{status:#?}");

    for _ in 0..20 {
        let reply = get(addr, "/").await;
        assert_eq!((reply.status, reply.body.as_str()), (200, "hello 1\n"));
    }
    assert_eq!(get(addr, "/env/GREETING").await.body, "bonjour\n");
    assert_eq!(get(addr, "/read/data/motd").await.body, "from the volume\n");
    assert_eq!(get(addr, "/nowhere").await.status, 404);

    // Eight requests of 400 ms at once end well before 8 × 400 ms.
    let start = Instant::now();
    let all: Vec<_> = (0..8)
        .map(|_| tokio::spawn(get(addr, "/sleep/400")))
        .collect();
    for reply in all {
        assert_eq!(reply.await.unwrap().body, "slept\n");
    }
    let took = start.elapsed();
    assert!(
        took < Duration::from_millis(1600),
        "8 requests took {took:?}"
    );
    let log = read(&pod.log_file("web", 0));
    assert!(log.contains("handled /env/GREETING"), "{log}");
    remove(&pod).await;

    // With two slots, four requests of 300 ms take at least two rounds.
    let port = free_port();
    let limited = node
        .start(&handler_pod(
            "limited",
            port,
            r#"wasmpod.dev/http-max-concurrency: "2""#,
            "",
        ))
        .await;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_for(&limited, LIMIT, ready).await;
    let start = Instant::now();
    let all: Vec<_> = (0..4)
        .map(|_| tokio::spawn(get(addr, "/sleep/300")))
        .collect();
    for reply in all {
        assert_eq!(reply.await.unwrap().status, 200);
    }
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(600),
        "4 requests on 2 slots took {took:?}"
    );
    remove(&limited).await;
}

/// A request that traps, runs out of memory or sets no response is answered 500 and logged with
/// a count; the next request succeeds and the container never restarts.
#[tokio::test]
async fn a_failing_request_is_a_500_and_the_next_one_succeeds() {
    let (_node, pod, addr) =
        serving("failing", "    resources: { limits: { memory: 32Mi } }").await;

    assert_eq!(get(addr, "/trap").await.status, 500);
    assert_eq!(get(addr, "/").await.body, "hello 1\n");
    assert_eq!(get(addr, "/alloc/64").await.status, 500);
    assert_eq!(get(addr, "/alloc/8").await.body, "allocated 8\n");
    assert_eq!(get(addr, "/no-response").await.status, 500);
    assert_eq!(get(addr, "/").await.status, 200);

    let log = read(&pod.log_file("web", 0));
    for line in [
        "wasmpod: request GET /trap trapped: ",
        "wasmpod: request GET /alloc/64 trapped: memory limit reached",
        "wasmpod: request GET /no-response returned without setting a response",
        "3 of ",
    ] {
        assert!(log.contains(line), "{line:?} not in\n{log}");
    }
    let status = pod.status();
    let web = container(&status, "web");
    assert_eq!(web.restart_count, 0);
    assert!(is_running(&status, "web"), "{status:#?}");
    remove(&pod).await;
}

/// Requests in flight draw from the container's one memory budget: four requests holding
/// 12 MiB at once do not all fit in 32Mi (as they would with a budget each), and the container
/// keeps serving.
#[tokio::test]
async fn requests_in_flight_share_the_containers_memory_limit() {
    let (_node, pod, addr) = serving("shared", "    resources: { limits: { memory: 32Mi } }").await;
    let all: Vec<_> = (0..4)
        .map(|_| tokio::spawn(get(addr, "/hold/12/1500")))
        .collect();
    let mut codes = Vec::new();
    for reply in all {
        codes.push(reply.await.unwrap().status);
    }
    codes.sort_unstable();
    assert!(codes.contains(&200), "{codes:?}");
    assert!(
        codes.contains(&500),
        "four requests of 12 MiB ran within 32Mi: {codes:?}"
    );
    assert_eq!(get(addr, "/hold/12/0").await.status, 200);
    remove(&pod).await;
}

/// A client that sends its request head slowly (slowloris) loses its connection after the
/// header timeout; others are served meanwhile.
#[tokio::test]
async fn a_slow_request_head_loses_its_connection() {
    let (_node, pod, addr) = serving("slow", "").await;
    let closed = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: test\r\n").unwrap();
        s.set_read_timeout(Some(LIMIT)).unwrap();
        let start = Instant::now();
        let mut buf = [0u8; 64];
        // One more header line a second: never a whole head.
        loop {
            let _ = s.write_all(b"X-Slow: 1\r\n");
            s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            match s.read(&mut buf) {
                Ok(0) => return start.elapsed(),
                Ok(_) => return start.elapsed(),
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => return start.elapsed(),
            }
            assert!(
                start.elapsed() < LIMIT,
                "a trickled head kept its connection"
            );
        }
    });
    assert_eq!(get(addr, "/").await.status, 200);
    let took = closed.await.unwrap();
    assert!(took < Duration::from_secs(20), "closed after {took:?}");
    remove(&pod).await;
}

/// Connections to a published port that send nothing, or stop in the middle of their request
/// head, do not keep new clients out: past the 1,024 connections a port carries, the one that
/// has waited longest for its client is closed to make room, and a new client is answered at
/// once rather than after the header timeout.
#[tokio::test]
async fn silent_and_stalled_connections_do_not_starve_a_published_port() {
    let (_node, pod, addr) = serving("crowd", "").await;
    let held = tokio::task::spawn_blocking(move || {
        (0..1200)
            .map(|i| {
                let mut s = TcpStream::connect(addr).unwrap();
                if i % 12 == 0 {
                    s.write_all(b"GET / HTTP/1.1\r\nHost: test\r\n").unwrap();
                }
                s
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let start = Instant::now();
    assert_eq!(get(addr, "/").await.status, 200);
    let took = start.elapsed();
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    // The oldest silent connection is the one that made room: closed, long before the header
    // timeout would have closed it.
    let mut oldest = held[1].try_clone().unwrap();
    let eof = tokio::task::spawn_blocking(move || {
        oldest
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        oldest.read(&mut [0u8; 16])
    })
    .await
    .unwrap();
    assert!(
        matches!(eof, Ok(0)),
        "the oldest silent connection: {eof:?}"
    );
    drop(held);
    remove(&pod).await;
}

/// A request past `wasmpod.dev/http-request-timeout` is cut: a spinning one is answered 504, one
/// whose body is still streaming loses its connection; the next request is served.
#[tokio::test]
async fn a_request_past_its_timeout_is_cut() {
    let node = TestNode::new();
    let port = free_port();
    let yaml = handler_pod(
        "timeouts",
        port,
        "wasmpod.dev/http-request-timeout: 300ms",
        "",
    );
    let pod = node.start(&yaml).await;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_for(&pod, LIMIT, ready).await;

    let start = Instant::now();
    let reply = get(addr, "/spin").await;
    assert_eq!(reply.status, 504, "{reply:?}");
    assert!(start.elapsed() < Duration::from_secs(5));

    let reply = get(addr, "/headers-then-sleep/5000").await;
    assert_eq!(reply.status, 200);
    assert!(reply.cut, "{reply:?}");
    assert!(reply.body.starts_with("first"), "{reply:?}");
    assert!(!reply.body.contains("second"), "{reply:?}");

    assert_eq!(get(addr, "/sleep/10").await.body, "slept\n");
    let log = read(&pod.log_file("web", 0));
    assert!(log.contains("GET /spin timed out after 300ms"), "{log}");
    assert!(
        log.contains("GET /headers-then-sleep/5000 timed out"),
        "{log}"
    );
    remove(&pod).await;
}

/// Deleting a handler pod closes its port and lets the request in flight finish within the
/// grace period (the container exits 0); one running past the grace period is cut by KILL.
#[tokio::test]
async fn deletion_drains_in_flight_requests_within_the_grace_period() {
    let node = TestNode::new();
    let port = free_port();
    let pod = node.start(&handler_pod("draining", port, "", "")).await;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_for(&pod, LIMIT, ready).await;

    let in_flight = tokio::spawn(get(addr, "/sleep/700"));
    started(&pod, "handling /sleep/700").await;
    let deleted_at = Instant::now();
    pod.delete(Some(Duration::from_secs(10)));
    // New connections are refused once the pod stops listening, while the first one finishes.
    let refused = tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        while start.elapsed() < LIMIT {
            if TcpStream::connect(addr).is_err() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    });
    let reply = in_flight.await.unwrap();
    assert_eq!((reply.status, reply.body.as_str()), (200, "slept\n"));
    assert!(refused.await.unwrap(), "the port kept accepting");
    let exit = wait_terminated(&pod, "web", LIMIT).await;
    assert_eq!(exit.exit_code, 0, "{exit:?}");
    assert!(deleted_at.elapsed() < Duration::from_secs(10));
    pod.deleted().await;

    // A request longer than the grace period is cut by KILL at the deadline.
    let port = free_port();
    let yaml = handler_pod("killed", port, "", "").replace(
        "terminationGracePeriodSeconds: 10",
        "terminationGracePeriodSeconds: 1",
    );
    let pod = node.start(&yaml).await;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_for(&pod, LIMIT, ready).await;
    let in_flight = tokio::spawn(get(addr, "/headers-then-sleep/20000"));
    started(&pod, "handling /headers-then-sleep/20000").await;
    let deleted_at = Instant::now();
    pod.delete(None);
    let reply = in_flight.await.unwrap();
    assert!(reply.cut && !reply.body.contains("second"), "{reply:?}");
    let cut_after = deleted_at.elapsed();
    assert!(
        cut_after >= Duration::from_millis(900) && cut_after < Duration::from_secs(10),
        "cut after {cut_after:?}"
    );
    let exit = wait_terminated(&pod, "web", LIMIT).await;
    assert_eq!(exit.exit_code, 137, "{exit:?}");
    pod.deleted().await;
}

/// Another pod reaches the handler by its pod IP through the pod network; a handler's own
/// outgoing request reaches another pod the same way; with egress denied, a request to an
/// address outside the node is refused.
#[tokio::test]
async fn handlers_talk_to_other_pods_over_the_pod_network() {
    let node = TestNode::with(|o| o.egress(Egress::Deny));
    let port = free_port();
    let server = node.start(&handler_pod("server", port, "", "")).await;
    wait_for(&server, LIMIT, ready).await;
    let ip = server.status().pod_ip.unwrap();

    let request = r#""GET /env/GREETING HTTP/1.1\r\nHost: server\r\nConnection: close\r\n\r\n""#;
    let client = PodYaml::new("client")
        .never()
        .container(&format!(
            r#"{{ name: main, image: "{{p2}}", args: [connect, "{ip}:8080", {request}] }}"#
        ))
        .build();
    let client = node.start(&client).await;
    let status = wait_for(&client, LIMIT, |s| s.phase.as_deref() == Some("Succeeded")).await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let log = read(&client.log_file("main", 0));
    assert!(log.contains("HTTP/1.1 200 OK"), "{log}");
    assert!(log.contains("bonjour"), "{log}");

    // The second handler fetches from the first through the pod network.
    let port2 = free_port();
    let fetcher = node.start(&handler_pod("fetcher", port2, "", "")).await;
    wait_for(&fetcher, LIMIT, ready).await;
    let addr2: SocketAddr = ([127, 0, 0, 1], port2).into();
    let reply = get(addr2, &format!("/fetch/{ip}:8080/env/GREETING")).await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (200, "upstream 200: bonjour\n")
    );
    // Its own port through loopback.
    let reply = get(addr2, "/fetch/localhost:8080/").await;
    assert_eq!(reply.body, "upstream 200: hello 1\n");
    // Outside the node (a host listener on this machine's address): denied.
    let outside = TcpListener::bind("0.0.0.0:0").unwrap();
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    probe.connect("192.0.2.1:9").unwrap();
    let host_ip = probe.local_addr().unwrap().ip();
    let outside_port = outside.local_addr().unwrap().port();
    let reply = get(addr2, &format!("/fetch/{host_ip}:{outside_port}/")).await;
    assert_eq!(reply.status, 502, "{reply:?}");
    assert!(reply.body.contains("HttpRequestDenied"), "{reply:?}");

    for pod in [server, client, fetcher] {
        remove(&pod).await;
    }
}

/// A WASI 0.3 handler (`wasi:http/handler@0.3`, its body written by a task that outlives
/// `handle`) is served as a 0.2 one is: a fresh instance per request, the container's env, the
/// request's scheme and authority, a trap
/// or a timeout answered without stopping the container, and deletion draining the request in
/// flight.
#[tokio::test]
async fn a_wasi_0_3_handler_is_served_as_a_0_2_one() {
    let node = TestNode::new();
    let port = free_port();
    let yaml = handler_pod("p3", port, "wasmpod.dev/http-request-timeout: 400ms", "")
        .replace("{http}", "{p3-http}");
    let pod = node.start(&yaml).await;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_for(&pod, LIMIT, ready).await;
    for _ in 0..5 {
        let reply = get(addr, "/").await;
        assert_eq!((reply.status, reply.body.as_str()), (200, "hello 0.3 1\n"));
    }
    assert_eq!(get(addr, "/env/GREETING").await.body, "bonjour\n");
    // The request's scheme and authority (its Host header), as a 0.2 handler has them.
    assert_eq!(get(addr, "/whoami").await.body, "http://test/whoami\n");
    assert_eq!(get(addr, "/trap").await.status, 500);
    assert_eq!(get(addr, "/sleep/2000").await.status, 504);
    assert_eq!(get(addr, "/").await.status, 200);
    let log = read(&pod.log_file("web", 0));
    assert!(log.contains("wasmpod: request GET /trap trapped"), "{log}");
    assert!(
        log.contains("GET /sleep/2000 timed out after 400ms"),
        "{log}"
    );

    let in_flight = tokio::spawn(get(addr, "/sleep/300"));
    started(&pod, "handling /sleep/300").await;
    pod.delete(Some(Duration::from_secs(10)));
    let reply = in_flight.await.unwrap();
    assert_eq!((reply.status, reply.body.as_str()), (200, "slept\n"));
    let exit = wait_terminated(&pod, "web", LIMIT).await;
    assert_eq!(exit.exit_code, 0, "{exit:?}");
    pod.deleted().await;
}

/// A handler whose instance cannot be made (here: its memory does not fit the limit) is not
/// served: the container exits as a command would (137, OOMKilled) and the restart policy
/// restarts it with backoff.
#[tokio::test]
async fn a_handler_that_cannot_be_instantiated_follows_the_restart_policy() {
    let node = TestNode::new();
    let yaml = handler_pod(
        "tiny",
        free_port(),
        "",
        "    resources: { limits: { memory: 64Ki } }",
    );
    let pod = node.start(&yaml).await;
    let status = wait_for(&pod, LIMIT, |s| container(s, "web").restart_count >= 2).await;
    let web = container(&status, "web");
    let last = web
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .unwrap();
    assert_eq!(
        (last.exit_code, last.reason.as_deref()),
        (137, Some("OOMKilled")),
        "{web:?}"
    );
    remove(&pod).await;
}

/// Outgoing requests reach addresses as the pod's sockets would: the host's address through
/// egress, but a name the host resolves to loopback (`127.1`) lands on the pod's own loopback —
/// never on the host's.
#[tokio::test]
async fn outgoing_requests_never_reach_the_hosts_loopback() {
    let node = TestNode::new();
    // A server on every address of this machine, counting its connections.
    let server = TcpListener::bind("0.0.0.0:0").unwrap();
    let server_port = server.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for stream in server.incoming() {
            let Ok(mut stream) = stream else { continue };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut head = [0; 1024];
            let _ = stream.read(&mut head);
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhost\n",
            );
        }
    });
    let port = free_port();
    let pod = node.start(&handler_pod("egress", port, "", "")).await;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_for(&pod, LIMIT, ready).await;

    let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    probe.connect("192.0.2.1:9").unwrap();
    let host_ip = probe.local_addr().unwrap().ip();
    let reply = get(addr, &format!("/fetch/{host_ip}:{server_port}/")).await;
    assert_eq!(reply.body, "upstream 200: host\n", "{reply:?}");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);

    let reply = get(addr, &format!("/fetch/127.1:{server_port}/")).await;
    assert_eq!(reply.status, 502, "{reply:?}");
    assert!(reply.body.contains("ConnectionRefused"), "{reply:?}");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    remove(&pod).await;
}
