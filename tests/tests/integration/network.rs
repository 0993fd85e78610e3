//! The pod network: localhost between a pod's containers, ports private to each pod, pod IPs,
//! published ports, egress, and the network probes. Guests are real components using Rust's
//! `std::net`, which goes through `wasi:sockets`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use wasmpod::{Egress, PodHandle, PodOptions, Reason};
use wasmpod_tests::{
    PodYaml, TestNode, Timeline, free_port, log_lines, read, remove, running, wait_for,
};

const LIMIT: Duration = Duration::from_secs(30);

/// Waits until the container's log (restart 0) has a line containing `text`; returns the log.
async fn log_line(pod: &PodHandle, container: &str, text: &str) -> String {
    let file = pod.log_file(container, 0);
    let start = Instant::now();
    loop {
        let log = std::fs::read_to_string(&file).unwrap_or_default();
        if log.contains(text) {
            return log;
        }
        assert!(
            start.elapsed() < LIMIT,
            "{container} never logged {text:?}; log so far:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The message of the first `Unhealthy` event of `container` that contains `needle`.
async fn unhealthy(pod: &PodHandle, container: &str, needle: &str) -> String {
    let mut events = pod.events();
    let find = async {
        while let Some(e) = events.next().await {
            if e.container.as_deref() == Some(container)
                && e.reason == Reason::Unhealthy
                && e.message.contains(needle)
            {
                return e.message;
            }
        }
        panic!("the pod ended without an Unhealthy {needle:?} for {container}");
    };
    tokio::time::timeout(LIMIT, find)
        .await
        .unwrap_or_else(|_| panic!("no Unhealthy {needle:?} for {container} within {LIMIT:?}"))
}

async fn succeeded(pod: &PodHandle) {
    let status = tokio::time::timeout(LIMIT, pod.wait())
        .await
        .expect("pod ends");
    assert_eq!(
        status.phase.as_deref(),
        Some("Succeeded"),
        "{:#?}",
        status.container_statuses
    );
}

/// A server sidecar and a client in one pod talk over localhost, the pod IP and the pod's
/// hostname; the pod IP is in the status.
#[tokio::test]
async fn containers_of_a_pod_meet_on_localhost() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: web }
spec:
  restartPolicy: Never
  initContainers:
  - { name: server, image: "{p2}", restartPolicy: Always, args: [echo-server, "0.0.0.0:8080"] }
  containers:
  - name: client
    image: "{p2}"
    args: [connect, "localhost:8080", one, connect, "web:8080", two, resolve, localhost]
"#,
        )
        .await;
    succeeded(&pod).await;
    let ip = pod.status().pod_ip.expect("status.podIP");
    assert!(ip.starts_with("10.88."), "{ip}");
    let log = read(&pod.log_file("client", 0));
    assert!(log.contains("reply one from 127.0.0.1:8080"), "{log}");
    assert!(log.contains(&format!("reply two from {ip}:8080")), "{log}");
    assert!(log.contains("resolved localhost 127.0.0.1,::1"), "{log}");
}

/// The pod's name lookup answers its `hostAliases`, trying short names with its
/// `dnsConfig.searches` first (ndots), and a name ending in '.' as it is.
#[tokio::test]
async fn host_aliases_and_search_domains_answer_lookups() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: named }
spec:
  restartPolicy: Never
  hostAliases:
  - { ip: 10.1.2.3, hostnames: [db.internal, cache] }
  - { ip: "fd00::7", hostnames: [db.internal] }
  dnsConfig: { searches: [internal], options: [{ name: ndots, value: "1" }] }
  containers:
  - name: client
    image: "{p2}"
    args: [resolve, db, resolve, cache, resolve, DB.internal., resolve, named]
"#,
        )
        .await;
    succeeded(&pod).await;
    let ip = pod.status().pod_ip.expect("status.podIP");
    let log = read(&pod.log_file("client", 0));
    for line in [
        "resolved db 10.1.2.3,fd00::7".to_owned(),
        "resolved cache 10.1.2.3".to_owned(),
        "resolved DB.internal. 10.1.2.3,fd00::7".to_owned(),
        format!("resolved named {ip}"),
    ] {
        assert!(log.contains(&line), "{line} not in\n{log}");
    }
    let err = node.invalid(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: bad }
