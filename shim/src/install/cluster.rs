//! The cluster's side of an install, when the installer can reach the API server (a
//! `--kubeconfig`, or the service account of the DaemonSet's pod): the RuntimeClass `wasmpod`
//! created or brought up to date, and the node labelled [`LABEL`] once containerd lists the
//! handler. The class's `scheduling.nodeSelector` names that label, so pods of the class go only
//! to nodes that run them; `uninstall` takes the label off before it touches containerd.
//!
//! The class is the one `deploy/kubernetes/installer.yaml` holds (read from it when the binary
//! is built): one definition for the manifest and the command.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::say;

/// The label a node gets once containerd there lists the handler.
pub(super) const LABEL: &str = "wasmpod.dev/installed";

/// The RuntimeClass's name and handler.
const CLASS: &str = "wasmpod";

/// The manifests the class is taken from.
const MANIFESTS: &str = include_str!("../../../deploy/kubernetes/installer.yaml");

/// Where a pod's service account credentials are.
const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How long one request to the API server may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest answer read from the API server (a Node with many images is tens of KiB).
const MAX_ANSWER: usize = 4 << 20;

/// The largest credentials file read (a kubeconfig, a token, a certificate).
const MAX_FILE: u64 = 3 << 20;

/// A credentials file, refused past [`MAX_FILE`].
fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE + 1).read_to_end(&mut bytes))
        .with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.len() as u64 > MAX_FILE {
        bail!("{} is larger than {MAX_FILE} bytes", path.display());
    }
    Ok(bytes)
}

/// [`read`], as text.
fn read_text(path: &Path) -> anyhow::Result<String> {
    String::from_utf8(read(path)?).with_context(|| format!("{} is not UTF-8", path.display()))
}

/// How the installer reaches the cluster.
#[derive(Debug, clap::Args)]
pub(super) struct ClusterOptions {
    /// A kubeconfig that reaches the cluster's API server: with it, `install` creates or
    /// updates the RuntimeClass `wasmpod` and labels the node `wasmpod.dev/installed=true`, and
    /// `uninstall` takes the label off. In a pod, the pod's service account is used without it.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The node's name in the cluster (the DaemonSet gives `spec.nodeName`); by default
    /// `$NODE_NAME`, else the host's name.
    #[arg(long, value_name = "NAME")]
    node_name: Option<String>,
}

/// The API server, as this node's installer speaks to it.
pub(super) struct Cluster {
    http: reqwest::Client,
    server: String,
    token: Option<String>,
    node: String,
    runtime: tokio::runtime::Runtime,
}

/// What `install` does in the cluster, decided before anything changes.
pub(super) struct Plan {
    /// The class as it is (`None`: there is none), to be made the manifest's.
    class: Option<Value>,
    labelled: bool,
}

impl ClusterOptions {
    /// The cluster, if the installer has credentials for it; `None` says why not.
    pub(super) fn connect(&self, host_root: &Path) -> anyhow::Result<Option<Cluster>> {
        let credentials = match &self.kubeconfig {
            Some(file) => Some(
                Credentials::from_kubeconfig(file)
                    .with_context(|| format!("--kubeconfig {}", file.display()))?,
            ),
            None => Credentials::in_cluster()?,
        };
        let Some(credentials) = credentials else {
            say(
                "cluster",
                "no --kubeconfig and not in a pod: the node is not labelled and no RuntimeClass \
                 is made (apply deploy/kubernetes/installer.yaml's RuntimeClass and label the \
                 node wasmpod.dev/installed=true yourself)",
            );
            return Ok(None);
        };
        let node = match (&self.node_name, std::env::var("NODE_NAME")) {
            (Some(name), _) => name.clone(),
            (None, Ok(name)) if !name.is_empty() => name,
            _ => host_name(host_root)?,
        };
        Cluster::new(credentials, node).map(Some)
    }
}

/// The host's name, as the kubelet names its node by default (lowercased).
fn host_name(host_root: &Path) -> anyhow::Result<String> {
    let file = super::host(host_root, Path::new("/etc/hostname"));
    let name = std::fs::read_to_string(&file)
        .or_else(|_| std::fs::read_to_string("/proc/sys/kernel/hostname"))
        .context("the node's name: give --node-name")?;
    let name = name.trim().to_ascii_lowercase();
    if name.is_empty() {
        bail!("the host has no name: give --node-name");
    }
    Ok(name)
}

/// An API server's address and what proves who the installer is.
struct Credentials {
    server: String,
    /// PEM certificates the server's certificate must chain to; `None`: the system's roots.
    ca: Option<Vec<u8>>,
    insecure: bool,
    token: Option<String>,
    /// A client certificate and its key, PEM.
    identity: Option<Vec<u8>>,
}

