//! The agent's API against hostile clients, on a real agent on loopback reached by raw TLS
//! clients: deep objects, body bombs, token-less connections, unread watches, and what only the
//! node may set. Without these bounds the agent crashes, grows by gigabytes, or stops
//! answering those with the token.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wasmpod::NodeOptions;
use wasmpod_agent::{Agent, AgentOptions};

/// How long one request may take here before the test fails.
const ANSWER: Duration = Duration::from_secs(20);

/// An agent in this process, and a client for it.
struct Node {
    _dir: tempfile::TempDir,
    state: PathBuf,
    agent: Option<Agent>,
    client: Client,
}

impl Node {
    async fn start() -> Node {
        Node::start_with(|o| o).await
    }

    async fn start_with(options: impl Fn(AgentOptions) -> AgentOptions) -> Node {
        tokio::task::spawn_blocking(wasmpod_tests::warm_shared_cache)
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let agent = Agent::start(options(agent_options(&state, dir.path())))
            .await
            .unwrap();
        let client = Client::new(agent.kubeconfig());
        Node {
            _dir: dir,
            state,
            agent: Some(agent),
            client,
        }
    }

    /// Stops the agent and starts another on the same state.
    async fn restart(&mut self) {
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
        let images = self.state.parent().unwrap().to_owned();
        // On the same address: the kubeconfig stays as it is.
        let options = agent_options(&self.state, &images).listen(self.client.addr);
        let agent = Agent::start(options).await.unwrap();
        self.client = Client::new(agent.kubeconfig());
        self.agent = Some(agent);
    }
}

fn agent_options(state: &Path, images: &Path) -> AgentOptions {
    let node = NodeOptions::default()
        .state_dir(state)
        .cache_dir(Some(wasmpod_tests::shared_cache()));
    AgentOptions::default()
        .node(node)
        .listen(([127, 0, 0, 1], 0).into())
        .images_dir(images)
}

/// A raw HTTPS client: one request a connection, the answer read to its end.
#[derive(Clone)]
struct Client {
    addr: SocketAddr,
    token: String,
    tls: tokio_rustls::TlsConnector,
}

struct Answer {
    code: u16,
    body: Value,
}

impl Client {
    fn new(kubeconfig: &Path) -> Client {
        let text = std::fs::read(kubeconfig).unwrap();
        let config = wasmpod::read_documents(&text).unwrap().remove(0);
        let cluster = &config["clusters"][0]["cluster"];
        let server = cluster["server"].as_str().unwrap();
        let addr = server.strip_prefix("https://").unwrap().parse().unwrap();
        let ca = base64::engine::general_purpose::STANDARD
            .decode(cluster["certificate-authority-data"].as_str().unwrap())
            .unwrap();
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(&ca).unwrap())
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Client {
            addr,
            token: config["users"][0]["user"]["token"]
                .as_str()
                .unwrap()
                .to_owned(),
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
        }
    }

    async fn connect(&self) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(self.addr).await?;
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        self.tls.connect(name, tcp).await
    }

    fn head(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        len: usize,
        token: bool,
    ) -> String {
        let auth = if token {
            format!("Authorization: Bearer {}\r\n", self.token)
        } else {
            String::new()
        };
        format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Content-Type: {content_type}\r\n\
             Content-Length: {len}\r\nConnection: close\r\n\r\n"
        )
    }

    /// One request with the token; the answer's code and JSON body.
    async fn send(&self, method: &str, path: &str, content_type: &str, body: &[u8]) -> Answer {
        let raw = self.exchange(method, path, content_type, body).await;
        parse(&raw)
    }

    /// One request with the token on a connection of its own: the raw answer, read to the end.
    async fn exchange(&self, method: &str, path: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
        let exchange = async {
            let mut tls = self.connect().await.unwrap();
            let head = self.head(method, path, content_type, body.len(), true);
            tls.write_all(head.as_bytes()).await.unwrap();
            tls.write_all(body).await.unwrap();
            let mut answer = Vec::new();
            let _ = tls.read_to_end(&mut answer).await;
            answer
        };
        tokio::time::timeout(ANSWER, exchange)
            .await
            .unwrap_or_else(|_| panic!("{method} {path}: no answer within {ANSWER:?}"))
    }

    async fn get(&self, path: &str) -> Answer {
        self.send("GET", path, "application/json", b"").await
    }

    /// A GET as client-go sends it: again when its connection closes before any answer (a
    /// probable EOF), at most three times.
    async fn get_as_client_go(&self, path: &str) -> Answer {
        for _ in 0..2 {
            let raw = self.exchange("GET", path, "application/json", b"").await;
            if !raw.is_empty() {
                return parse(&raw);
            }
        }
        self.get(path).await
    }

    /// A PATCH of `body` as JSON, sent as `content_type`.
    async fn patch(&self, path: &str, content_type: &str, body: &impl serde::Serialize) -> Answer {
        let body = serde_json::to_vec(body).unwrap();
        self.send("PATCH", path, content_type, &body).await
    }

    async fn post(&self, path: &str, body: &Value) -> Answer {
        let body = serde_json::to_vec(body).unwrap();
        self.send("POST", path, "application/json", &body).await
    }
}