spec:
  hostAliases: [{ ip: not-an-ip, hostnames: [x] }]
  dnsConfig: { nameservers: [1.1.1.1, dns.example], options: [{ name: edns0 }] }
  containers: [{ name: c, image: "{p2}" }]
"#,
    );
    for field in [
        "spec.hostAliases[0].ip: Invalid value",
        "spec.dnsConfig.nameservers[1]: Invalid value: \"dns.example\": must be a valid IP address",
    ] {
        assert!(err.contains(field), "{field} not in\n{err}");
    }
    let err = node.invalid(
        "apiVersion: v1\nkind: Pod\nmetadata: { name: bad }\nspec:\n  dnsPolicy: None\n  containers: [{ name: c, image: \"{p2}\" }]\n",
    );
    assert!(
        err.contains("spec.dnsConfig.nameservers: Required value: must provide at least one DNS nameserver when `dnsPolicy` is None"),
        "{err}"
    );
}

/// A question the tests' name server was asked: the name, the type (1 A, 28 AAAA), whether
/// it came over TCP, whether it carried EDNS0 (an additional record).
#[derive(Debug, Clone, PartialEq)]
struct Question {
    name: String,
    qtype: u16,
    tcp: bool,
    edns0: bool,
}

/// The tests' name server's answer to `query`: A records for `names`, NXDOMAIN for any other
/// name; and the question.
fn answer(query: &[u8], names: &[(&str, [u8; 4])], tcp: bool) -> Option<(Vec<u8>, Question)> {
    // The question: labels from byte 12 to a zero length, then type and class.
    let mut at = 12;
    let mut labels = Vec::new();
    while *query.get(at)? != 0 {
        let len = query[at] as usize;
        labels.push(String::from_utf8_lossy(query.get(at + 1..at + 1 + len)?).to_lowercase());
        at += 1 + len;
    }
    let end = at + 5;
    let qtype = u16::from_be_bytes([*query.get(at + 1)?, *query.get(at + 2)?]);
    let name = labels.join(".");
    let found = names.iter().find(|(n, _)| *n == name).map(|(_, ip)| ip);
    let mut reply = query[..2].to_vec();
    let rcode = if found.is_some() { 0 } else { 3 };
    reply.extend_from_slice(&[0x81, 0x80 | rcode]);
    let count = u16::from(found.is_some() && qtype == 1);
    reply.extend_from_slice(&[0, 1, 0, count as u8, 0, 0, 0, 0]);
    reply.extend_from_slice(query.get(12..end)?);
    if let (Some(ip), 1) = (found, count) {
        reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
        reply.extend_from_slice(ip);
    }
    let edns0 = u16::from_be_bytes([query[10], query[11]]) > 0;
    Some((
        reply,
        Question {
            name,
            qtype,
            tcp,
            edns0,
        },
    ))
}

/// A name server of the tests' own over UDP: answers A queries for `names`, nothing else
/// (NXDOMAIN).
async fn name_server(socket: tokio::net::UdpSocket, names: &'static [(&'static str, [u8; 4])]) {
    let mut buf = [0u8; 512];
    loop {
        let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
            return;
        };
        if let Some((reply, _)) = answer(&buf[..n], names, false) {
            let _ = socket.send_to(&reply, peer).await;
        }
    }
}

