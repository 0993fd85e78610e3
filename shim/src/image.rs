//! The guest from the container's image in containerd's content store, for a container whose
//! root filesystem has no `.wasm`: a wasm OCI artifact (its layer is the module or component
//! itself, which containerd does not unpack), or an image containerd left unpacked (from 2.1
//! the CRI pulls through the transfer service, which does not unpack `wasi/wasm` images).
//!
//! Read through containerd's API, as the shim's caller: the container's record names its image,
//! the image its manifest (or an index of them, of which the `wasi/wasm` one is taken, else this
//! node's platform), the manifest its layers. A wasm layer (`application/wasm`,
//! `application/vnd.wasm.content.layer.v1+wasm`, ...) is the guest; otherwise the entry point is
//! looked for in the filesystem layers, the top one first.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use containerd_client::services::v1::{GetContainerRequest, GetImageRequest, ReadContentRequest};
use containerd_client::with_namespace;
use serde::Deserialize;
use tonic::Request;

use crate::bundle::MAX_WASM;

/// Layers whose blob is the guest itself (the CNCF wasm artifact's, and the older ones tools
/// still push).
const WASM_LAYERS: [&str; 4] = [
    "application/wasm",
    "application/vnd.wasm.content.layer.v1+wasm",
    "application/vnd.module.wasm.content.layer.v1+wasm",
    "application/vnd.bytecodealliance.wasm.component.layer.v0+wasm",
];

/// What is set aside for a blob before its bytes arrive: its descriptor's size (which the
/// image's author wrote) reserves no more.
const RESERVE: usize = 1 << 20;

/// A manifest or index is JSON of a few KiB; more is not one.
const MAX_MANIFEST: i64 = 4 << 20;

/// containerd, as the shim reaches it.
#[derive(Clone, Debug)]
pub(crate) struct Images {
    /// containerd's gRPC socket.
    pub(crate) address: String,
    /// The namespace the shim serves.
    pub(crate) namespace: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    media_type: String,
    digest: String,
    size: i64,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Deserialize, PartialEq)]
struct Platform {
    os: String,
    architecture: String,
}

/// A manifest or an index: whichever fields the document has.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    #[serde(default)]
    media_type: String,
    #[serde(default)]
    manifests: Vec<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

impl Images {
    /// The `.wasm` of container `id`, at one of `candidates` (absolute paths) in its image's
    /// filesystem layers or as its wasm layer. Blocking; call it in the shim's runtime context.
    pub(crate) fn wasm(
        &self,
        id: &str,
        candidates: &[PathBuf],
    ) -> anyhow::Result<(PathBuf, Vec<u8>)> {
        tokio::runtime::Handle::current().block_on(self.find(id, candidates))
    }

    async fn find(&self, id: &str, candidates: &[PathBuf]) -> anyhow::Result<(PathBuf, Vec<u8>)> {
        let client = containerd_client::Client::from_path(&self.address)
            .await
            .with_context(|| format!("cannot reach containerd at {}", self.address))?;
        let ns = self.namespace.as_str();
        let container = client
            .containers()
            .get(with_namespace!(
                GetContainerRequest { id: id.to_owned() },
                ns
            ))
            .await
            .with_context(|| format!("containerd has no container {id}"))?
            .into_inner()
            .container
            .context("containerd's answer has no container")?;
        if container.image.is_empty() {
            bail!("the container has no image to look for the .wasm in");
        }
        let image = client
            .images()
            .get(with_namespace!(
                GetImageRequest {
                    name: container.image.clone()
                },
                ns
            ))
            .await
            .with_context(|| format!("containerd has no image {}", container.image))?
            .into_inner()
            .image
            .and_then(|i| i.target)
            .context("containerd's image has no target")?;
        let mut document: Document = serde_json::from_slice(
            &self
                .read(&client, &image.digest, image.size, MAX_MANIFEST)
                .await?,
        )
        .with_context(|| format!("{} is not an OCI manifest or index", image.digest))?;
        if !document.manifests.is_empty() {
            let chosen = choose(&document.manifests)
                .with_context(|| format!("{}'s index lists no manifest", container.image))?;
            let (digest, size) = (chosen.digest.clone(), chosen.size);
            document =
                serde_json::from_slice(&self.read(&client, &digest, size, MAX_MANIFEST).await?)
                    .with_context(|| format!("{digest} is not an OCI manifest"))?;
        }
        let name = candidates
            .first()
            .cloned()
            .unwrap_or_else(|| PathBuf::from("/app.wasm"));
        if let Some(layer) = document
            .layers
            .iter()
            .find(|l| WASM_LAYERS.contains(&l.media_type.as_str()))
        {
            let wasm = self
                .read(&client, &layer.digest, layer.size, MAX_WASM as i64)
                .await?;
            return Ok((name, wasm));
        }
        for layer in document.layers.iter().rev() {
            let gzip = match layer.media_type.as_str() {
                "application/vnd.oci.image.layer.v1.tar+gzip"
                | "application/vnd.docker.image.rootfs.diff.tar.gzip" => true,
                "application/vnd.oci.image.layer.v1.tar"
                | "application/vnd.docker.image.rootfs.diff.tar" => false,
                _ => continue,
            };
            let blob = self
                .read(&client, &layer.digest, layer.size, MAX_WASM as i64)
                .await?;
            if let Some(found) = in_layer(&blob, gzip, candidates)
                .with_context(|| format!("cannot read the layer {}", layer.digest))?
            {
                return Ok(found);
            }
        }
        bail!(
            "{}: no such file in the container's root filesystem, nor in its image {} ({}): the \
             image has no wasm layer and no filesystem layer holds it",
            name.display(),
            container.image,
            if document.media_type.is_empty() {
                "a manifest"
            } else {
                document.media_type.as_str()
            }
        )
    }

