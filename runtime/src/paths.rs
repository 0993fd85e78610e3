//! The host paths of a pod, built only from validated parts and held by one pod at a time.
//!
//! A pod's volumes live in `<state>/pods/<uid>` (the kubelet's `/var/lib/kubelet/pods/<uid>`)
//! and its logs in `<state>/logs/<namespace>_<name>_<uid>` (the kubelet's `/var/log/pods`). The
//! UID is validated (letters, digits, '-'), the namespace and name are DNS names, and each part
//! is checked again here to be one path component of at most 255 bytes, so that no path leaves
//! the state dir. A pod owns `<state>/pods/<uid>.lock` for its life (made with `O_EXCL`, holding
//! its process's id, removed when the pod goes): a second pod with the same UID, in this process
//! or another live one sharing the state dir, is refused instead of sharing (and at the end
//! deleting) the first one's directories. A lock left by a process that died is taken over. No
//! descriptor is held, so a node of many thousands of pods spends none on this.

use std::io;
use std::path::{Path, PathBuf};

/// The longest file name Linux file systems take.
const NAME_MAX: usize = 255;

/// The directories of one pod, and the lock that makes them its own.
#[derive(Debug)]
pub(crate) struct PodPaths {
    pub(crate) pod_dir: PathBuf,
    pub(crate) log_dir: PathBuf,
    lock: PathBuf,
}

/// Why a pod's directories could not be claimed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClaimError {
    /// Another live pod has the same UID.
    #[error("metadata.uid: {0:?} is in use by another pod sharing this state dir")]
    InUse(String),
    /// A part is not a single path component (validation should have refused it).
    #[error("metadata: {0:?} cannot be part of a path")]
    BadComponent(String),
    /// The state dir cannot be written.
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
}

impl PodPaths {
    /// Claims the directories of pod `namespace/name` with `uid` under `state_dir` (nothing is
    /// made but the lock file; volumes and logs make their directories when they need them).
    pub(crate) fn claim(
        state_dir: &Path,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<PodPaths, ClaimError> {
        for part in [namespace, name, uid] {
            component(part)?;
        }
        let pods = state_dir.join("pods");
        let io_err = |path: &Path| {
            let path = path.to_owned();
            move |source| ClaimError::Io { path, source }
        };
        std::fs::create_dir_all(&pods).map_err(io_err(&pods))?;
        let lock = pods.join(format!("{uid}.lock"));
        take_lock(&lock, uid).map_err(|e| match e {
            Taken::InUse => ClaimError::InUse(uid.into()),
            Taken::Io(source) => io_err(&lock)(source),
        })?;
        Ok(PodPaths {
            pod_dir: pods.join(uid),
            log_dir: log_dir(state_dir, namespace, name, uid)?,
            lock,
        })
    }
}

impl Drop for PodPaths {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.lock);
    }
}

enum Taken {
    InUse,
    Io(io::Error),
}

/// Makes the lock file `path` holding this process's id; takes over one whose process is gone.
fn take_lock(path: &Path, uid: &str) -> Result<(), Taken> {
    use std::io::Write;
    for _ in 0..2 {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
        {
            Ok(mut file) => {
                return writeln!(file, "{}", std::process::id()).map_err(Taken::Io);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let holder = std::fs::read_to_string(path)
                    .ok()
                    .and_then(|text| text.trim().parse::<u32>().ok());
                if holder.is_some_and(process_lives) {
                    return Err(Taken::InUse);
                }
                // A lock of a process that ended without cleaning up (or one being written
                // this instant, which then holds our own id or none yet: refuse rather than race).
                if holder.is_none() {
                    return Err(Taken::InUse);
                }
                tracing::info!(uid, "taking over the lock of a process that is gone");
                let _ = std::fs::remove_file(path);
            }
            Err(e) => return Err(Taken::Io(e)),
        }
    }
    Err(Taken::InUse)
}

/// Whether process `pid` exists (this process included).
fn process_lives(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        // SAFETY: kill with signal 0 sends nothing; it only checks that the process exists.
        let r = unsafe { libc::kill(pid, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// `<namespace>_<name>_<uid>`, with the name shortened when the whole would be longer than a
/// file name may be (the UID keeps it unique).
fn log_dir_name(namespace: &str, name: &str, uid: &str) -> String {
    let fixed = namespace.len() + uid.len() + 2;
    let room = NAME_MAX.saturating_sub(fixed);
    let mut end = name.len().min(room);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let name = &name[..end];
    format!("{namespace}_{name}_{uid}")
}

/// The log directory of a pod under `state_dir` (`logs/<namespace>_<name>_<uid>`), its parts
/// checked to be single path components.
pub(crate) fn log_dir(
    state_dir: &Path,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<PathBuf, ClaimError> {
    for part in [namespace, name, uid] {
        component(part)?;
    }
    Ok(state_dir
        .join("logs")
        .join(log_dir_name(namespace, name, uid)))
}

/// Removes what a pod left under `state_dir`: its logs, and, unless a live process holds its UID
/// lock, its volumes and the lock.
pub(crate) fn remove_left(
    state_dir: &Path,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<(), ClaimError> {
    let logs = log_dir(state_dir, namespace, name, uid)?;
    let pods = state_dir.join("pods");
    let lock = pods.join(format!("{uid}.lock"));
    let held = std::fs::read_to_string(&lock)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .is_some_and(process_lives);
    let mut dirs = vec![logs];
    if !held {
        dirs.push(pods.join(uid));
    }
    for dir in dirs {
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(ClaimError::Io {
                    path: dir,
                    source: e,
                });
            }
            _ => {}
        }
    }
    if !held {
        let _ = std::fs::remove_file(&lock);
    }
    Ok(())
}

/// `part` when it is one path component: not empty, `.` or `..`, no `/` or NUL, at most 255
/// bytes.
pub(crate) fn component(part: &str) -> Result<&str, ClaimError> {
    let ok = !part.is_empty()
        && part != "."
        && part != ".."
        && part.len() <= NAME_MAX
        && !part.contains(['/', '\0']);
    if ok {
        Ok(part)
    } else {
        Err(ClaimError::BadComponent(part.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uid_is_held_by_one_pod_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let first = PodPaths::claim(dir.path(), "default", "a", "u-1").unwrap();
        let second = PodPaths::claim(dir.path(), "default", "b", "u-1");
        assert!(matches!(second, Err(ClaimError::InUse(_))), "{second:?}");
        assert!(first.pod_dir.starts_with(dir.path().join("pods")));
        drop(first);
        PodPaths::claim(dir.path(), "default", "b", "u-1").unwrap();
    }

    #[test]
    fn a_lock_left_by_a_dead_process_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("pods")).unwrap();
        // No process has id 0x7ffffffe (above the kernel's pid_max).
        std::fs::write(dir.path().join("pods/u-2.lock"), "2147483646\n").unwrap();
        PodPaths::claim(dir.path(), "default", "a", "u-2").unwrap();
    }

    #[test]
    fn path_like_parts_are_refused_and_long_names_fit_a_file_name() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["..", ".", "", "a/b", "x\0"] {
            let got = PodPaths::claim(dir.path(), "default", "a", bad);
            assert!(matches!(got, Err(ClaimError::BadComponent(_))), "{bad:?}");
        }
        let name = "n".repeat(253);
        let uid = "0".repeat(64);
        let paths = PodPaths::claim(dir.path(), &"s".repeat(63), &name, &uid).unwrap();
        let leaf = paths.log_dir.file_name().unwrap().len();
        assert_eq!(leaf, NAME_MAX);
        assert!(paths.log_dir.to_str().unwrap().ends_with(&uid));
    }
}