/// The tests' name server on UDP and TCP port 53 of `ip` (a loopback address of its own),
/// noting each question; `None` when port 53 needs a privilege the tests do not have.
async fn noting_name_server(
    ip: &str,
    names: &'static [(&'static str, [u8; 4])],
) -> Option<std::sync::Arc<std::sync::Mutex<Vec<Question>>>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let udp = match tokio::net::UdpSocket::bind((ip, 53)).await {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            eprintln!("skipped: port 53 needs root ({e})");
            return None;
        }
        Err(e) => panic!("cannot serve DNS on {ip}:53: {e}"),
    };
    let tcp = tokio::net::TcpListener::bind((ip, 53)).await.unwrap();
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let noted = asked.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while let Ok((n, peer)) = udp.recv_from(&mut buf).await {
            if let Some((reply, question)) = answer(&buf[..n], names, false) {
                noted.lock().unwrap().push(question);
                let _ = udp.send_to(&reply, peer).await;
            }
        }
    });
    let noted = asked.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = tcp.accept().await {
            let noted = noted.clone();
            tokio::spawn(async move {
                // Each message after its two-byte length.
                let mut len = [0u8; 2];
                while stream.read_exact(&mut len).await.is_ok() {
                    let mut query = vec![0u8; u16::from_be_bytes(len) as usize];
                    if stream.read_exact(&mut query).await.is_err() {
                        return;
                    }
                    let Some((reply, question)) = answer(&query, names, true) else {
                        return;
                    };
                    noted.lock().unwrap().push(question);
                    let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
                    framed.extend_from_slice(&reply);
                    if stream.write_all(&framed).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Some(asked)
}

/// `dnsConfig.options` shape a pod's lookups as they shape glibc's resolver: `no-aaaa` asks no
/// AAAA, `no-tld-query` never asks a dotless name as it is, `edns0` adds EDNS0, `use-vc` asks
/// over TCP, and `timeout`/`attempts` bound how long a silent server is waited for.
#[tokio::test]
async fn dns_options_shape_a_pods_lookups() {
    const NAMES: &[(&str, [u8; 4])] = &[("api.corp.example", [10, 9, 8, 7])];
    let Some(udp_asked) = noting_name_server("127.0.0.78", NAMES).await else {
        return;
    };
    let Some(tcp_asked) = noting_name_server("127.0.0.79", NAMES).await else {
        return;
    };
    // A server that never answers: bound, silent.
    let _silent = tokio::net::UdpSocket::bind("127.0.0.80:53").await.unwrap();
    let node = TestNode::new();
    let pod = |name: &str, server: &str, options: &str, args: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{ name: {name} }}\nspec:\n  restartPolicy: Never\n  \
             dnsPolicy: None\n  dnsConfig: {{ nameservers: [{server}], searches: [corp.example], \
             options: [{options}] }}\n  containers:\n  - {{ name: client, image: \"{{p2}}\", args: [{args}] }}\n"
        )
    };
    let tuned = pod(
        "tuned",
        "127.0.0.78",
        "{ name: no-aaaa }, { name: no-tld-query }, { name: edns0 }, { name: single-request }, \
         { name: ndots, value: \"1\" }",
        "resolve, api, resolve, nowhere",
    );
    let (_, status) = node.run(&tuned, LIMIT).await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let asked = udp_asked.lock().unwrap().clone();
    assert!(!asked.is_empty());
    for question in &asked {
        assert_eq!(question.qtype, 1, "no-aaaa: {asked:?}");
        assert!(question.edns0, "edns0: {asked:?}");
        assert!(
            question.name.ends_with(".corp.example"),
            "no-tld-query: {asked:?}"
        );
    }

    let vc = pod("vc", "127.0.0.79", "{ name: use-vc }", "resolve, api");
    let (_, status) = node.run(&vc, LIMIT).await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let asked = tcp_asked.lock().unwrap().clone();
    assert!(
        !asked.is_empty() && asked.iter().all(|q| q.tcp),
        "use-vc: {asked:?}"
    );

    // One second, once: the lookup gives up after about a second (the default is 2 s twice).
    let quick = pod(
        "quick",
        "127.0.0.80",
        "{ name: timeout, value: \"1\" }, { name: attempts, value: \"1\" }",
        "resolve, api.corp.example.",
    );
    let started = Instant::now();
    let (_, status) = node.run(&quick, LIMIT).await;
    let took = started.elapsed();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "a silent server was waited for {took:?}"
    );
    let err = node.invalid(&pod(
        "bad",
        "127.0.0.80",
        "{ name: debug }, { name: rotate, value: \"2\" }, { name: timeout, value: x }",
        "resolve, x",
    ));
    for field in [
        "spec.dnsConfig.options[0].name: not supported by wasmpod: \"debug\" has no meaning",
        "spec.dnsConfig.options[1].value: must be empty: rotate takes no value",
        "spec.dnsConfig.options[2].value: must be a non-negative integer for timeout",
    ] {
        assert!(err.contains(field), "{field} not in\n{err}");
    }
}

/// `dnsPolicy: None` with `dnsConfig.nameservers`: the pod's names are asked of its own name
/// servers (with its search domains), not the node's resolver.
#[tokio::test]
async fn a_pods_own_name_servers_answer_its_lookups() {
    // A name server must be on port 53: an address of the loopback range of its own.
    let socket = match tokio::net::UdpSocket::bind("127.0.0.77:53").await {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            eprintln!("skipped: port 53 needs root ({e})");
            return;
        }
        Err(e) => panic!("cannot serve DNS on 127.0.0.77:53: {e}"),
    };
    tokio::spawn(name_server(
        socket,
        &[
            ("api.corp.example", [10, 9, 8, 7]),
            ("localhost.corp.example", [10, 0, 0, 1]),
        ],
    ));
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: own-dns }
spec:
  restartPolicy: Never
  dnsPolicy: None
  dnsConfig: { nameservers: [127.0.0.77], searches: [corp.example] }
  containers:
  - name: client
    image: "{p2}"
    args: [resolve, api, resolve, api.corp.example., resolve, example.com]
