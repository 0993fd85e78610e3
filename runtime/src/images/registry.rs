//! The OCI distribution API as a pull reads it: the registry's token challenge, the manifest
//! (an index resolved to this node's platform) and blobs. A registry is hostile input like a
//! pod spec: every body, error bodies and token answers included, is read to a bound and never
//! past it, and every manifest and blob is checked against the digest that named it.

use std::sync::atomic::Ordering::Relaxed;

use oci_client::Reference;
use oci_client::manifest::{ImageIndexEntry, OciDescriptor, OciImageManifest, OciManifest};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_LENGTH, WWW_AUTHENTICATE};
use reqwest::{Response, StatusCode};
use sha2::{Digest as _, Sha256};

use super::Counters;
use super::signature::{self, VerifyKey};

/// The most bytes of a manifest or index (containerd's limit too).
const MAX_MANIFEST: u64 = 4 << 20;
/// The most bytes of a token server's answer.
const MAX_TOKEN: u64 = 64 << 10;
/// The most bytes of an error body read, and shown in the pull's message.
const MAX_ERROR: u64 = 4 << 10;
const SHOWN_ERROR: usize = 512;

const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, \
     application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json, \
     application/vnd.docker.distribution.manifest.list.v2+json";

/// One repository of one registry, with the credentials a pull has for it.
pub(super) struct Repository<'a> {
    http: &'a reqwest::Client,
    /// `scheme://registry/v2/repository`.
    base: String,
    repository: String,
    basic: Option<(String, String)>,
    /// What the registry accepted (after its challenge), sent with every later request.
    authorization: Option<String>,
}

