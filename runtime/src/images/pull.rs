//! Pulling an image: the wasm OCI artifact (an `application/wasm` layer, as `wkg`, `oras` and
//! `docker buildx` with the wasm platform make them), or an ordinary image whose layers hold
//! the `.wasm` its entry point names. Credentials come from the pod's `imagePullSecrets`
//! (`.dockerconfigjson`), then the node's docker-style config file; plain HTTP only for the
//! registries the node calls insecure. The registry's side is [`super::registry`].

use oci_client::Reference;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::Ordering::Relaxed;

use super::registry::Repository;
use super::signature::VerifyKey;
use super::{Artifact, ArtifactLayer, Counters, Fetched, PullError};

/// The most bytes of one layer or `.wasm` wasmpod takes from a registry.
pub(crate) const MAX_BLOB: u64 = 512 << 20;
/// The most bytes of an image config.
const MAX_CONFIG: u64 = 4 << 20;
/// The most bytes of an image config's `Entrypoint` and `Cmd` together.
const MAX_IMAGE_ARGV: usize = 128 << 10;
/// How long a registry has to accept a connection, and to send anything at all while a pull
/// reads from it (the kubelet's image pull progress deadline is a minute too).
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// A layer of machine code made by `wasmpod compile`, for the target triple and address-space
/// mode its annotations name.
const PRECOMPILED_LAYER: &str = "application/vnd.wasmpod.precompiled.v1";
/// The annotations of a precompiled layer: its target triple, and `reserved` or `compact`.
const TARGET_ANNOTATION: &str = "dev.wasmpod.target";
const SPACE_ANNOTATION: &str = "dev.wasmpod.address-space";

const WASM_LAYERS: &[&str] = &[
    "application/wasm",
    "application/vnd.wasm.content.layer.v1+wasm",
    "application/vnd.module.wasm.content.layer.v1+wasm",
];

pub(crate) struct Puller {
    insecure: Vec<String>,
    /// Registries whose precompiled layers the node runs.
    precompiled: Vec<String>,
    /// The node's docker-style config file (`{"auths": {...}}`), if any.
    auth_file: Option<PathBuf>,
    /// The HTTP client and the node's credentials, made at the first pull: a node that runs
    /// only `.wasm` files loads no CA certificates and reads no credentials.
    made: OnceLock<Result<Made, String>>,
}

struct Made {
    http: reqwest::Client,
    node_auth: Option<Value>,
}

impl Puller {
    pub(crate) fn new(
        insecure: &[String],
        precompiled: &[String],
        auth_file: Option<&Path>,
    ) -> Puller {
        Puller {
            insecure: insecure.to_vec(),
            precompiled: precompiled.to_vec(),
            auth_file: auth_file.map(Path::to_owned),
            made: OnceLock::new(),
        }
    }