"#,
        )
        .await;
    succeeded(&pod).await;
    let log = read(&pod.log_file("client", 0));
    for line in [
        "resolved api 10.9.8.7",
        "resolved api.corp.example. 10.9.8.7",
        // Not the node's resolver: the pod's server knows no such name.
        "error",
    ] {
        assert!(log.contains(line), "{line} not in\n{log}");
    }
    assert_eq!(log.lines().count(), 3, "{log}");
}

/// Two pods bind the same port; a second bind in one pod is `address-in-use`; connecting where
/// nothing listens is refused.
#[tokio::test]
async fn ports_are_private_to_each_pod() {
    let node = TestNode::new();
    let first = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: first }
spec:
  containers:
  - { name: main, image: "{p2}", args: [bind, "0.0.0.0:8080", sleep, "600000"] }
"#,
        )
        .await;
    log_line(&first, "main", "bound 0.0.0.0:8080").await;
    let second = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: second }
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: "{p2}"
    args: [bind, "0.0.0.0:8080", bind, "127.0.0.1:8080", bind, "127.0.0.1:0", refused, "127.0.0.1:9"]
"#,
        )
        .await;
    succeeded(&second).await;
    let log = read(&second.log_file("main", 0));
    let lines = log_lines(&second, "main");
    assert_eq!(lines[0], "bound 0.0.0.0:8080", "{log}");
    assert_eq!(lines[1], "error AddrInUse", "{log}");
    assert!(lines[2].starts_with("bound 127.0.0.1:"), "{log}");
    assert_eq!(lines[3], "error ConnectionRefused", "{log}");
    remove(&first).await;
}

/// A writer that does not block stops at the connection's buffer while its reader waits, then
/// everything arrives once the reader reads.
#[tokio::test]
async fn a_slow_reader_bounds_a_fast_writer() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: pressure }
spec:
  restartPolicy: Never
  volumes: [ { name: shared, emptyDir: {} } ]
  containers:
  - { name: reader, image: "{p2}", args: [sink, "0.0.0.0:7000", /shared/go], volumeMounts: [ { name: shared, mountPath: /shared } ] }
  - { name: writer, image: "{p2}", args: [fill, "localhost:7000", /shared/go], volumeMounts: [ { name: shared, mountPath: /shared } ] }
"#,
        )
        .await;
    succeeded(&pod).await;
    let writer = read(&pod.log_file("writer", 0));
    let number = |log: &str, word: &str| -> usize {
        let line = log
            .lines()
            .find(|l| l.contains(word))
            .unwrap_or_else(|| panic!("{log}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let filled = number(&writer, "filled");
    assert!(
        filled > 0 && filled <= 512 * 1024,
        "a reader that does not read holds back the writer: {filled} bytes buffered"
    );
    let sent = number(&writer, "sent");
    assert_eq!(sent, filled + 4 * 1024 * 1024);
    assert_eq!(number(&read(&pod.log_file("reader", 0)), "drained"), sent);
}

/// UDP datagrams arrive with their sender's address and the echo goes back to it.
#[tokio::test]
async fn udp_echo() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: udp }
spec:
  restartPolicy: Never
  initContainers:
  - { name: echo, image: "{p2}", restartPolicy: Always, args: [udp-echo, "0.0.0.0:5353"] }
  containers:
  - { name: client, image: "{p2}", args: [udp-send, "127.0.0.1:5353", ping] }
"#,
        )
        .await;
    succeeded(&pod).await;
    let client = read(&pod.log_file("client", 0));
    assert!(
        client.contains("reply ping from 127.0.0.1:5353"),
        "{client}"
    );
    let echo = read(&pod.log_file("echo", 0));
    assert!(echo.contains("datagram ping from 127.0.0.1:"), "{echo}");
}

