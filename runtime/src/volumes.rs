//! A pod's volumes on the host: the directories its mounts preopen.
//!
//! `emptyDir` is a fresh directory per pod (under `/dev/shm` for `medium: Memory`, so it lives in
//! RAM), removed with the pod; `configMap` and `secret` volumes are directories of files written
//! at pod start (mounted read-only); `hostPath` is the host's own directory. A guest sees a volume
//! only through WASI preopens, which cap-std confines: neither `..` nor a symlink leads out.

use std::path::{Path, PathBuf};

use crate::spec::{HostCreate, PodSpec, VolumeSource};

/// Where RAM-backed `emptyDir` volumes live, when the host has it.
const SHM: &str = "/dev/shm";

/// The host directories of a pod's volumes, in `spec.volumes` order.
pub(crate) struct PodVolumes {
    dirs: Vec<PathBuf>,
    /// Made by wasmpod for this pod (removed with it), as opposed to a host path.
    owned: Vec<bool>,
}

impl PodVolumes {
    /// Makes the pod's volume directories.
    pub(crate) fn prepare(
        spec: &PodSpec,
        pod_dir: &Path,
        uid: &str,
    ) -> std::io::Result<PodVolumes> {
        let mut volumes = PodVolumes {
            dirs: Vec::new(),
            owned: Vec::new(),
        };
        for v in &spec.volumes {
            let (dir, owned) = match &v.source {
                VolumeSource::HostPath(p, create) => {
                    match create {
                        Some(HostCreate::Directory) => std::fs::create_dir_all(p)?,
                        Some(HostCreate::File) => {
                            std::fs::OpenOptions::new()
                                .create(true)
                                .append(true)
                                .open(p)?;
                        }
                        None => {}
                    }
                    (p.clone(), false)
                }
                VolumeSource::EmptyDir { memory: true, .. } if Path::new(SHM).is_dir() => {
                    (Path::new(SHM).join("wasmpod").join(uid).join(&v.name), true)
                }
                VolumeSource::EmptyDir { .. } | VolumeSource::Files(_) => {
                    (pod_dir.join("volumes").join(&v.name), true)
                }
            };
            if owned {
                std::fs::create_dir_all(&dir)?;
            }
            if let VolumeSource::Files(files) = &v.source {
                for (path, data) in files {
                    let file = dir.join(path);
                    if let Some(parent) = file.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::write(file, data)?;
                }
            }
            volumes.dirs.push(dir);
            volumes.owned.push(owned);
        }
        Ok(volumes)
    }

    /// The host directory a mount of volume `index` shows: the volume's, or its `subPath`
    /// (made if missing, as the kubelet does). A `subPath` that leads out of the volume through
    /// a symlink is refused.
    pub(crate) fn mount_dir(
        &self,
        index: usize,
        sub_path: Option<&str>,
    ) -> Result<PathBuf, String> {
        let dir = &self.dirs[index];
        let Some(sub) = sub_path else {
            return Ok(dir.clone());
        };
        let target = dir.join(sub);
        let inside = |t: &Path| -> std::io::Result<bool> {
            Ok(t.canonicalize()?.starts_with(dir.canonicalize()?))
        };
        // Check before making anything (a symlinked parent), and after (the result).
        let existing = target.ancestors().find(|a| a.exists()).unwrap_or(dir);
        match inside(existing) {
            Ok(true) => {}
            Ok(false) => return Err(format!("subPath {sub:?} leads out of the volume")),
            Err(e) => return Err(format!("subPath {sub:?}: {e}")),
        }
        std::fs::create_dir_all(&target).map_err(|e| format!("subPath {sub:?}: {e}"))?;
        match inside(&target) {
            Ok(true) => Ok(target),
            Ok(false) => Err(format!("subPath {sub:?} leads out of the volume")),
            Err(e) => Err(format!("subPath {sub:?}: {e}")),
        }
    }

    /// The first `emptyDir` whose contents exceed its `sizeLimit`: (name, usage, limit).
    pub(crate) fn over_limit(&self, spec: &PodSpec) -> Option<(String, u64, u64)> {
        spec.volumes.iter().zip(&self.dirs).find_map(|(v, dir)| {
            let VolumeSource::EmptyDir {
                size_limit: Some(limit),
                ..
            } = v.source
            else {
                return None;
            };
            let used = usage(dir);
            (used > limit).then(|| (v.name.clone(), used, limit))
        })
    }

    /// Removes what wasmpod made for the pod.
    pub(crate) fn remove(&self, pod_dir: &Path, uid: &str) {
        for (dir, owned) in self.dirs.iter().zip(&self.owned) {
            if *owned
                && let Err(e) = std::fs::remove_dir_all(dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(dir = %dir.display(), "cannot remove a volume: {e}");
            }
        }
        let _ = std::fs::remove_dir(pod_dir.join("volumes"));
        let _ = std::fs::remove_dir(Path::new(SHM).join("wasmpod").join(uid));
    }
}

/// Bytes used by the files under `dir` (symlinks not followed).
fn usage(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => usage(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}