impl Credentials {
    /// The credentials of a pod's service account, if this process runs in a pod.
    fn in_cluster() -> anyhow::Result<Option<Credentials>> {
        let (Ok(host), Ok(port)) = (
            std::env::var("KUBERNETES_SERVICE_HOST"),
            std::env::var("KUBERNETES_SERVICE_PORT"),
        ) else {
            return Ok(None);
        };
        let dir = Path::new(SERVICE_ACCOUNT);
        if !dir.join("token").exists() {
            return Ok(None);
        }
        let token = read_text(&dir.join("token"))?;
        let ca = read(&dir.join("ca.crt"))?;
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        Ok(Some(Credentials {
            server: format!("https://{host}:{port}"),
            ca: Some(ca),
            insecure: false,
            token: Some(token.trim().to_owned()),
            identity: None,
        }))
    }

    /// The current context's cluster and user of a kubeconfig (tokens and client
    /// certificates, inline or in files; exec plugins are not run).
    fn from_kubeconfig(file: &Path) -> anyhow::Result<Credentials> {
        let text = read(file)?;
        let config = wasmpod::read_documents(&text)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .into_iter()
            .next()
            .context("it is empty")?;
        let dir = file.parent().unwrap_or(Path::new("."));
        let context_name = config["current-context"]
            .as_str()
            .context("current-context: not set")?;
        let named = |list: &str, name: &str| -> anyhow::Result<Value> {
            config[list]
                .as_array()
                .and_then(|l| l.iter().find(|e| e["name"] == name))
                .map(|e| e[list.trim_end_matches('s')].clone())
                .with_context(|| format!("{list}: no entry named {name:?}"))
        };
        let context = named("contexts", context_name)?;
        let cluster_name = context["cluster"]
            .as_str()
            .context("context.cluster: not set")?;
        let cluster = named("clusters", cluster_name)?;
        let user = match context["user"].as_str() {
            Some(name) => named("users", name)?,
            None => Value::Null,
        };
        if !user["exec"].is_null() || !user["auth-provider"].is_null() {
            bail!(
                "users: the user of context {context_name:?} gets its credentials from a \
                 program, which the installer does not run: use a token or a client certificate"
            );
        }
        // Inline data (base64), or a file named relative to the kubeconfig.
        let data = |of: &Value, key: &str| -> anyhow::Result<Option<Vec<u8>>> {
            use base64::Engine as _;
            if let Some(text) = of[format!("{key}-data")].as_str() {
                return base64::engine::general_purpose::STANDARD
                    .decode(text.trim())
                    .map(Some)
                    .with_context(|| format!("{key}-data: not base64"));
            }
            match of[key].as_str() {
                Some(path) => read(&dir.join(path))
                    .map(Some)
                    .with_context(|| key.to_owned()),
                None => Ok(None),
            }
        };
        let token = match (user["token"].as_str(), user["tokenFile"].as_str()) {
            (Some(token), _) => Some(token.to_owned()),
            (None, Some(path)) => Some(
                read_text(&dir.join(path))
                    .context("tokenFile")?
                    .trim()
                    .to_owned(),
            ),
            (None, None) => None,
        };
        let identity = match (
            data(&user, "client-certificate")?,
            data(&user, "client-key")?,
        ) {
            (Some(mut cert), Some(key)) => {
                cert.push(b'\n');
                cert.extend(key);
                Some(cert)
            }
            _ => None,
        };
        Ok(Credentials {
            server: cluster["server"]
                .as_str()
                .context("cluster.server: not set")?
                .trim_end_matches('/')
                .to_owned(),
            ca: data(&cluster, "certificate-authority")?,
            insecure: cluster["insecure-skip-tls-verify"] == true,
            token,
            identity,
        })
    }
}