/// Pods of a node reach each other by pod IP; a listener on a pod's loopback is not reachable
/// from another pod.
#[tokio::test]
async fn pods_reach_each_other_by_pod_ip() {
    let node = TestNode::new();
    let server = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: server }
spec:
  containers:
  - { name: main, image: "{p2}", args: [bind, "127.0.0.1:8081", echo-server, "0.0.0.0:8080"] }
"#,
        )
        .await;
    log_line(&server, "main", "listening 0.0.0.0:8080").await;
    let ip = server.status().pod_ip.unwrap();
    let client = node
        .start(&format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{ name: client }}
spec:
  restartPolicy: Never
  containers:
  - {{ name: main, image: "{{p2}}", args: [connect, "{ip}:8080", hi, refused, "{ip}:8081"] }}
"#
        ))
        .await;
    succeeded(&client).await;
    let client_ip = client.status().pod_ip.unwrap();
    assert_ne!(client_ip, ip);
    let log = read(&client.log_file("main", 0));
    assert!(log.contains(&format!("reply hi from {ip}:8080")), "{log}");
    assert!(log.contains("error ConnectionRefused"), "{log}");
    remove(&server).await;
}

/// Sends `text` to a published port until the pod's server answers.
async fn request(addr: SocketAddr, text: &str) -> String {
    let text = text.to_owned();
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        loop {
            let attempt = (|| {
                let mut s = TcpStream::connect(addr)?;
                s.write_all(text.as_bytes())?;
                s.shutdown(std::net::Shutdown::Write)?;
                let mut reply = String::new();
                s.read_to_string(&mut reply)?;
                Ok::<_, std::io::Error>(reply)
            })();
            match attempt {
                Ok(reply) if !reply.is_empty() => return reply,
                _ if start.elapsed() < LIMIT => std::thread::sleep(Duration::from_millis(5)),
                other => panic!("no answer from {addr}: {other:?}"),
            }
        }
    })
    .await
    .unwrap()
}

/// `hostPort` and `PodOptions::publish` carry host connections into the pod; a host port
/// already taken is an error at start that names the field.
#[tokio::test]
async fn published_ports_reach_the_pod_from_the_host() {
    let node = TestNode::new();
    let (host_port, extra) = (free_port(), free_port());
    let yaml = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: published }}
spec:
  containers:
  - name: main
    image: "{{p2}}"
    args: [echo-server, "0.0.0.0:8080"]
    ports: [ {{ name: http, containerPort: 8080, hostPort: {host_port} }} ]
"#
    );
    let pod = node
        .node
        .create_pod(
            node.spec(&yaml),
            PodOptions::default().publish(([127, 0, 0, 1], extra).into(), 8080),
        )
        .await
        .unwrap();
    assert_eq!(
        request(([127, 0, 0, 1], host_port).into(), "via hostPort").await,
        "via hostPort"
    );
    assert_eq!(
        request(([127, 0, 0, 1], extra).into(), "via publish").await,
        "via publish"
    );

    let err = node
        .node
        .create_pod(
            node.spec(&yaml.replace("published", "clash")),
            PodOptions::default(),
        )
        .await
        .expect_err("the host port is taken");
    let message = err.to_string();
    assert!(
        message.starts_with(&format!(
            "spec.containers[0].ports[0].hostPort: cannot listen on 127.0.0.1:{host_port}"
        )),
        "{message}"
    );
    remove(&pod).await;
    // The port is free again once the pod is gone.
    let again = node.start(&yaml).await;
    assert_eq!(
        request(([127, 0, 0, 1], host_port).into(), "again").await,
        "again"
    );
    again.delete(Some(Duration::ZERO));
}

/// An address of this machine that is not loopback (loopback is the pod's own).
fn host_address() -> std::net::IpAddr {
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    probe
        .connect("192.0.2.1:9")
        .expect("the test machine needs a route for egress tests");
    probe.local_addr().unwrap().ip()
}