impl<'a> Repository<'a> {
    pub(super) fn new(
        http: &'a reqwest::Client,
        reference: &Reference,
        insecure: bool,
        basic: Option<(String, String)>,
    ) -> Repository<'a> {
        let scheme = if insecure { "http" } else { "https" };
        Repository {
            http,
            base: format!(
                "{scheme}://{}/v2/{}",
                reference.resolve_registry(),
                reference.repository()
            ),
            repository: reference.repository().to_owned(),
            basic,
            authorization: None,
        }
    }

    /// The image manifest `reference` names, its digest, and the digest `reference` resolved
    /// to (what a signature signs: an index's, when it names one): an index is resolved to its
    /// wasm entry, else this node's platform.
    pub(super) async fn manifest(
        &mut self,
        reference: &Reference,
    ) -> Result<(OciImageManifest, String, String), String> {
        let name = reference
            .digest()
            .or(reference.tag())
            .unwrap_or("latest")
            .to_owned();
        let (manifest, digest) = self.manifest_named(&name, reference.digest()).await?;
        match manifest {
            OciManifest::Image(image) => Ok((image, digest.clone(), digest)),
            OciManifest::ImageIndex(index) => {
                let entry = platform(&index.manifests).ok_or_else(|| {
                    format!(
                        "the image index {digest} has no manifest for wasm or for {}/{}",
                        std::env::consts::OS,
                        go_arch()
                    )
                })?;
                let entry = entry.digest.clone();
                match self.manifest_named(&entry, Some(&entry)).await? {
                    (OciManifest::Image(image), entry) => Ok((image, entry, digest)),
                    (OciManifest::ImageIndex(_), _) => Err(format!(
                        "the image index's entry {entry} is an index itself"
                    )),
                }
            }
        }
    }

    async fn manifest_named(
        &mut self,
        name: &str,
        digest: Option<&str>,
    ) -> Result<(OciManifest, String), String> {
        let url = format!("{}/manifests/{name}", self.base);
        let response = self.get(&url, Some(MANIFEST_TYPES)).await?;
        self.read_manifest(response, &url, name, digest).await
    }

    /// Checks that the manifest `digest` is signed with `key` (cosign's signatures, stored
    /// under the tag `sha256-<hex>.sig` of this repository): `Err` says why not, as a person
    /// reads it.
    pub(super) async fn check_signed(
        &mut self,
        digest: &str,
        key: &VerifyKey,
    ) -> Result<(), String> {
        let tag = signature::signature_tag(digest);
        let url = format!("{}/manifests/{tag}", self.base);
        let Some(response) = self.get_optional(&url, Some(MANIFEST_TYPES)).await? else {
            return Err(format!(
                "{digest} is not signed: the repository {} has no cosign signature tag {tag}",
                self.repository
            ));
        };
        let OciManifest::Image(signatures) =
            self.read_manifest(response, &url, &tag, None).await?.0
        else {
            return Err(format!(
                "the signature tag {tag} names an index, not cosign's signatures"
            ));
        };
        let mut reasons = Vec::new();
        for layer in signatures
            .layers
            .iter()
            .filter(|l| l.media_type == signature::SIMPLE_SIGNING)
            .take(signature::MAX_SIGNATURES)
        {
            let Some(sig) = layer
                .annotations
                .as_ref()
                .and_then(|a| a.get(signature::SIGNATURE_ANNOTATION))
            else {
                reasons.push("a layer without a signature".to_owned());
                continue;
            };
            let payload = self
                .blob(layer, signature::MAX_PAYLOAD, &Counters::default())
                .await?;
            match signature::check_layer(key, digest, &payload, sig) {
                Ok(()) => return Ok(()),
                Err(why) => reasons.push(why),
            }
        }
        if reasons.is_empty() {
            reasons.push("no signature layers".to_owned());
        }
        reasons.dedup();
        // The message goes into events and a condition: a few reasons, and how many more.
        const SHOWN: usize = 3;
        if reasons.len() > SHOWN {
            let more = reasons.len() - SHOWN;
            reasons.truncate(SHOWN);
            reasons.push(format!("{more} more"));
        }
        Err(format!(
            "{digest} is not signed with the key {}: its signature tag {tag} has {}",
            key.id(),
            reasons.join("; ")
        ))
    }

    async fn read_manifest(
        &mut self,
        response: Response,
        url: &str,
        name: &str,
        digest: Option<&str>,
    ) -> Result<(OciManifest, String), String> {
        let body = read(response, MAX_MANIFEST, url, |_| {}).await?;
        let actual = sha256(&body);
        if let Some(want) = digest
            && want != actual
        {
            return Err(format!(
                "the manifest's digest is {actual}, not {want}: refused"
            ));
        }
        let manifest: OciManifest = serde_json::from_slice(&body)
            .map_err(|e| format!("the manifest {name} is not an OCI manifest: {e}"))?;
        let schema = match &manifest {
            OciManifest::Image(m) => m.schema_version,
            OciManifest::ImageIndex(i) => i.schema_version,
        };
        if schema != 2 {
            return Err(format!(
                "the manifest {name} has schema version {schema}: only 2 is read"
            ));
        }
        Ok((manifest, actual))
    }

    /// The blob `descriptor` names: at most `limit` bytes and no more than it declares, with
    /// the digest it declares.
    pub(super) async fn blob(
        &mut self,
        descriptor: &OciDescriptor,
        limit: u64,
        counters: &Counters,
    ) -> Result<Vec<u8>, String> {
        let declared = u64::try_from(descriptor.size).unwrap_or(u64::MAX);
        if declared > limit {
            return Err(format!(
                "blob {} is larger than {} MiB",
                descriptor.digest,
                limit >> 20
            ));
        }
        if !descriptor.digest.starts_with("sha256:") {
            return Err(format!(
                "blob {}: only sha256 digests are read",
                descriptor.digest
            ));
        }
        let url = format!("{}/blobs/{}", self.base, descriptor.digest);
        let response = self.get(&url, None).await?;
        let data = read(response, declared, &url, |n| {
            counters.bytes.fetch_add(n as u64, Relaxed);
        })
        .await?;
        let actual = sha256(&data);
        if actual != descriptor.digest {
            return Err(format!(
                "blob {} arrived with digest {actual}: refused",
                descriptor.digest
            ));
        }
        counters.layers_done.fetch_add(1, Relaxed);
        Ok(data)
    }

    /// A successful answer to `GET url`, after answering the registry's challenge once.
    async fn get(&mut self, url: &str, accept: Option<&str>) -> Result<Response, String> {
        let response = self.send(url, accept).await?;
        if !response.status().is_success() {
            return Err(failure(response, url).await);
        }
        Ok(response)
    }

    /// As [`Repository::get`], with `None` for 404 Not Found.
    async fn get_optional(
        &mut self,
        url: &str,
        accept: Option<&str>,
    ) -> Result<Option<Response>, String> {
        let response = self.send(url, accept).await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !response.status().is_success() {
            return Err(failure(response, url).await);
        }
        Ok(Some(response))
    }

    /// The answer to `GET url`, whatever its status, after answering the registry's challenge
    /// once.
    async fn send(&mut self, url: &str, accept: Option<&str>) -> Result<Response, String> {
        let mut answered = false;
        loop {
            let mut request = self.http.get(url);
            if let Some(accept) = accept {
                request = request.header(ACCEPT, accept);
            }
            if let Some(authorization) = &self.authorization {
                request = request.header(AUTHORIZATION, authorization);
            }
            let response = request.send().await.map_err(|e| failed(url, &e))?;
            if response.status() == StatusCode::UNAUTHORIZED && !answered {
                answered = true;
                self.authorization = Some(self.answer(&response).await?);
                continue;
            }
            return Ok(response);
        }
    }

    /// The `Authorization` a registry's `WWW-Authenticate` challenge asks for: a token from
    /// its token server (with the pull's credentials, if any), or the credentials themselves.
    async fn answer(&self, response: &Response) -> Result<String, String> {
        use base64::Engine as _;
        let basic = || {
            self.basic.as_ref().map(|(user, password)| {
                let pair =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                format!("Basic {pair}")
            })
        };
        let challenge = response
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        let Some((realm, service)) = bearer(challenge) else {
            return basic().ok_or_else(|| {
                format!(
                    "the registry refuses {} without credentials, and the pod and the node \
                     have none for it",
                    response.url()
                )
            });
        };
        let mut request = self
            .http
            .get(&realm)
            .query(&[("scope", format!("repository:{}:pull", self.repository))]);
        if let Some(service) = service {
            request = request.query(&[("service", service)]);
        }
        if let Some(basic) = basic() {
            request = request.header(AUTHORIZATION, basic);
        }
        let response = request.send().await.map_err(|e| failed(&realm, &e))?;
        if !response.status().is_success() {
            return Err(failure(response, &realm).await);
        }
        let body = read(response, MAX_TOKEN, &realm, |_| {}).await?;
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let token: Token = serde_json::from_slice(&body)
            .map_err(|e| format!("the token server {realm} answered no token: {e}"))?;
        token
            .token
            .or(token.access_token)
            .map(|t| format!("Bearer {t}"))
            .ok_or_else(|| format!("the token server {realm} answered no token"))
    }
}

