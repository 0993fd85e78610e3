//! What the API tests share: an agent in this process on loopback, and a raw TLS client for it
//! that sends one request a connection, as a kubeconfig's token holder does.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wasmpod::NodeOptions;
use wasmpod_agent::{Agent, AgentOptions};

/// How long one request may take here before the test fails.
pub(crate) const ANSWER: Duration = Duration::from_secs(20);

/// The ConfigMaps of the default namespace.
pub(crate) const CONFIG_MAPS: &str = "/api/v1/namespaces/default/configmaps";

/// A ConfigMap named `name` with one key.
pub(crate) fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}})
}

/// An agent in this process, and a client for it.
pub(crate) struct Node {
    _dir: tempfile::TempDir,
    state: PathBuf,
    pub(crate) agent: Option<Agent>,
    pub(crate) client: Client,
}

impl Node {
    pub(crate) async fn start() -> Node {
        Node::start_with(|o| o).await
    }

    pub(crate) async fn start_with(options: impl Fn(AgentOptions) -> AgentOptions) -> Node {
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
    pub(crate) async fn restart(&mut self) {
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
pub(crate) struct Client {
    addr: SocketAddr,
    token: String,
    tls: tokio_rustls::TlsConnector,
}

pub(crate) struct Answer {
    pub(crate) code: u16,
    pub(crate) body: Value,
}

impl Client {
    pub(crate) fn new(kubeconfig: &Path) -> Client {
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

    pub(crate) async fn connect(
        &self,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(self.addr).await?;
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        self.tls.connect(name, tcp).await
    }

    pub(crate) fn head(
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
    pub(crate) async fn send(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> Answer {
        let raw = self.exchange(method, path, content_type, body).await;
        parse(&raw)
    }

    /// One request with the token on a connection of its own: the raw answer, read to the end.
    pub(crate) async fn exchange(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> Vec<u8> {
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

    pub(crate) async fn get(&self, path: &str) -> Answer {
        self.send("GET", path, "application/json", b"").await
    }

    /// A GET as client-go sends it: again when its connection closes before any answer (a
    /// probable EOF), at most three times.
    pub(crate) async fn get_as_client_go(&self, path: &str) -> Answer {
        for _ in 0..2 {
            let raw = self.exchange("GET", path, "application/json", b"").await;
            if !raw.is_empty() {
                return parse(&raw);
            }
        }
        self.get(path).await
    }

    /// A PATCH of `body` as JSON, sent as `content_type`.
    pub(crate) async fn patch(
        &self,
        path: &str,
        content_type: &str,
        body: &impl serde::Serialize,
    ) -> Answer {
        let body = serde_json::to_vec(body).unwrap();
        self.send("PATCH", path, content_type, &body).await
    }

    pub(crate) async fn post(&self, path: &str, body: &Value) -> Answer {
        let body = serde_json::to_vec(body).unwrap();
        self.send("POST", path, "application/json", &body).await
    }
}

/// An HTTP/1.1 answer with a `Content-Length` (or read to its end).
pub(crate) fn parse(raw: &[u8]) -> Answer {
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

impl Client {
    /// A GET of a table, as `kubectl get` asks for one.
    pub(crate) async fn get_table(&self, path: &str) -> Answer {
        let head = self.head("GET", path, "application/json", 0, true).replace(
            "Content-Type:",
            "Accept: application/json;as=Table;v=v1;g=meta.k8s.io\r\nContent-Type:",
        );
        let exchange = async {
            let mut tls = self.connect().await.unwrap();
            tls.write_all(head.as_bytes()).await.unwrap();
            let mut answer = Vec::new();
            let _ = tls.read_to_end(&mut answer).await;
            answer
        };
        let raw = tokio::time::timeout(ANSWER, exchange)
            .await
            .unwrap_or_else(|_| panic!("GET {path}: no answer within {ANSWER:?}"));
        parse(&raw)
    }

    /// A watch (`path` with `watch=1`), its events read one at a time.
    pub(crate) async fn watch(&self, path: &str) -> Watch {
        let mut tls = self.connect().await.unwrap();
        let head = self.head("GET", path, "application/json", 0, true);
        tls.write_all(head.as_bytes()).await.unwrap();
        Watch {
            tls,
            buf: Vec::new(),
            head: None,
            events: std::collections::VecDeque::new(),
        }
    }
}

/// An open watch.
pub(crate) struct Watch {
    tls: tokio_rustls::client::TlsStream<TcpStream>,
    buf: Vec<u8>,
    /// The answer's status line, once read.
    head: Option<String>,
    events: std::collections::VecDeque<Value>,
}

impl Watch {
    /// The next event (`{"type": ..., "object": ...}`); panics when none comes in time.
    pub(crate) async fn next(&mut self) -> Value {
        let read = async {
            loop {
                if let Some(event) = self.events.pop_front() {
                    return Some(event);
                }
                let mut chunk = [0u8; 16 << 10];
                match self.tls.read(&mut chunk).await {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                }
                self.take_lines();
            }
        };
        match tokio::time::timeout(ANSWER, read).await {
            Ok(Some(event)) => event,
            Ok(None) => panic!("the watch ended ({:?})", self.head),
            Err(_) => panic!("no watch event within {ANSWER:?} ({:?})", self.head),
        }
    }

    /// Moves the complete event lines read so far into `events` (the chunked encoding's size
    /// lines are not JSON and are passed over).
    fn take_lines(&mut self) {
        if self.head.is_none() {
            let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                return;
            };
            let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            self.head = Some(head);
            self.buf.drain(..end + 4);
        }
        while let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim();
            if line.starts_with('{') {
                self.events.push_back(serde_json::from_str(line).unwrap());
            }
        }
    }
}