/// With egress allowed a pod reaches a server on the host through real sockets; with egress
/// denied the connection fails at once with access-denied, and outside names do not resolve.
#[tokio::test]
async fn egress_allowed_and_denied() {
    let server = TcpListener::bind((host_address(), 0)).unwrap();
    let addr = server.local_addr().unwrap();
    let serve = std::thread::spawn(move || {
        let (mut s, _) = server.accept().unwrap();
        let mut got = String::new();
        s.read_to_string(&mut got).unwrap();
        s.write_all(format!("host got {got}").as_bytes()).unwrap();
    });
    let yaml = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: egress }}
spec:
  restartPolicy: Never
  containers:
  - {{ name: main, image: "{{p2}}", args: [connect, "{addr}", out] }}
"#
    );
    let allowed = TestNode::new();
    let pod = allowed.start(&yaml).await;
    succeeded(&pod).await;
    serve.join().unwrap();
    let log = read(&pod.log_file("main", 0));
    assert!(
        log.contains(&format!("reply host got out from {addr}")),
        "{log}"
    );

    let denied = TestNode::with(|o| o.egress(Egress::Deny));
    let pod = denied.start(&yaml).await;
    let status = tokio::time::timeout(LIMIT, pod.wait()).await.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    let log = read(&pod.log_file("main", 0));
    assert!(log.contains("error PermissionDenied"), "{log}");
}

/// A pod's connections through the host's network are bounded (each is a host descriptor): a
/// guest opening 1,100 to a host server gets 1,024, then `new-socket-limit`.
#[tokio::test]
async fn a_pods_outside_connections_are_bounded() {
    let server = TcpListener::bind((host_address(), 0)).unwrap();
    let addr = server.local_addr().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let accepting = stop.clone();
    // Accepts and keeps what it accepts until the test ends.
    std::thread::spawn(move || {
        server.set_nonblocking(true).unwrap();
        let mut kept = Vec::new();
        while !accepting.load(std::sync::atomic::Ordering::Relaxed) {
            match server.accept() {
                Ok((s, _)) => kept.push(s),
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    });
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{ name: many }}\nspec:\n  restartPolicy: Never\n  containers:\n  - {{ name: main, image: \"{{p2}}\", args: [hold-out, \"{addr}\", \"1100\"] }}\n"
    );
    let node = TestNode::new();
    let pod = node.start(&yaml).await;
    tokio::time::timeout(LIMIT, pod.wait()).await.unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let log = read(&pod.log_file("main", 0));
    assert!(log.contains("held 1024 then "), "{log}");
}

/// httpGet and tcpSocket probes go through the pod network to the pod IP: a 200 makes the pod
/// Ready (with the probe's headers and path seen by the server), a 500 is Unhealthy with the
/// kubelet's message, a closed port fails tcpSocket.
#[tokio::test]
async fn network_probes() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: probed }
spec:
  containers:
  - name: ok
    image: "{p2}"
    args: [http-server, "0.0.0.0:8080", "200"]
    ports: [ { name: web, containerPort: 8080 } ]
    readinessProbe:
      httpGet: { path: /healthz, port: web, httpHeaders: [ { name: X-Probe, value: "yes" } ] }
      periodSeconds: 1
  - name: bad
    image: "{p2}"
    args: [http-server, "0.0.0.0:8081", "500"]
    readinessProbe: { httpGet: { path: /, port: 8081 }, periodSeconds: 1 }
  - name: tcp
    image: "{p2}"
    args: [echo-server, "0.0.0.0:8082"]
    readinessProbe: { tcpSocket: { port: 8082 }, periodSeconds: 1 }
  - name: dead
    image: "{p2}"
    args: [echo-server, "127.0.0.1:9000"]
    livenessProbe: { tcpSocket: { port: 9000 }, periodSeconds: 1, failureThreshold: 1 }
"#,
        )
        .await;
    let ready = |s: &wasmpod::k8s_openapi::api::core::v1::PodStatus, name: &str| {
        s.container_statuses
            .iter()
            .flatten()
            .any(|c| c.name == name && c.ready)
    };
    wait_for(&pod, LIMIT, |s| ready(s, "ok") && ready(s, "tcp")).await;
    // The first probes may run before the servers listen: look for the failure each case is
    // about.
    let bad = unhealthy(&pod, "bad", "statuscode").await;
    assert!(
        bad.contains("HTTP probe failed with statuscode: 500"),
        "{bad}"
    );
    // Port 9000 listens on the pod's loopback only: the kubelet, coming to the pod IP, is
    // refused and the liveness probe fails.
    let tcp = unhealthy(&pod, "dead", "Liveness probe failed").await;
    assert!(tcp.starts_with("Liveness probe failed: dial tcp"), "{tcp}");
    assert!(tcp.contains("connection refused"), "{tcp}");
    assert!(!ready(&pod.status(), "bad"));
    let log = read(&pod.log_file("ok", 0));
    assert!(log.contains("request GET /healthz HTTP/1.1"), "{log}");
    assert!(log.contains("header X-Probe: yes"), "{log}");
    remove(&pod).await;
}