/// An HTTP/1.1 answer with a `Content-Length` (or read to its end).
fn parse(raw: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(raw);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        panic!("not an HTTP answer: {text:?}");
    };
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    let body = serde_json::from_str(body).unwrap_or(Value::String(body.to_owned()));
    Answer { code, body }
}

/// A small YAML object of `kind` whose aliases expand to 10^12 values.
fn alias_bomb(kind: &str) -> String {
    let mut bomb = format!(
        "apiVersion: v1\nkind: {kind}\nmetadata: {{name: bomb}}\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    );
    for i in 1..12 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        bomb += &format!("a{i}: &a{i} [{refs}]\n");
    }
    bomb
}

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}})
}

const CONFIG_MAPS: &str = "/api/v1/namespaces/default/configmaps";

/// Objects nested ever deeper by patches are refused at the depth bound, with a `Status`; the
/// agent keeps serving, and what it acknowledged reads back after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_objects_are_refused_and_nothing_recurses_on_them() {
    let mut node = Node::start().await;
    let c = node.client.clone();
    assert_eq!(c.post(CONFIG_MAPS, &config_map("deep")).await.code, 201);
    let path = format!("{CONFIG_MAPS}/deep");
    // Each JSON patch adds a value 40 levels deep under the last one's, its path growing: taken
    // to thousands of levels, anything recursing on the object overflows the agent's stack.
    let mut refused = None;
    let mut pointer = String::from("/extra");
    for round in 0..200 {
        let mut value = json!("leaf");
        for _ in 0..40 {
            value = json!({ "n": value });
        }
        let op = json!([{"op": "add", "path": pointer, "value": value}]);
        let answer = c.patch(&path, "application/json-patch+json", &op).await;
        if answer.code != 200 {
            refused = Some((round, answer));
            break;
        }
        pointer += &"/n".repeat(40);
    }
    let (round, answer) = refused.expect("deeper and deeper objects were all taken");
    assert!(round <= 2, "refused only at round {round}");
    assert!((400..500).contains(&answer.code), "{}", answer.body);
    assert_eq!(answer.body["kind"], "Status", "{}", answer.body);
    assert!(
        answer.body["message"].as_str().unwrap().contains("levels"),
        "{}",
        answer.body
    );
    // JSON patches that copy an object into itself again and again (a level deeper each
    // time): refused at the bound.
    let copies: Vec<Value> = (0..100)
        .map(|_| json!({"op": "copy", "from": "/data", "path": "/data/d"}))
        .collect();
    let answer = c.patch(&path, "application/json-patch+json", &copies).await;
    assert_eq!(answer.code, 422, "{}", answer.body);
    assert_eq!(c.get(&path).await.code, 200);
    node.restart().await;
    let answer = node.client.get(&path).await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    assert_eq!(answer.body["data"]["a"], "b");
}

