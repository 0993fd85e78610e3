//! A pod's volumes on the host: the directories its mounts preopen.
//!
//! `emptyDir` is a fresh directory per pod (under `/dev/shm` for `medium: Memory`, so it lives in
//! RAM), removed with the pod; `configMap` and `secret` volumes are directories of files written
//! at pod start (mounted read-only); `hostPath` is the host's own directory. A guest sees a volume
//! only through WASI preopens, which cap-std confines: neither `..` nor a symlink leads out.
//!
//! Each mount of a container is opened once when the container starts ([`MountDir`]), its
//! `subPath` resolved inside the volume by cap-std, and every instance of that container (the
//! entry point, probes, hooks, `exec`) preopens that same open directory: a symlink planted at
//! the `subPath` afterwards, by another container sharing the volume, changes nothing.

use std::fs::File;
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use crate::spec::{HostCreate, PodSpec, VolumeSource};

/// Where RAM-backed `emptyDir` volumes live, when the host has it.
const SHM: &str = "/dev/shm";
/// The directory of the pods' RAM-backed `emptyDir`s: `<uid>/` each.
pub(crate) fn shm_root() -> PathBuf {
    Path::new(SHM).join("wasmpod")
}

/// The lock a pod holds in its `/dev/shm/wasmpod/<uid>` directory while it lives.
const SHM_LOCK: &str = ".lock";

/// The host directories of a pod's volumes, in `spec.volumes` order.
pub(crate) struct PodVolumes {
    dirs: Vec<PathBuf>,
    /// Made by wasmpod for this pod (removed with it), as opposed to a host path.
    owned: Vec<bool>,
    /// The pod's directory under `/dev/shm`, locked while the pod lives, when it has one.
    shm: Option<(PathBuf, File)>,
}

/// One mount's directory, opened once for a container's instances.
#[derive(Debug)]
pub(crate) struct MountDir {
    dir: Dir,
    /// The host path it was opened at, for messages.
    shown: PathBuf,
    /// It is on a local file system.
    local: bool,
}

impl MountDir {
    /// Opens the host directory at `path`.
    pub(crate) fn open(path: &Path) -> Result<MountDir, String> {
        let dir = Dir::open_ambient_dir(path, ambient_authority())
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        Ok(MountDir::of(dir, path.to_owned()))
    }

    fn of(dir: Dir, shown: PathBuf) -> MountDir {
        MountDir {
            local: on_local_fs(&dir),
            dir,
            shown,
        }
    }

    /// Whether calls on files under it take what a local disk takes: it is on a local file
    /// system (ext4, xfs, btrfs, tmpfs, ...), not a network or FUSE one, where a call lasts as
    /// long as a server takes to answer.
    pub(crate) fn is_local(&self) -> bool {
        self.local
    }

    /// A path that opens this very directory (not whatever is at its name now): its descriptor
    /// under `/proc/self/fd`, where the host has `/proc`.
    pub(crate) fn path(&self) -> PathBuf {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let fd = Path::new("/proc/self/fd").join(self.dir.as_raw_fd().to_string());
            if fd.exists() {
                return fd;
            }
        }
        self.shown.clone()
    }

    /// The host path it was opened at.
    pub(crate) fn shown(&self) -> &Path {
        &self.shown
    }
}

/// Whether `dir` is on a file system known to be local (by its `statfs` magic number).
fn on_local_fs(dir: &Dir) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        /// ext4 (and ext2/3), xfs, btrfs, tmpfs, overlayfs, f2fs, zfs, ramfs, squashfs, vfat,
        /// exfat.
        const LOCAL: [u32; 11] = [
            0xEF53,
            0x5846_5342,
            0x9123_683E,
            0x0102_1994,
            0x794C_7630,
            0xF2F5_2010,
            0x2FC1_2FC1,
            0x8584_58F6,
            0x7371_7368,
            0x4D44,
            0x2011_BAB0,
        ];
        // SAFETY: an all-zero `statfs` is a valid value of the plain C struct.
        let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: fstatfs writes only the struct passed; the descriptor is open for `dir`'s life.
        if unsafe { libc::fstatfs(dir.as_raw_fd(), &mut stat) } != 0 {
            return false;
        }
        // The magic numbers are 32-bit; `f_type`'s width differs between targets.
        LOCAL.contains(&(stat.f_type as u32))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        false
    }
}

