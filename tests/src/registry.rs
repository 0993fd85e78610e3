//! A real registry for the tests: Debian's `docker-registry`, started on a free loopback port
//! with its own storage dir (and, when asked, an authentication that demands credentials), and
//! images pushed to it with the OCI client: wasm artifacts (`application/wasm`) and ordinary
//! images whose layer holds a `.wasm` named by their entry point.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

/// A running `docker-registry`; stopped when dropped.
#[derive(Debug)]
pub struct Registry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub host: String,
    /// Its storage dir.
    pub storage: PathBuf,
    /// The request lines it logged (`GET /v2/...`).
    log: Arc<Mutex<Vec<String>>>,
    config: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    /// Starts a registry; `auth`: it demands credentials (user `puller`, password `s3cret`), as
    /// a private registry does.
    pub fn start(auth: bool) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let storage = dir.path().join("storage");
        // htpasswd with one user, `puller` / `s3cret` (the bcrypt hash made once, offline).
        let auth = if auth {
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(
                &htpasswd,
                "puller:$2b$05$EgxfZp.Y810H8DzoJNIcb..D3wUPKHY2KIFFaPUjgxT2h56iabrwC\n",
            )
            .unwrap();
            format!(
                "auth:\n  htpasswd:\n    realm: wasmpod-test\n    path: {}\n",
                htpasswd.display()
            )
        } else {
            String::new()
        };
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n{auth}",
                storage.display()
            ),
        )
        .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let host = format!("127.0.0.1:{port}");
        let child = spawn(&config, &host, &log);
        Registry {
            child,
            host,
            storage,
            log,
            config,
            _dir: dir,
        }
    }

    /// Stops the registry (its storage stays): pulls from it fail as from an unreachable one.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the stopped registry again, on its port, with its storage.
    pub fn restart(&mut self) {
        self.stop();
        self.child = spawn(&self.config, &self.host, &self.log);
    }

    fn client(&self) -> Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Client::new(ClientConfig {
            protocol: ClientProtocol::Http,
            ..ClientConfig::default()
        })
    }

    fn reference(&self, name: &str) -> Reference {
        format!("{}/{name}", self.host).parse().unwrap()
    }

    /// Pushes `wasm` as a wasm OCI artifact at `name` (`repo:tag`); returns the manifest digest.
    pub async fn push_wasm(&self, name: &str, wasm: &[u8]) -> String {
        let layer = ImageLayer::new(wasm.to_vec(), "application/wasm".into(), None);
        let config = Config::new(
            br#"{"architecture":"wasm","os":"wasip2"}"#.to_vec(),
            "application/vnd.wasm.config.v0+json".into(),
            None,
        );
        self.push(name, vec![layer], config).await
    }

    /// Pushes a wasm artifact at `name` whose layers are `layers`; returns the manifest digest.
    pub async fn push_layers(&self, name: &str, layers: Vec<Layer<'_>>) -> String {
        let layers = layers
            .into_iter()
            .map(|(data, media_type, annotations)| {
                let annotations = annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                ImageLayer::new(data, media_type.into(), Some(annotations))
            })
            .collect();
        let config = Config::new(
            br#"{"architecture":"wasm","os":"wasip2"}"#.to_vec(),
            "application/vnd.wasm.config.v0+json".into(),
            None,
        );
        self.push(name, layers, config).await
    }

    /// Pushes an ordinary image at `name` whose one layer (tar+gzip) holds `files`, with the
    /// image config's `Entrypoint` and `Cmd`; returns the manifest digest.
    pub async fn push_image(
        &self,
        name: &str,
        files: &[(&str, &[u8])],
        entrypoint: &[&str],
        cmd: &[&str],
    ) -> String {
        let layer = tar_gz(files, 0o755);
        let config = serde_json::json!({
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": entrypoint, "Cmd": cmd},
            "rootfs": {"type": "layers", "diff_ids": []},
        });
        let layer = ImageLayer::new(
            layer,
            "application/vnd.oci.image.layer.v1.tar+gzip".into(),
            None,
        );
        let config = Config::new(
            serde_json::to_vec(&config).unwrap(),
            "application/vnd.oci.image.config.v1+json".into(),
            None,
        );
        self.push(name, vec![layer], config).await
    }

    /// Pushes an artifact as `flux push artifact` makes it at `name` (`repo:tag`): an empty
    /// Flux config, one tar+gzip content layer holding `files` (path, text), and the source's
    /// `revision` in the manifest's annotations. Returns the manifest digest.
    pub async fn push_flux(&self, name: &str, files: &[(&str, &str)], revision: &str) -> String {
        let files: Vec<(&str, &[u8])> = files.iter().map(|(p, t)| (*p, t.as_bytes())).collect();
        let layer = ImageLayer::new(
            tar_gz(&files, 0o644),
            "application/vnd.cncf.flux.content.v1.tar+gzip".into(),
            None,
        );
        let config = Config::new(
            b"{}".to_vec(),
            "application/vnd.cncf.flux.config.v1+json".into(),
            None,
        );
        let annotations = [
            ("org.opencontainers.image.revision", revision),
            (
                "org.opencontainers.image.source",
                "https://example.com/fleet.git",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        self.push_annotated(name, vec![layer], config, Some(annotations))
            .await
    }

    /// Stores a cosign signature of the manifest `digest` of `repository` (its payload and its
    /// base64 signature) where cosign does: a manifest at the tag `sha256-<hex>.sig` with one
    /// simple-signing layer per signature.
    pub async fn push_signature(
        &self,
        repository: &str,
        digest: &str,
        signed: &[(Vec<u8>, String)],
    ) {
        let layers = signed
            .iter()
            .map(|(payload, signature)| {
                ImageLayer::new(
                    payload.clone(),
                    "application/vnd.dev.cosign.simplesigning.v1+json".into(),
                    Some(
                        [(
                            "dev.cosignproject.cosign/signature".to_owned(),
                            signature.clone(),
                        )]
                        .into_iter()
                        .collect(),
                    ),
                )
            })
            .collect();
        let config = Config::new(
            br#"{"architecture":"","config":{},"os":"","rootfs":{"type":"layers","diff_ids":[]}}"#
                .to_vec(),
            "application/vnd.oci.image.config.v1+json".into(),
            None,
        );
        let tag = format!("{repository}:{}.sig", digest.replacen(':', "-", 1));
        self.push(&tag, layers, config).await;
    }

    /// Signs the manifest `digest` of `repository` with `signer`, as `cosign sign --key` does.
    pub async fn sign(&self, signer: &crate::cosign::Signer, repository: &str, digest: &str) {
        let signed = signer.sign(&format!("{}/{repository}", self.host), digest);
        self.push_signature(repository, digest, &[signed]).await;
    }

    async fn push(&self, name: &str, layers: Vec<ImageLayer>, config: Config) -> String {
        self.push_annotated(name, layers, config, None).await
    }

    async fn push_annotated(
        &self,
        name: &str,
        layers: Vec<ImageLayer>,
        config: Config,
        annotations: Option<std::collections::BTreeMap<String, String>>,
    ) -> String {
        let manifest = OciImageManifest::build(&layers, &config, annotations);
        let auth = RegistryAuth::Basic("puller".into(), "s3cret".into());
        let response = self
            .client()
            .push(
                &self.reference(name),
                &layers,
                config,
                &auth,
                Some(manifest),
            )
            .await
            .unwrap_or_else(|e| panic!("push {name}: {e}"));
        // `.../manifests/sha256:...`
        response
            .manifest_url
            .rsplit_once('/')
            .map(|(_, d)| d.to_owned())
            .unwrap()
    }

    /// How many times the registry served a blob (`GET .../blobs/DIGEST`).
    pub fn blob_gets(&self, digest: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("\"GET /v2/") && l.contains(&format!("/blobs/{digest}")))
            .count()
    }

    /// The path of a blob in the registry's storage (to corrupt it).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// `skopeo copy` from one name of this registry to another (a new tag of an image).
    pub fn copy(&self, from: &str, to: &str) {
        let out = Command::new("skopeo")
            .args(["copy", "--src-tls-verify=false", "--dest-tls-verify=false"])
            .arg("--src-creds=puller:s3cret")
            .arg("--dest-creds=puller:s3cret")
            .arg(format!("docker://{}/{from}", self.host))
            .arg(format!("docker://{}/{to}", self.host))
            .output()
            .expect("skopeo runs (Debian's skopeo package)");
        assert!(
            out.status.success(),
            "skopeo copy: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The digest of a wasm artifact's or an image's only layer.
    pub fn layer_digest(data: &[u8]) -> String {
        use sha2::Digest as _;
        format!("sha256:{:x}", sha2::Sha256::digest(data))
    }
}

/// Runs `docker-registry` with `config` until it listens on `host`, its output into `log`.
fn spawn(config: &std::path::Path, host: &str, log: &Arc<Mutex<Vec<String>>>) -> Child {
    let mut child = Command::new("docker-registry")
        .arg("serve")
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("docker-registry runs (Debian's docker-registry package)");
    for out in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let log = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                log.lock().unwrap().push(line);
            }
        });
    }
    let start = Instant::now();
    while std::net::TcpStream::connect(host).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the registry did not start: {:?}",
            log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// A tar+gzip layer of `files` (path, bytes), each with the permissions `mode`.
pub fn tar_gz(files: &[(&str, &[u8])], mode: u32) -> Vec<u8> {
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    for (path, data) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_cksum();
        tar.append_data(&mut header, path, *data).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap()
}

/// A layer to push: its data, media type and annotations.
pub type Layer<'a> = (Vec<u8>, &'a str, &'a [(&'a str, &'a str)]);

/// A pod's `.dockerconfigjson` Secret for `host` with these credentials, as `kubectl create
/// secret docker-registry` makes it.
pub fn pull_secret(name: &str, host: &str, user: &str, password: &str) -> String {
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let config = serde_json::json!({"auths": {host: {"username": user, "password": password, "auth": auth}}});
    format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata: {{ name: {name} }}\ntype: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '{}'\n",
        config
    )
}