    /// A blob of the content store, refused when it is larger than `max` bytes.
    async fn read(
        &self,
        client: &containerd_client::Client,
        digest: &str,
        size: i64,
        max: i64,
    ) -> anyhow::Result<Vec<u8>> {
        if !(0..=max).contains(&size) {
            bail!("{digest} is {size} bytes, more than the {max} it may be");
        }
        let request = ReadContentRequest {
            digest: digest.to_owned(),
            offset: 0,
            size: 0,
        };
        let mut stream = client
            .content()
            .read(with_namespace!(request, self.namespace.as_str()))
            .await
            .with_context(|| format!("containerd's content store has no {digest}"))?
            .into_inner();
        let mut blob = Vec::with_capacity((size as usize).min(RESERVE));
        while let Some(chunk) = stream.message().await? {
            blob.extend_from_slice(&chunk.data);
            if blob.len() as i64 > size {
                bail!("{digest} is longer than its descriptor says");
            }
        }
        Ok(blob)
    }
}

/// The manifest of an index to run: the `wasi/wasm` one, else this node's, else the first.
fn choose(manifests: &[Descriptor]) -> Option<&Descriptor> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let is = |d: &&Descriptor, os: &[&str], architecture: &str| {
        d.platform
            .as_ref()
            .is_some_and(|p| os.contains(&p.os.as_str()) && p.architecture == architecture)
    };
    manifests
        .iter()
        .find(|d| is(d, &["wasi", "wasip1", "wasip2"], "wasm"))
        .or_else(|| manifests.iter().find(|d| is(d, &["linux"], arch)))
        .or_else(|| manifests.first())
}

/// The first of `candidates` found as a regular file in a filesystem layer.
fn in_layer(
    blob: &[u8],
    gzip: bool,
    candidates: &[PathBuf],
) -> anyhow::Result<Option<(PathBuf, Vec<u8>)>> {
    let reader: Box<dyn Read + '_> = if gzip {
        Box::new(flate2::read::GzDecoder::new(blob))
    } else {
        Box::new(blob)
    };
    let mut archive = tar::Archive::new(reader);
    for entry in archive.entries()? {
        let mut entry = entry?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let path = Path::new("/").join(entry.path()?.components().collect::<PathBuf>());
        let Some(found) = candidates.iter().find(|c| **c == path) else {
            continue;
        };
        if entry.size() > MAX_WASM {
            bail!(
                "{} is {} bytes, more than the {MAX_WASM} a .wasm may be",
                path.display(),
                entry.size()
            );
        }
        let mut wasm = Vec::with_capacity((entry.size() as usize).min(RESERVE));
        entry.by_ref().take(MAX_WASM).read_to_end(&mut wasm)?;
        return Ok(Some((found.clone(), wasm)));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor(os: &str, architecture: &str, digest: &str) -> Descriptor {
        Descriptor {
            media_type: String::new(),
            digest: digest.into(),
            size: 1,
            platform: Some(Platform {
                os: os.into(),
                architecture: architecture.into(),
            }),
        }
    }

    #[test]
    fn an_index_gives_its_wasi_manifest_first() {
        let index = [
            descriptor("linux", "arm64", "a"),
            descriptor("linux", "amd64", "b"),
            descriptor("wasip1", "wasm", "c"),
        ];
        assert_eq!(choose(&index).unwrap().digest, "c");
        let here = if cfg!(target_arch = "aarch64") {
            "a"
        } else {
            "b"
        };
        assert_eq!(choose(&index[..2]).unwrap().digest, here);
    }

    #[test]
    fn a_filesystem_layer_gives_the_entry_point_and_nothing_else() {
        let mut layer = tar::Builder::new(Vec::new());
        for (path, data) in [
            ("./etc/app.wasm", &b"not this"[..]),
            ("./app.wasm", b"\0asm"),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            layer.append_data(&mut h, path, data).unwrap();
        }
        let layer = layer.into_inner().unwrap();
        let found = in_layer(&layer, false, &[PathBuf::from("/app.wasm")]).unwrap();
        assert_eq!(found, Some((PathBuf::from("/app.wasm"), b"\0asm".to_vec())));
        assert_eq!(
            in_layer(&layer, false, &[PathBuf::from("/x.wasm")]).unwrap(),
            None
        );
    }
}