    fn made(&self) -> Result<&Made, String> {
        self.made
            .get_or_init(|| {
                let node_auth = match &self.auth_file {
                    Some(file) => {
                        let text = std::fs::read(file)
                            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
                        Some(
                            serde_json::from_slice(&text)
                                .map_err(|e| format!("{}: {e}", file.display()))?,
                        )
                    }
                    None => None,
                };
                // reqwest is built without a default TLS provider: the process's is ring's (as
                // the node agent's); installing it again is a no-op.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let http = reqwest::Client::builder()
                    .connect_timeout(CONNECT_TIMEOUT)
                    .read_timeout(READ_TIMEOUT)
                    .user_agent(concat!("wasmpod/", env!("CARGO_PKG_VERSION")))
                    .build()
                    .map_err(|e| format!("cannot make the registry client: {e}"))?;
                Ok(Made { http, node_auth })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// `reference`'s repository, with the credentials for its registry: the first pull secret
    /// that has them, then the node's.
    fn repository(
        &self,
        reference: &Reference,
        secrets: &[Value],
    ) -> Result<Repository<'_>, String> {
        let made = self.made()?;
        let registry = reference.resolve_registry();
        let basic = secrets
            .iter()
            .chain(made.node_auth.as_ref())
            .find_map(|config| credentials(config, registry));
        let insecure = self.insecure.iter().any(|r| r == registry);
        Ok(Repository::new(&made.http, reference, insecure, basic))
    }

    /// Whether the node runs machine code from `reference`'s registry.
    pub(crate) fn trusts(&self, reference: &Reference) -> bool {
        let registry = reference.resolve_registry();
        self.precompiled.iter().any(|r| r == registry)
    }

    /// The manifest digest `reference` resolves to now (for `Always`: is what we have current?).
    pub(crate) async fn resolve(
        &self,
        reference: &Reference,
        secrets: &[Value],
    ) -> Result<String, String> {
        let (_, digest, _) = self
            .repository(reference, secrets)?
            .manifest(reference)
            .await?;
        Ok(digest)
    }

    /// Pulls the artifact `reference` whole, its layers together at most `limit` bytes; when
    /// `key` is given, only once its signature by that key is checked. `None` when its manifest
    /// is still `unless`.
    pub(crate) async fn artifact(
        &self,
        reference: &Reference,
        key: Option<&VerifyKey>,
        limit: u64,
        unless: Option<&str>,
    ) -> Result<Option<Artifact>, PullError> {
        let mut repository = self.repository(reference, &[]).map_err(PullError::Failed)?;
        let (manifest, digest, signed) = repository
            .manifest(reference)
            .await
            .map_err(PullError::Failed)?;
        if unless == Some(digest.as_str()) {
            return Ok(None);
        }
        if let Some(key) = key {
            repository
                .check_signed(&signed, key)
                .await
                .map_err(PullError::Unsigned)?;
        }
        let total = manifest.layers.iter().fold(0u64, |n, l| {
            n.saturating_add(u64::try_from(l.size).unwrap_or(u64::MAX))
        });
        if total > limit {
            return Err(PullError::Refused(format!(
                "the artifact's layers hold {total} bytes: at most {limit} are taken"
            )));
        }
        let mut layers = Vec::with_capacity(manifest.layers.len());
        for layer in &manifest.layers {
            let data = repository
                .blob(layer, limit, &Counters::default())
                .await
                .map_err(PullError::Failed)?;
            layers.push(ArtifactLayer {
                media_type: layer.media_type.clone(),
                digest: layer.digest.clone(),
                data,
            });
        }
        Ok(Some(Artifact {
            digest,
            config_media_type: manifest.config.media_type.clone(),
            annotations: manifest.annotations.clone().unwrap_or_default(),
            layers,
        }))
    }

    /// Pulls the image; `command` is the container's (it names the `.wasm` of an ordinary
    /// image before the image config's `Entrypoint` does).
    pub(crate) async fn fetch(
        &self,
        reference: &Reference,
        secrets: &[Value],
        command: Option<&str>,
        counters: &Counters,
        key: Option<&VerifyKey>,
    ) -> Result<Fetched, PullError> {
        let mut repository = self
            .repository(reference, secrets)
            .map_err(PullError::Failed)?;
        let (manifest, manifest_digest, signed) = repository
            .manifest(reference)
            .await
            .map_err(PullError::Failed)?;
        if let Some(key) = key {
            repository
                .check_signed(&signed, key)
                .await
                .map_err(PullError::Unsigned)?;
        }
        self.fetch_layers(
            &mut repository,
            reference,
            manifest,
            manifest_digest,
            command,
            counters,
        )
        .await
        .map_err(PullError::Failed)
    }

    async fn fetch_layers(
        &self,
        repository: &mut Repository<'_>,
        reference: &Reference,
        manifest: oci_client::manifest::OciImageManifest,
        manifest_digest: String,
        command: Option<&str>,
        counters: &Counters,
    ) -> Result<Fetched, String> {
        let trusted = self.trusts(reference);
        if let Some(layer) = manifest
            .layers
            .iter()
            .find(|l| trusted && for_this_node(l))
            .or_else(|| {
                manifest
                    .layers
                    .iter()
                    .find(|l| WASM_LAYERS.contains(&l.media_type.as_str()))
            })
        {
            counters.layers.store(1, Relaxed);
            let wasm = repository.blob(layer, MAX_BLOB, counters).await?;
            return Ok(Fetched {
                manifest_digest,
                wasm,
                wasm_digest: Some(layer.digest.clone()),
                entrypoint: None,
                cmd: None,
                precompiled: layer.media_type == PRECOMPILED_LAYER,
            });
        }
        if manifest
            .layers
            .iter()
            .any(|l| l.media_type == PRECOMPILED_LAYER)
        {
            return Err(if trusted {
                format!(
                    "the image has no portable .wasm layer and no precompiled one for this node \
                     ({} with {} address space)",
                    target_lexicon::HOST,
                    crate::AddressSpace::of_process().name()
                )
            } else {
                format!(
                    "the image has only precompiled layers, and this node runs machine code only \
                     from the registries it is told to trust (--precompiled-registry {})",
                    reference.resolve_registry()
                )
            });
        }
        // An ordinary image: the `.wasm` its entry point names, from the last layer that has it.
        let config = repository
            .blob(&manifest.config, MAX_CONFIG, &Counters::default())
            .await?;
        let config: Value = serde_json::from_slice(&config).unwrap_or_default();
        let list = |key: &str| -> Option<Vec<String>> {
            let v = config.pointer(&format!("/config/{key}"))?.as_array()?;
            Some(
                v.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect(),
            )
        };
        let (entrypoint, cmd) = (list("Entrypoint"), list("Cmd"));
        // They become the container's argv, and its status shows them: bounded as a pod's own
        // command and args are.
        let size: usize = [&entrypoint, &cmd]
            .into_iter()
            .flatten()
            .flatten()
            .map(|a| a.len() + 1)
            .sum();
        if size > MAX_IMAGE_ARGV {
            return Err(format!(
                "the image config's Entrypoint and Cmd hold {size} bytes: at most \
                 {MAX_IMAGE_ARGV} are taken"
            ));
        }
        let Some(program) = command
            .map(str::to_owned)
            .or_else(|| entrypoint.as_ref().and_then(|e| e.first().cloned()))
            .or_else(|| cmd.as_ref().and_then(|c| c.first().cloned()))
        else {
            return Err(
                "the image has no wasm layer and names no program (no Entrypoint or Cmd): give \
                 the container a command naming its .wasm"
                    .into(),
            );
        };
        let wanted = program.trim_start_matches("./").trim_start_matches('/');
        let mut found = None;
        counters.layers.store(manifest.layers.len(), Relaxed);
        for layer in &manifest.layers {
            let gzip = match layer.media_type.as_str() {
                "application/vnd.oci.image.layer.v1.tar+gzip"
                | "application/vnd.docker.image.rootfs.diff.tar.gzip" => true,
                "application/vnd.oci.image.layer.v1.tar" => false,
                other => return Err(format!("unsupported layer media type {other}")),
            };
            let bytes = repository.blob(layer, MAX_BLOB, counters).await?;
            if let Some(wasm) = file_in_layer(&bytes, gzip, wanted)? {
                found = Some(wasm);
            }
        }
        let wasm = found.ok_or_else(|| format!("the image has no file {program:?}"))?;
        Ok(Fetched {
            manifest_digest,
            wasm,
            wasm_digest: None,
            entrypoint,
            cmd,
            precompiled: false,
        })
    }
}

/// Whether `layer` is machine code for this node: its target and address-space mode.
fn for_this_node(layer: &oci_client::manifest::OciDescriptor) -> bool {
    let annotation = |key: &str| {
        layer
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    };
    layer.media_type == PRECOMPILED_LAYER
        && annotation(TARGET_ANNOTATION).is_some_and(|t| t == target_lexicon::HOST.to_string())
        && annotation(SPACE_ANNOTATION) == Some(crate::AddressSpace::of_process().name())
}

/// The user and password a docker-style config holds for `registry`.
fn credentials(config: &Value, registry: &str) -> Option<(String, String)> {
    use base64::Engine as _;
    let auths = config.get("auths")?.as_object()?;
    let host_of = |key: &str| {
        let key = key
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        key.split('/').next().unwrap_or(key).to_owned()
    };
    let wanted = |host: &str| {
        host == registry
            || (registry == "index.docker.io" || registry == "docker.io")
                && (host == "index.docker.io"
                    || host == "docker.io"
                    || host == "registry-1.docker.io")
    };
    let entry = auths.iter().find(|(k, _)| wanted(&host_of(k)))?.1;
    if let (Some(u), Some(p)) = (
        entry.get("username").and_then(Value::as_str),
        entry.get("password").and_then(Value::as_str),
    ) {
        return Some((u.to_owned(), p.to_owned()));
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(entry.get("auth")?.as_str()?)
        .ok()?;
    let (u, p) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    Some((u.to_owned(), p.to_owned()))
}

/// The file at `path` in a layer's tar, at most [`MAX_BLOB`] bytes.
fn file_in_layer(bytes: &[u8], gzip: bool, path: &str) -> Result<Option<Vec<u8>>, String> {
    use std::io::Read;
    // A layer is read at most to 4 GiB unpacked: a compressed bomb costs bounded time.
    let reader: Box<dyn Read> = if gzip {
        Box::new(flate2::read::GzDecoder::new(bytes).take(8 * MAX_BLOB))
    } else {
        Box::new(bytes)
    };
    let mut archive = tar::Archive::new(reader);
    let mut found = None;
    for entry in archive
        .entries()
        .map_err(|e| format!("a layer is not a tar: {e}"))?
    {
        let mut entry = entry.map_err(|e| format!("a layer is not a tar: {e}"))?;
        let name = entry
            .path()
            .map(|p| {
                p.to_string_lossy()
                    .trim_start_matches("./")
                    .trim_start_matches('/')
                    .to_owned()
            })
            .unwrap_or_default();
        if name == path && entry.header().entry_type().is_file() {
            if entry.size() > MAX_BLOB {
                return Err(format!("{path} is larger than 512 MiB"));
            }
            let mut data = Vec::new();
            entry
                .by_ref()
                .take(MAX_BLOB)
                .read_to_end(&mut data)
                .map_err(|e| format!("cannot read {path} from a layer: {e}"))?;
            found = Some(data);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The node's registry config is read at the first pull, and a broken one fails the pull
    /// with the file's name.
    #[tokio::test]
    async fn the_registry_config_is_read_at_the_first_pull() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.json");
        std::fs::write(&file, "{ not json").unwrap();
        let puller = Puller::new(&[], &[], Some(&file));
        assert!(puller.made.get().is_none(), "made before any pull");
        let reference: Reference = "127.0.0.1:1/app:1.0".parse().unwrap();
        let error = puller.resolve(&reference, &[]).await.unwrap_err();
        assert!(
            error.starts_with(&format!("{}: ", file.display())),
            "{error}"
        );
    }

    #[test]
    fn credentials_come_from_docker_configs() {
        let config = serde_json::json!({"auths": {
            "127.0.0.1:5000": {"auth": "dXNlcjpwYXNz"},
            "https://index.docker.io/v1/": {"username": "hub", "password": "pw"},
        }});
        assert_eq!(
            credentials(&config, "127.0.0.1:5000"),
            Some(("user".into(), "pass".into()))
        );
        assert_eq!(
            credentials(&config, "docker.io"),
            Some(("hub".into(), "pw".into()))
        );
        assert_eq!(credentials(&config, "ghcr.io"), None);
    }
}