impl Cluster {
    fn new(credentials: Credentials, node: String) -> anyhow::Result<Cluster> {
        // reqwest is built without a TLS provider: ring's, as the rest of wasmpod uses.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("wasmpod-installer/", env!("CARGO_PKG_VERSION")))
            .tls_danger_accept_invalid_certs(credentials.insecure);
        if let Some(ca) = &credentials.ca {
            let roots = reqwest::Certificate::from_pem_bundle(ca)
                .context("the cluster's certificate authority: not PEM certificates")?;
            builder = builder.tls_certs_only(roots);
        }
        if let Some(identity) = &credentials.identity {
            builder = builder.identity(
                reqwest::Identity::from_pem(identity)
                    .context("the user's client certificate and key: not PEM")?,
            );
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let http = {
            let _entered = runtime.enter();
            builder.build().context("cannot make the API client")?
        };
        Ok(Cluster {
            http,
            server: credentials.server,
            token: credentials.token,
            node,
            runtime,
        })
    }

    /// One request: the answer's object, `None` for 404, an error naming the request and the
    /// server's message otherwise.
    fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, &Value)>,
    ) -> anyhow::Result<Option<Value>> {
        let url = format!("{}{path}", self.server);
        let mut request = self.http.request(method.clone(), &url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some((kind, body)) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, kind)
                .body(serde_json::to_vec(body)?);
        }
        let what = || format!("{method} {url}");
        self.runtime.block_on(async {
            let mut answer = request.send().await.with_context(what)?;
            let status = answer.status();
            let mut text = Vec::new();
            while let Some(chunk) = answer.chunk().await.with_context(what)? {
                if text.len() + chunk.len() > MAX_ANSWER {
                    bail!("{}: the answer is larger than {MAX_ANSWER} bytes", what());
                }
                text.extend_from_slice(&chunk);
            }
            if status == reqwest::StatusCode::NOT_FOUND {
                return Ok(None);
            }
            let value: Value = serde_json::from_slice(&text).unwrap_or(Value::Null);
            if !status.is_success() {
                let message = value["message"].as_str().map_or_else(
                    || String::from_utf8_lossy(&text).into_owned(),
                    str::to_owned,
                );
                bail!("{}: {status}: {message}", what());
            }
            Ok(Some(value))
        })
    }

    fn class_path() -> String {
        format!("/apis/node.k8s.io/v1/runtimeclasses/{CLASS}")
    }

    fn node_path(&self) -> String {
        format!("/api/v1/nodes/{}", self.node)
    }

    /// Reads the node and the class: a node the cluster does not have, or a class of another
    /// handler, refuses the install before anything changes.
    pub(super) fn plan(&self) -> anyhow::Result<Plan> {
        let node = self
            .call(reqwest::Method::GET, &self.node_path(), None)?
            .with_context(|| {
                format!(
                    "the cluster has no node {:?}: give the node's name with --node-name",
                    self.node
                )
            })?;
        let class = self.call(reqwest::Method::GET, &Self::class_path(), None)?;
        if let Some(class) = &class
            && class["handler"] != CLASS
        {
            bail!(
                "the cluster's RuntimeClass {CLASS:?} has the handler {}, not {CLASS:?}: not \
                 changed (delete it, or keep it and install without --kubeconfig)",
                class["handler"]
            );
        }
        Ok(Plan {
            class,
            labelled: node["metadata"]["labels"][LABEL] == "true",
        })
    }

    /// Makes the class the manifest's, then labels the node.
    pub(super) fn apply(&self, plan: Plan) -> anyhow::Result<()> {
        let wanted = runtime_class()?;
        match plan.class {
            None => {
                self.call(
                    reqwest::Method::POST,
                    "/apis/node.k8s.io/v1/runtimeclasses",
                    Some(("application/json", &wanted)),
                )?;
                say("runtimeclass", format!("{CLASS} created"));
            }
            Some(class) if same_class(&class, &wanted) => {
                say("runtimeclass", format!("{CLASS} is up to date"));
            }
            Some(mut class) => {
                for field in ["handler", "overhead", "scheduling"] {
                    class[field] = wanted[field].clone();
                }
                self.call(
                    reqwest::Method::PUT,
                    &Self::class_path(),
                    Some(("application/json", &class)),
                )?;
                say(
                    "runtimeclass",
                    format!("{CLASS} updated (its overhead and scheduling are the manifest's)"),
                );
            }
        }
        if plan.labelled {
            say("node", format!("{} is labelled {LABEL}=true", self.node));
        } else {
            self.label(json!("true"))?;
            say(
                "node",
                format!(
                    "{} labelled {LABEL}=true: pods of the RuntimeClass {CLASS} may run here",
                    self.node
                ),
            );
        }
        Ok(())
    }

    /// Takes the label off the node (no new pod of the class comes here); the class stays, for
    /// the other nodes.
    pub(super) fn unlabel(&self) -> anyhow::Result<()> {
        let node = self
            .call(reqwest::Method::GET, &self.node_path(), None)?
            .with_context(|| format!("the cluster has no node {:?}", self.node))?;
        if node["metadata"]["labels"][LABEL].is_null() {
            say("node", format!("{} has no label {LABEL}", self.node));
        } else {
            self.label(Value::Null)?;
            say(
                "node",
                format!(
                    "label {LABEL} taken off {}: no new pod of the RuntimeClass {CLASS} comes here",
                    self.node
                ),
            );
        }
        say(
            "runtimeclass",
            format!(
                "{CLASS} kept for the other nodes (`kubectl delete runtimeclass {CLASS}` once \
                 none runs it)"
            ),
        );
        Ok(())
    }

    fn label(&self, value: Value) -> anyhow::Result<()> {
        let patch = json!({"metadata": {"labels": {LABEL: value}}});
        self.call(
            reqwest::Method::PATCH,
            &self.node_path(),
            Some(("application/merge-patch+json", &patch)),
        )?;
        Ok(())
    }
}

/// The manifest's RuntimeClass.
pub(super) fn runtime_class() -> anyhow::Result<Value> {
    wasmpod::read_documents(MANIFESTS.as_bytes())
        .map_err(|e| anyhow::anyhow!("deploy/kubernetes/installer.yaml: {e}"))?
        .into_iter()
        .find(|d| d["kind"] == "RuntimeClass")
        .context("deploy/kubernetes/installer.yaml has no RuntimeClass")
}

/// Whether the cluster's class does what the manifest's does.
fn same_class(have: &Value, wanted: &Value) -> bool {
    ["handler", "overhead", "scheduling"]
        .iter()
        .all(|f| have[*f] == wanted[*f])
}