/// A YAML alias bomb, whatever way it is sent; copy patches that double an object; bodies that
/// are not objects. Each is answered at once with a `Status`, the process stays small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_bombs_are_refused_at_once() {
    let node = Node::start().await;
    let c = node.client.clone();
    let bomb = alias_bomb("ConfigMap");
    let before = wasmpod_tests::rss_bytes();
    assert_eq!(c.post(CONFIG_MAPS, &config_map("target")).await.code, 201);
    let target = format!("{CONFIG_MAPS}/target");
    let cases = [
        ("POST", CONFIG_MAPS.to_owned(), "application/yaml"),
        (
            "PATCH",
            format!("{CONFIG_MAPS}/bomb"),
            "application/apply-patch+yaml",
        ),
        ("PATCH", target.clone(), "application/merge-patch+json"),
        (
            "PATCH",
            target.clone(),
            "application/strategic-merge-patch+json",
        ),
        ("PATCH", target.clone(), "application/apply-patch+yaml"),
    ];
    for (method, path, content_type) in cases {
        let start = Instant::now();
        let answer = c.send(method, &path, content_type, bomb.as_bytes()).await;
        assert!(
            (400..500).contains(&answer.code),
            "{method} {path} {content_type}: {} {}",
            answer.code,
            answer.body
        );
        assert_eq!(answer.body["kind"], "Status");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{content_type}: {:?}",
            start.elapsed()
        );
    }
    // A few dozen copies each doubling the object.
    let big = json!({"data": {"v": "x".repeat(64 << 10)}});
    let answer = c.patch(&target, "application/merge-patch+json", &big).await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    // Each copies the whole object into itself.
    let doubling: Vec<Value> = (0..40)
        .map(|i| json!({"op": "copy", "from": "", "path": format!("/copy{i}")}))
        .collect();
    let answer = c
        .patch(&target, "application/json-patch+json", &doubling)
        .await;
    assert_eq!(answer.code, 422, "{}", answer.body["message"]);
    // Server-side apply of bodies that are not objects.
    for body in ["[1]", "\"x\"", "{\"metadata\": []}", "7", ""] {
        let answer = c
            .send(
                "PATCH",
                &format!("{CONFIG_MAPS}/fresh"),
                "application/apply-patch+yaml",
                body.as_bytes(),
            )
            .await;
        assert_eq!(answer.code, 400, "{body}: {}", answer.body);
        assert_eq!(answer.body["kind"], "Status", "{body}");
    }
    let grown = wasmpod_tests::rss_bytes().saturating_sub(before);
    assert!(grown < 256 << 20, "the agent grew by {} MiB", grown >> 20);
    assert_eq!(c.get(&target).await.code, 200);
}

/// An alias bomb in the manifests directory is refused at once; the valid manifest beside it
/// runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bomb_among_static_manifests_does_not_keep_the_others_out() {
    let manifests = tempfile::tempdir().unwrap();
    let bomb = alias_bomb("Pod");
    std::fs::write(manifests.path().join("bomb.yaml"), bomb).unwrap();
    std::fs::write(
        manifests.path().join("web.yaml"),
        wasmpod_tests::fill(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - {name: c, image: \"{p1}\", args: [sleep, \"60000\"]}\n",
        ),
    )
    .unwrap();
    let dir = manifests.path().to_owned();
    let node = Node::start_with(move |o| o.manifests(dir.clone())).await;
    let start = Instant::now();
    loop {
        let answer = node.client.get("/api/v1/namespaces/default/pods").await;
        let names: Vec<&str> = answer.body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.pointer("/metadata/name")?.as_str())
            .collect();
        if names.iter().any(|n| n.starts_with("web-")) {
            assert!(!names.iter().any(|n| n.starts_with("bomb")), "{names:?}");
            break;
        }
        assert!(
            start.elapsed() < ANSWER,
            "the valid manifest never ran: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// This process's soft limit on open descriptors (a node raises it to the hard limit).
fn descriptors() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

/// 1,100 connections without the token that keep asking (and reconnect when closed), and 400
/// more that never send a request: those with the token are served all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_without_the_token_do_not_starve_those_with_it() {
    let node = Node::start().await;
    assert!(descriptors() > 4000, "the test needs 4,000 descriptors");
    let c = node.client.clone();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut attackers = Vec::new();
    for _ in 0..1100 {
        let (c, stop) = (c.clone(), stop.clone());
        attackers.push(tokio::spawn(async move {
            let head = c.head("GET", "/api/v1/pods", "application/json", 0, false);
            let head = head.replace("Connection: close\r\n", "");
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok(mut tls) = c.connect().await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                // Ask, read the 401, ask again on the same connection while it stays open.
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if tls.write_all(head.as_bytes()).await.is_err() {
                        break;
                    }
                    let mut buf = [0u8; 4096];
                    match tokio::time::timeout(Duration::from_secs(2), tls.read(&mut buf)).await {
                        Ok(Ok(n)) if n > 0 => {}
                        _ => break,
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }));
    }
    // Connected all at once, each given 2 s for its handshake.
    let connecting: Vec<_> = (0..400)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(
                async move { tokio::time::timeout(Duration::from_secs(2), c.connect()).await },
            )
        })
        .collect();
    let mut idle = Vec::new();
    for attempt in connecting {
        if let Ok(Ok(Ok(tls))) = attempt.await {
            idle.push(tls);
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    for i in 0..10 {
        let start = Instant::now();
        // A connection not yet authenticated may lose its slot to newer ones (oldest first);
        // client-go then sends the GET again, and so does this client.
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            c.get_as_client_go("/api/v1/namespaces"),
        )
        .await
        .unwrap_or_else(|_| panic!("request {i} with the token was not served"));
        assert_eq!(answer.code, 200);
        assert!(start.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A token-less request is answered 401 and its connection closed.
    let mut tls = c.connect().await.unwrap();
    let head = c
        .head("GET", "/api/v1/pods", "application/json", 0, false)
        .replace("Connection: close\r\n", "");
    tls.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut answer))
        .await
        .expect("the connection is closed after a 401")
        .ok();
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 401"));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for a in attackers {
        a.abort();
    }
}

