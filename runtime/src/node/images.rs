//! The node's images: a pod's modules loaded before it starts, the registry pulls under way,
//! and OCI artifacts pulled whole (a fleet source's).

use std::sync::Arc;

use super::{Error, Node};
use crate::PodSpec;
use crate::engine::{Image, Pull};

impl Node {
    /// Checks that every container's module can be loaded, compiling it (or taking it from the
    /// cache) as needed. [`Node::create_pod`] does this too.
    pub async fn load_images(&self, spec: &PodSpec) -> Result<(), Error> {
        self.preload(spec).await.map(drop)
    }

    /// Loads the `.wasm` files of the containers that have one; `None` for a registry image.
    pub(super) async fn preload(
        &self,
        spec: &PodSpec,
    ) -> Result<Vec<Option<(Arc<Image>, Pull)>>, Error> {
        if spec.host_network && self.context.host_engine.is_none() {
            return Err(Error::HostNetwork);
        }
        let mut images = Vec::new();
        for ((field, path), c) in spec.images().zip(&spec.containers) {
            if c.pull.is_some() {
                images.push(None);
                continue;
            }
            let host = spec.host_network;
            if let Some(image) = self.context.engine_for(host).loaded(path) {
                images.push(Some((image, Pull::Present)));
                continue;
            }
            let (context, file) = (self.context.clone(), path.to_owned());
            let life = crate::engine::Life::of(c.lives_as_long_as_its_pod(spec.restart_policy));
            let loaded = tokio::task::spawn_blocking(move || {
                context
                    .engine_for(host)
                    .load(&file, crate::engine::Origin::Local, life)
            })
            .await
            .map_err(|e| Error::Engine(e.to_string()))?;
            images.push(Some(
                loaded.map_err(|source| Error::Image { field, source })?,
            ));
        }
        Ok(images)
    }

    /// Pulls the OCI artifact `reference` (`registry/repository:tag` or `@sha256:...`) whole,
    /// with the node's registry credentials and insecure registries, its layers together at
    /// most `limit` bytes, each checked against its digest. With `key`, the artifact is
    /// returned only if a cosign signature by that key names the digest its reference
    /// resolved to. When the reference still names the manifest `unless`, nothing more is
    /// fetched and the answer is `None` (a poll that finds nothing new). Artifacts are not kept
    /// in the node's image store.
    pub async fn pull_artifact(
        &self,
        reference: &str,
        key: Option<&crate::VerifyKey>,
        limit: u64,
        unless: Option<&str>,
    ) -> Result<Option<crate::Artifact>, Error> {
        let failed = |message: String, refused: bool| Error::Artifact {
            reference: reference.to_owned(),
            message,
            refused,
        };
        let parsed = reference
            .parse()
            .map_err(|e| failed(format!("not an image reference: {e}"), false))?;
        self.context
            .images
            .artifact(&parsed, key, limit, unless)
            .await
            .map_err(|e| {
                use crate::images::PullError::{Refused, Unsigned};
                let refused = matches!(e, Unsigned(_) | Refused(_));
                failed(e.to_string(), refused)
            })
    }

    /// The registry pulls under way, with their progress.
    pub fn pulls(&self) -> Vec<crate::PullProgress> {
        self.context.images.pulls()
    }
}
