//! What of the Node outlives the agent: its UID and creation time, made at the first start, and
//! its labels and annotations as `kubectl label node` and `kubectl annotate node` leave them.
//! Kept in `node.json` beside the store (written whole, synced, renamed), read back at start
//! with the kubelet's own labels and the command line's set over them, as a kubelet sets its
//! `--node-labels` when it registers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Kubelet, lock};
use crate::status::ApiError;

/// The file, under the agent's state dir.
const FILE: &str = "node.json";

/// The file's bound: the API server's for all of an object's annotations (256 KiB), and as
/// much again for its labels.
const MAX_FILE: u64 = 512 * 1024;

/// What of the node its users may change, and its identity.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct NodeMeta {
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) annotations: BTreeMap<String, String>,
    /// The Node's `metadata.uid` (empty until made).
    #[serde(default)]
    pub(crate) uid: String,
    /// The Node's `metadata.creationTimestamp`.
    #[serde(default)]
    pub(crate) created: String,
}

impl NodeMeta {
    /// The node's metadata kept under `dir`, with `labels` (the kubelet's own and the command
    /// line's) over the kept labels; `None` if nothing was kept.
    pub(crate) fn load(dir: &Path, labels: &BTreeMap<String, String>) -> Option<NodeMeta> {
        let path = dir.join(FILE);
        let file = std::fs::File::open(&path).ok()?;
        let mut text = Vec::new();
        let read =
            std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_FILE + 1), &mut text);
        let parsed = read.map_err(|e| e.to_string()).and_then(|n| {
            if n as u64 > MAX_FILE {
                Err(format!("longer than {MAX_FILE} bytes"))
            } else {
                serde_json::from_slice::<NodeMeta>(&text).map_err(|e| e.to_string())
            }
        });
        match parsed {
            Ok(mut meta) => {
                meta.labels
                    .extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
                Some(meta)
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "the node's kept labels and annotations are unreadable; starting without them");
                None
            }
        }
    }
}

/// Where the metadata is kept.
pub(super) fn file(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

impl Kubelet {
    /// The node's labels and annotations of its users (the node's own annotations are the
    /// API's to add).
    pub(crate) fn node_meta(&self) -> NodeMeta {
        let kept = lock(&self.node_meta).clone();
        NodeMeta {
            labels: (*self.node.labels()).clone(),
            ..kept
        }
    }

    /// Keeps new labels and annotations, then gives the node its labels: pods admitted from
    /// now on are matched against them.
    pub(crate) fn set_node_meta(&self, mut meta: NodeMeta) -> Result<(), ApiError> {
        let mut kept = lock(&self.node_meta);
        meta.uid.clone_from(&kept.uid);
        meta.created.clone_from(&kept.created);
        let text = serde_json::to_vec(&meta).map_err(|e| ApiError::internal(e.to_string()))?;
        if text.len() as u64 > MAX_FILE {
            return Err(ApiError::bad_request(format!(
                "metadata: the node's labels and annotations may take {MAX_FILE} bytes in all"
            )));
        }
        crate::credentials::write_private(&self.node_meta_file, &text)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        self.node.set_labels(meta.labels.clone());
        *kept = meta;
        Ok(())
    }
}