impl PodVolumes {
    /// Makes the pod's volume directories.
    pub(crate) fn prepare(
        spec: &PodSpec,
        paths: &crate::paths::PodPaths,
        uid: &str,
    ) -> std::io::Result<PodVolumes> {
        let mut volumes = PodVolumes {
            dirs: Vec::new(),
            owned: Vec::new(),
            shm: None,
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
                    (volumes.shm_dir(uid)?.join(&v.name), true)
                }
                VolumeSource::EmptyDir { .. } | VolumeSource::Files(_) => {
                    let pod_dir = paths.pod_dir().map_err(std::io::Error::other)?;
                    (pod_dir.join("volumes").join(&v.name), true)
                }
            };
            if owned {
                std::fs::create_dir_all(&dir)?;
            }
            if let VolumeSource::Files(files) = &v.source {
                // Written through the directory handle: item paths are validated relative
                // paths, and cap-std keeps them inside.
                let root = Dir::open_ambient_dir(&dir, ambient_authority())?;
                for (path, data) in files {
                    if let Some(parent) = Path::new(path).parent()
                        && !parent.as_os_str().is_empty()
                    {
                        root.create_dir_all(parent)?;
                    }
                    root.write(path, data.contents(spec, uid))?;
                }
            }
            volumes.dirs.push(dir);
            volumes.owned.push(owned);
        }
        Ok(volumes)
    }

    /// The pod's directory under `/dev/shm`, made and locked on first use.
    fn shm_dir(&mut self, uid: &str) -> std::io::Result<PathBuf> {
        if let Some((dir, _)) = &self.shm {
            return Ok(dir.clone());
        }
        // Private to the node's user: /dev/shm is every user's.
        let dir = shm_root().join(uid);
        crate::paths::private_dir(&shm_root())?;
        crate::paths::private_dir(&dir)?;
        let lock = File::create(dir.join(SHM_LOCK))?;
        lock.try_lock().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} is in use by another pod", dir.display()),
            )
        })?;
        self.shm = Some((dir.clone(), lock));
        Ok(dir)
    }

    /// Opens the directory a mount of volume `index` shows: the volume's, or its `subPath`
    /// (made if missing, as the kubelet does), resolved inside the volume: a `subPath` that
    /// leads out through a symlink is refused.
    pub(crate) fn mount_dir(
        &self,
        index: usize,
        sub_path: Option<&str>,
    ) -> Result<MountDir, String> {
        let dir = &self.dirs[index];
        let root = Dir::open_ambient_dir(dir, ambient_authority())
            .map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
        let Some(sub) = sub_path else {
            return Ok(MountDir::of(root, dir.clone()));
        };
        let why = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::PermissionDenied
                || e.to_string().contains("outside of the filesystem")
            {
                format!("subPath {sub:?} leads out of the volume")
            } else {
                format!("subPath {sub:?}: {e}")
            }
        };
        let opened = match root.open_dir(sub) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                root.create_dir_all(sub).map_err(why)?;
                root.open_dir(sub)
            }
            other => other,
        }
        .map_err(why)?;
        Ok(MountDir::of(opened, dir.join(sub)))
    }

    /// The directory of a container's single-file mounts in one guest directory (number `n` of
    /// the container's), made anew for an instance: a ConfigMap's or Secret's file written, a
    /// `hostPath` file hard-linked, so that the guest sees the host's file live (an edit in
    /// place shows; a file replaced by a rename does not).
    pub(crate) fn file_dir(
        &self,
        pod: (&PodSpec, &Path, &str),
        container: &str,
        n: usize,
        files: &[(String, &crate::spec::Mount)],
    ) -> Result<MountDir, String> {
        let (spec, pod_dir, uid) = pod;
        let shown = pod_dir.join(FILES).join(container).join(n.to_string());
        let dir = fresh_dir(&shown)?;
        for (name, m) in files {
            let made = match &spec.volumes[m.volume].source {
                VolumeSource::Files(list) => {
                    let data = list
                        .iter()
                        .find(|(p, _)| Some(p) == m.sub_path.as_ref())
                        .map(|(_, d)| d.contents(spec, uid))
                        .unwrap_or_default();
                    dir.write(name, data)
                }
                VolumeSource::HostPath(host, _) => match &m.sub_path {
                    None => std::fs::hard_link(host, shown.join(name)),
                    // Resolved inside the host directory, as a directory subPath is.
                    Some(sub) => Dir::open_ambient_dir(host, ambient_authority())
                        .and_then(|root| root.hard_link(sub, &dir, name)),
                },
                VolumeSource::EmptyDir { .. } => Ok(()),
            };
            made.map_err(|e| match e.raw_os_error() {
                Some(libc::EXDEV) => format!(
                    "cannot mount the file at {}: it is on another filesystem than the node's \
                     state dir, and a single file is mounted through a hard link; mount its \
                     directory instead",
                    m.path
                ),
                _ => format!("cannot mount the file at {}: {e}", m.path),
            })?;
        }
        Ok(MountDir::of(dir, shown))
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

    /// Removes what wasmpod made for the pod (under `pod_dir` when the pod made it).
    pub(crate) fn remove(&self, pod_dir: Option<&Path>) {
        for (dir, owned) in self.dirs.iter().zip(&self.owned) {
            if *owned
                && let Err(e) = std::fs::remove_dir_all(dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(dir = %dir.display(), "cannot remove a volume: {e}");
            }
        }
        if let Some(pod_dir) = pod_dir {
            let _ = std::fs::remove_dir(pod_dir.join("volumes"));
            let _ = std::fs::remove_dir_all(pod_dir.join(TERMINATION));
            let _ = std::fs::remove_dir_all(pod_dir.join(FILES));
        }
        if let Some((dir, _lock)) = &self.shm {
            // The lock goes with the directory; it is released when `self` drops.
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Where the pod's containers' termination-message files are, under its directory.
const TERMINATION: &str = "termination";
/// Where the pod's containers' single-file mounts are, under its directory.
const FILES: &str = "files";

/// The directory holding a container's termination-message file `file`, made empty for a new
/// instance (whatever the last one left there: a file, a link, a directory), opened to be
/// preopened at the `terminationMessagePath`'s directory.
pub(crate) fn termination_dir(
    pod_dir: &Path,
    container: &str,
    file: &str,
) -> Result<MountDir, String> {
    let shown = pod_dir.join(TERMINATION).join(container);
    let dir = fresh_dir(&shown)?;
    dir.create(file)
        .map_err(|e| format!("cannot make {}: {e}", shown.join(file).display()))?;
    Ok(MountDir::of(dir, shown))
}

/// The directory at `shown`, made if missing and emptied of whatever a last instance left there
/// (a file, a link, a directory), opened.
fn fresh_dir(shown: &Path) -> Result<Dir, String> {
    std::fs::create_dir_all(shown).map_err(|e| format!("cannot make {}: {e}", shown.display()))?;
    let dir = Dir::open_ambient_dir(shown, ambient_authority())
        .map_err(|e| format!("cannot open {}: {e}", shown.display()))?;
    for entry in dir.entries().map_err(|e| e.to_string())?.flatten() {
        let name = entry.file_name();
        let removed = match entry.file_type() {
            Ok(t) if t.is_dir() => dir.remove_dir_all(&name),
            _ => dir.remove_file(&name),
        };
        removed.map_err(|e| format!("cannot empty {}: {e}", shown.display()))?;
    }
    Ok(dir)
}

/// What a container wrote to its termination-message file: at most `limit` bytes, read inside
/// its directory (a link the guest made cannot lead out of it); `None` when empty or unreadable.
pub(crate) fn termination_message(
    pod_dir: &Path,
    container: &str,
    file: &str,
    limit: u64,
) -> Option<String> {
    use std::io::Read;
    let dir = Dir::open_ambient_dir(
        pod_dir.join(TERMINATION).join(container),
        ambient_authority(),
    )
    .ok()?;
    let mut text = Vec::new();
    dir.open(file)
        .ok()?
        .take(limit)
        .read_to_end(&mut text)
        .ok()?;
    (!text.is_empty()).then(|| String::from_utf8_lossy(&text).into_owned())
}

/// Removes what pods of processes that ended without cleaning up (`kill -9`, a crash) left in
/// `/dev/shm/wasmpod`: a directory whose lock nobody holds. Returns how many were removed.
pub(crate) fn remove_orphans() -> usize {
    let Ok(entries) = std::fs::read_dir(shm_root()) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let dir = entry.path();
        let Ok(lock) = File::open(dir.join(SHM_LOCK)) else {
            continue;
        };
        if lock.try_lock().is_ok() && std::fs::remove_dir_all(&dir).is_ok() {
            tracing::info!(dir = %dir.display(), "removed a volume left by an ended process");
            removed += 1;
        }
    }
    removed
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