/// A watch whose client reads nothing is ended once what waits for it has passed the bound for
/// a few seconds, rather than holding a copy of every change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_watch_is_ended() {
    let node = Node::start().await;
    let c = node.client.clone();
    let mut watch = c.connect().await.unwrap();
    let head = c.head(
        "GET",
        &format!("{CONFIG_MAPS}?watch=1"),
        "application/json",
        0,
        true,
    );
    watch.write_all(head.as_bytes()).await.unwrap();
    // 40 changes of 1 MiB each: 40 MiB that the watch does not read.
    assert_eq!(c.post(CONFIG_MAPS, &config_map("big")).await.code, 201);
    for i in 0..40 {
        let patch = json!({"data": {"v": format!("{i}{}", "x".repeat(1 << 20))}});
        let answer = c
            .patch(
                &format!("{CONFIG_MAPS}/big"),
                "application/merge-patch+json",
                &patch,
            )
            .await;
        assert_eq!(answer.code, 200);
    }
    // Nothing read for longer than the agent waits for a watch to take its events (5 s).
    tokio::time::sleep(Duration::from_secs(7)).await;
    // What the watch gets is cut short: it ends well before the 40 MiB.
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    let read = async {
        loop {
            match watch.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
    };
    tokio::time::timeout(ANSWER, read)
        .await
        .expect("the unread watch was never ended");
    assert!(got < 24 << 20, "the watch held {} MiB", got >> 20);
}

/// What only the node sets: a pod from the API may not carry the mirror annotation (it would
/// be neither changeable nor deletable), and server-side apply creates nothing in a namespace
/// that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_only_the_node_sets_is_refused() {
    let mut node = Node::start().await;
    let c = node.client.clone();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "sneaky", "annotations": {"kubernetes.io/config.mirror": "x"}},
        "spec": {"containers": [{"name": "c", "image": wasmpod_tests::guests::AGNHOST_P1}]},
    });
    let answer = c.post("/api/v1/namespaces/default/pods", &pod).await;
    assert_eq!(answer.code, 403, "{}", answer.body);
    for ns in ["nowhere", "..", "a%00b", &"n".repeat(300)] {
        let answer = c
            .send(
                "PATCH",
                &format!("/api/v1/namespaces/{ns}/configmaps/x"),
                "application/apply-patch+yaml",
                b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
            )
            .await;
        assert_eq!(answer.code, 404, "{ns}: {}", answer.body);
    }
    // The kubeconfig is written once, not at every start (a full disk must not keep the agent
    // from starting again).
    let kubeconfig = node.agent.as_ref().unwrap().kubeconfig().to_owned();
    let written = std::fs::metadata(&kubeconfig).unwrap().modified().unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    node.restart().await;
    assert_eq!(
        std::fs::metadata(&kubeconfig).unwrap().modified().unwrap(),
        written
    );
}