/// IPv6 loopback works inside the pod, separately from IPv4.
#[tokio::test]
async fn ipv6_loopback() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: six }
spec:
  restartPolicy: Never
  initContainers:
  - { name: server, image: "{p2}", restartPolicy: Always, args: [echo-server, "[::]:8080"] }
  containers:
  - { name: client, image: "{p2}", args: [connect, "[::1]:8080", six, refused, "127.0.0.1:8080"] }
"#,
        )
        .await;
    succeeded(&pod).await;
    let log = read(&pod.log_file("client", 0));
    assert!(log.contains("reply six from [::1]:8080"), "{log}");
    assert!(log.contains("error ConnectionRefused"), "{log}");
}

/// An httpGet preStop hook reaches the container's server before TERM.
#[tokio::test]
async fn http_get_hook() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: hooked }
spec:
  containers:
  - name: web
    image: "{p2}"
    args: [http-server, "0.0.0.0:8080", "200"]
    lifecycle: { preStop: { httpGet: { path: /shutdown, port: 8080 } } }
"#,
        )
        .await;
    log_line(&pod, "web", "listening").await;
    pod.delete(None);
    let timeline = Timeline::collect(&pod).await;
    assert!(
        timeline.count("web", Reason::FailedPreStopHook) == 0,
        "{timeline}"
    );
    let log = read(&pod.log_file("web", 0));
    assert!(log.contains("request GET /shutdown HTTP/1.1"), "{log}");
}

/// Preview1 modules have no sockets: declaring ports on one is an error that says so.
#[tokio::test]
async fn preview1_modules_cannot_declare_ports() {
    let node = TestNode::new();
    let spec = node.spec(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: old }
spec:
  containers:
  - { name: p1, image: "{p1}", ports: [ { containerPort: 80 } ] }
"#,
    );
    let err = node
        .node
        .create_pod(spec, PodOptions::default())
        .await
        .expect_err("a p1 module with ports is refused");
    let message = err.to_string();
    assert!(
        message.starts_with("spec.containers[0].ports: the container is a WASI preview1 module"),
        "{message}"
    );
}

/// gRPC probes speak the standard health-checking protocol to the pod IP: SERVING is success,
/// NOT_SERVING fails with the kubelet's message, and the probe's `service` reaches the server.
#[tokio::test]
async fn grpc_probes() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: grpc }
spec:
  containers:
  - name: serving
    image: "{p2}"
    args: [grpc-health, "0.0.0.0:9090", "1"]
    readinessProbe: { grpc: { port: 9090, service: checkout }, periodSeconds: 1 }
  - name: failing
    image: "{p2}"
    args: [grpc-health, "0.0.0.0:9091", "2"]
    readinessProbe: { grpc: { port: 9091 }, periodSeconds: 1 }
