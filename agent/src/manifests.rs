//! Static pods, the kubelet's `staticPodPath`: every Pod manifest in a directory runs as a pod
//! of the node. A file added creates its pod, a file removed deletes it gracefully, a file
//! changed replaces it. Their API objects are mirror pods: kubectl sees them but cannot delete
//! or change them (the manifest is the truth).
//!
//! As the kubelet does, a static pod's name is the manifest's name with the node's name
//! appended (`web-edge-1`), its UID is derived from the manifest's content, and it carries the
//! `kubernetes.io/config.mirror`, `config.hash` and `config.source` annotations.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::Digest;
use tokio::sync::watch;

use crate::api::Api;
use crate::api::resources::MIRROR;

/// The most manifests read from the directory, and the largest one.
const MAX_FILES: usize = 1000;
const MAX_FILE: u64 = 3 << 20;

/// A static pod the directory holds: its namespace, name and manifest hash.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Static {
    namespace: String,
    name: String,
    hash: String,
}

/// Keeps the node's static pods in step with `dir`, checking it every `every`, until `stop`.
pub(crate) async fn watch(
    api: Arc<Api>,
    dir: PathBuf,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut warned: HashMap<PathBuf, String> = HashMap::new();
    let mut refused: HashMap<String, String> = HashMap::new();
    loop {
        let wanted = scan(&dir, &mut warned).await;
        sync(&api, &wanted, &mut refused).await;
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
    }
}

/// The manifests of `dir` as the pods they make; a bad file is left out with a warning (once).
async fn scan(dir: &Path, warned: &mut HashMap<PathBuf, String>) -> Vec<(Static, Value)> {
    let mut out = Vec::new();
    let Ok(mut entries) = tokio::fs::read_dir(dir).await else {
        return out;
    };
    let mut files = Vec::new();
    while let Ok(Some(e)) = entries.next_entry().await {
        let path = e.path();
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if matches!(ext, "yaml" | "yml" | "json") && !hidden {
            files.push(path);
        }
    }
    files.sort();
    if files.len() > MAX_FILES {
        tracing::warn!(dir = %dir.display(), "more than {MAX_FILES} manifests: the rest are not read");
        files.truncate(MAX_FILES);
    }
    for path in files {
        match read(&path).await {
            Ok(pod) => {
                warned.remove(&path);
                out.push(pod);
            }
            Err(why) => {
                if warned.get(&path) != Some(&why) {
                    tracing::warn!(file = %path.display(), "static pod manifest: {why}");
                    warned.insert(path, why);
                }
            }
        }
    }
    out
}

async fn read(path: &Path) -> Result<(Static, Value), String> {
    let meta = tokio::fs::metadata(path).await.map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a file".into());
    }
    if meta.len() > MAX_FILE {
        return Err(format!("larger than {MAX_FILE} bytes"));
    }
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|e| e.to_string())?;
    let mut pod = match wasmpod::read_documents(text.as_bytes()).map_err(|e| e.to_string())? {
        docs if docs.len() == 1 => docs.into_iter().next().unwrap_or_default(),
        docs => {
            return Err(format!(
                "{} documents: a manifest holds one Pod",
                docs.len()
            ));
        }
    };
    if pod.get("kind").and_then(Value::as_str) != Some("Pod") {
        return Err("not a Pod".into());
    }
    let hash = format!("{:x}", sha2::Sha256::digest(text.as_bytes()));
    let namespace = pod
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_owned();
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or("metadata.name: Required value")?
        .to_owned();
    if !pod.get("metadata").is_some_and(Value::is_object) {
        return Err("metadata: Required value".into());
    }
    let meta = &mut pod["metadata"];
    if !meta.get("annotations").is_some_and(Value::is_object) {
        meta["annotations"] = json!({});
    }
    meta["annotations"][MIRROR] = json!(hash);
    meta["annotations"]["kubernetes.io/config.hash"] = json!(hash);
    meta["annotations"]["kubernetes.io/config.source"] = json!("file");
    meta["namespace"] = json!(namespace);
    Ok((
        Static {
            namespace,
            name,
            hash,
        },
        pod,
    ))
}

/// Creates, replaces and deletes static pods until the node runs what `wanted` says. A manifest
/// the API refuses is tried again only once it changes (`refused`: pod name to manifest hash).
async fn sync(api: &Arc<Api>, wanted: &[(Static, Value)], refused: &mut HashMap<String, String>) {
    let node = api.kubelet.node_name().to_owned();
    let full_name = |s: &Static| format!("{}-{node}", s.name);
    // Mirror pods whose manifest is gone or changed go, gracefully.
    for pod in api.store.list("pods", None).1 {
        let Some(hash) = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MIRROR))
        else {
            continue;
        };
        let (ns, name) = (pod.namespace(), pod.name());
        let kept = wanted
            .iter()
            .any(|(s, _)| &s.hash == hash && s.namespace == ns && full_name(s) == name);
        let deleting = pod.metadata.deletion_timestamp.is_some();
        if !kept && !deleting {
            tracing::info!(
                pod = name,
                "static pod manifest removed or changed: deleting the pod"
            );
            if let Err(e) = api.delete_pod(ns, name, None, false) {
                tracing::warn!(pod = name, "cannot delete the static pod: {}", e.message);
            }
        }
    }
    // New manifests (and changed ones, once the old pod is gone) are created.
    for (s, pod) in wanted {
        let name = full_name(s);
        if api.store.get("pods", &s.namespace, &name).is_some()
            || refused.get(&name) == Some(&s.hash)
        {
            continue;
        }
        let mut pod = pod.clone();
        pod["metadata"]["name"] = json!(name);
        // The UID is the manifest's: the same file makes the same pod after a restart.
        let h = &s.hash;
        let uid = format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        );
        match api.create_static(&s.namespace, pod, &uid).await {
            Ok(_) => tracing::info!(pod = name, "static pod created"),
            Err(e) => {
                tracing::warn!(pod = name, "static pod: {}", e.message);
                refused.insert(name, s.hash.clone());
            }
        }
    }
}