/// The realm and service of a `Bearer` challenge.
fn bearer(challenge: &str) -> Option<(String, Option<String>)> {
    http_auth::ChallengeParser::new(challenge)
        .filter_map(Result::ok)
        .find(|c| c.scheme.eq_ignore_ascii_case("bearer"))
        .and_then(|c| {
            let param = |name: &str| {
                c.params
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.to_unescaped())
            };
            Some((param("realm")?, param("service")))
        })
}

/// At most `limit` bytes of a body (refused, not cut, past it); `arrived` is told each chunk.
async fn read(
    mut response: Response,
    limit: u64,
    url: &str,
    arrived: impl Fn(usize),
) -> Result<Vec<u8>, String> {
    let too_large = || format!("{url} sent more than {limit} bytes: refused");
    let declared = response
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let mut data = Vec::with_capacity(declared.unwrap_or(0) as usize);
    while let Some(chunk) = response.chunk().await.map_err(|e| failed(url, &e))? {
        if data.len() as u64 + chunk.len() as u64 > limit {
            return Err(too_large());
        }
        data.extend_from_slice(&chunk);
        arrived(chunk.len());
    }
    Ok(data)
}

/// What an unsuccessful answer says: its status and the start of its body.
async fn failure(response: Response, url: &str) -> String {
    let status = response.status();
    let mut said = String::new();
    let mut response = response;
    let mut read = 0u64;
    while read < MAX_ERROR
        && let Ok(Some(chunk)) = response.chunk().await
    {
        read += chunk.len() as u64;
        said.push_str(&String::from_utf8_lossy(&chunk));
    }
    let said = said.trim();
    let cut = said.floor_char_boundary(SHOWN_ERROR);
    let more = if cut < said.len() { "…" } else { "" };
    format!("GET {url}: {status}: {}{more}", &said[..cut])
}

fn failed(url: &str, e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut message = format!("GET {url}: {e}");
    let mut source = e.source();
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    message
}

fn sha256(data: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(data))
}

/// An image index's entry for wasm (`wasm` architecture or a `wasi` OS), else the node's own
/// platform.
fn platform(entries: &[ImageIndexEntry]) -> Option<&ImageIndexEntry> {
    let is = |e: &ImageIndexEntry, f: &dyn Fn(&str, &str) -> bool| {
        e.platform
            .as_ref()
            .is_some_and(|p| f(&p.os.to_string(), &p.architecture.to_string()))
    };
    entries
        .iter()
        .find(|e| is(e, &|os, arch| arch == "wasm" || os.starts_with("wasi")))
        .or_else(|| {
            entries.iter().find(|e| {
                is(e, &|os, arch| {
                    os == std::env::consts::OS && arch == go_arch()
                })
            })
        })
}

/// This machine's architecture as image indexes name it (Go's names).
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "riscv64" => "riscv64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_are_read() {
        assert_eq!(
            bearer(r#"Bearer realm="https://auth.example/token",service="registry.example""#),
            Some((
                "https://auth.example/token".into(),
                Some("registry.example".into())
            ))
        );
        assert_eq!(bearer(r#"Basic realm="registry""#), None);
        assert_eq!(bearer("Bearer service=x"), None);
    }
}