"#,
        )
        .await;
    wait_for(&pod, LIMIT, |s| {
        s.container_statuses
            .iter()
            .flatten()
            .any(|c| c.name == "serving" && c.ready)
    })
    .await;
    let log = log_line(&pod, "serving", "health check").await;
    assert!(log.contains(r#"health check service="checkout""#), "{log}");
    let message = unhealthy(&pod, "failing", "service unhealthy").await;
    assert_eq!(
        message,
        r#"Readiness probe failed: service unhealthy (responded with "NOT_SERVING")"#
    );
    assert!(
        !pod.status()
            .container_statuses
            .iter()
            .flatten()
            .any(|c| c.name == "failing" && c.ready)
    );
    remove(&pod).await;
}

/// `hostNetwork: true` on a node that allows it: the component's sockets are the host's, so a
/// host process reaches its listener on 127.0.0.1 with nothing published, and it reaches the
/// host's own services on 127.0.0.1. A node that does not allow it refuses the pod naming the
/// option, and a `hostPort` other than the `containerPort` is refused as the API server does.
#[tokio::test]
async fn host_network_pods_use_the_hosts_sockets_where_the_node_allows_them() {
    let port = free_port();
    let server = PodYaml::new("host-server")
        .spec("hostNetwork: true")
        .container(&format!(
            "{{ name: c, image: \"{{p2}}\", args: [echo-server, \"127.0.0.1:{port}\"], ports: [ {{ containerPort: {port}, hostPort: {port} }} ] }}"
        ))
        .build();
    let closed = TestNode::new();
    let refused = closed
        .node
        .create_pod(closed.spec(&server), PodOptions::default())
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("spec.hostNetwork")
            && refused.to_string().contains("--allow-host-network"),
        "{refused}"
    );

    let node = TestNode::with(|o| o.allow_host_network(true));
    let pod = node.start(&server).await;
    // A host process, on a thread of its own (the pod runs on this test's runtime).
    let echoed = tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        let mut stream = loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => break s,
                Err(e) => {
                    assert!(start.elapsed() < LIMIT, "nothing listens on the host: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        };
        stream.write_all(b"from the host").unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        let mut echoed = String::new();
        stream.read_to_string(&mut echoed).unwrap();
        echoed
    })
    .await
    .unwrap();
    assert_eq!(echoed, "from the host");

    // The guest reaches a service of the host on 127.0.0.1.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = listener.local_addr().unwrap().port();
    let serve = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut got = String::new();
        s.read_to_string(&mut got).unwrap();
        s.write_all(format!("host saw {got}").as_bytes()).unwrap();
        got
    });
    // Its IP is the node's, in its status and through the downward API.
    let client = PodYaml::new("host-client")
        .never()
        .spec("hostNetwork: true")
        .container(&format!(
            "{{ name: c, image: \"{{p2}}\", args: [env, POD_IP, env, HOST_IP, connect, \"127.0.0.1:{host_port}\", hello], \
               env: [ {{ name: POD_IP, valueFrom: {{ fieldRef: {{ fieldPath: status.podIP }} }} }}, \
                      {{ name: HOST_IP, valueFrom: {{ fieldRef: {{ fieldPath: status.hostIP }} }} }} ] }}"
        ))
        .build();
    let client = node.start(&client).await;
    let status = tokio::time::timeout(LIMIT, client.wait()).await.unwrap();
    assert_eq!(serve.join().unwrap(), "hello");
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    assert_eq!(status.pod_ip.as_deref(), Some("127.0.0.1"), "{status:#?}");
    assert_eq!(status.host_ip.as_deref(), Some("127.0.0.1"), "{status:#?}");
    assert_eq!(
        &log_lines(&client, "c")[..2],
        ["POD_IP=127.0.0.1", "HOST_IP=127.0.0.1"]
    );
    // A pod on the pod network keeps its own IP; its hostIP is the node's.
    let sleeper = PodYaml::new("on-pod-network")
        .container(r#"{ name: c, image: "{p2}", args: [sleep, "600000"] }"#)
        .build();
    let sleeper = node.start(&sleeper).await;
    let status = running(&sleeper, &["c"]).await;
    assert!(status.pod_ip.unwrap().starts_with("10."));
    assert_eq!(status.host_ip.as_deref(), Some("127.0.0.1"));
    remove(&sleeper).await;
    pod.delete(Some(Duration::ZERO));

    let mismatch = PodYaml::new("mismatch")
        .spec("hostNetwork: true")
        .container(
            "{ name: c, image: \"{p2}\", ports: [ { containerPort: 8080, hostPort: 9090 } ] }",
        )
        .build();
    let error = node.invalid(&mismatch);
    assert!(
        error.contains("spec.containers[0].ports[0].hostPort")
            && error.contains("must match containerPort"),
        "{error}"
    );
}
