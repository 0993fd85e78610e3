//! The container's OCI spec as its own process sees it, once libcontainer has made it: runwasi
//! hands the sandbox only argv, environment and entry point, so the mounts are read from
//! `/proc/self/mountinfo` and the memory limit from the container's cgroup, which is where
//! libcontainer put them.

use std::path::{Path, PathBuf};

/// A directory mounted in the container: the root filesystem or a bind (or tmpfs) mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    pub(crate) path: PathBuf,
    pub(crate) read_only: bool,
}

/// The kernel's file systems, which a guest has no use for.
const SYSTEM: [&str; 3] = ["/proc", "/sys", "/dev"];

/// The root and every mount outside `/proc`, `/sys` and `/dev`, from `/proc/self/mountinfo`'s
/// text (a later mount at the same point hides an earlier one, as in the kernel).
pub(crate) fn mounts(mountinfo: &str) -> Vec<Mount> {
    let mut mounts: Vec<Mount> = Vec::new();
    for line in mountinfo.lines() {
        // id parent major:minor root mount-point options [optional...] - type source super
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(point), Some(options)) = (fields.get(4), fields.get(5)) else {
            continue;
        };
        let path = PathBuf::from(unescape(point));
        if SYSTEM.iter().any(|s| path.starts_with(s)) {
            continue;
        }
        let read_only = options.split(',').any(|o| o == "ro");
        mounts.retain(|m| m.path != path);
        mounts.push(Mount { path, read_only });
    }
    mounts
}

/// The directories the guest is given: each top-level directory of the root filesystem (`top`,
/// without `/proc`, `/sys` and `/dev`), read-only when the mount it is on is, and every deeper
/// mount at its path. The root itself is not preopened: through it the guest would reach
/// `/proc/self/mem`, the runtime's own memory.
pub(crate) fn guest_dirs(mounts: &[Mount], top: &[PathBuf]) -> Vec<Mount> {
    let mode = |path: &Path| {
        mounts
            .iter()
            .filter(|m| path.starts_with(&m.path))
            .max_by_key(|m| m.path.components().count())
            .is_some_and(|m| m.read_only)
    };
    let mut dirs: Vec<Mount> = top
        .iter()
        .filter(|p| !SYSTEM.iter().any(|s| p.starts_with(s)))
        .map(|p| Mount {
            path: p.clone(),
            read_only: mode(p),
        })
        .collect();
    for m in mounts {
        if m.path.components().count() > 2 {
            dirs.push(m.clone());
        }
    }
    dirs
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(octal) = bytes.get(i + 1..i + 4)
            && let Ok(s) = std::str::from_utf8(octal)
            && let Ok(b) = u8::from_str_radix(s, 8)
        {
            out.push(b);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The memory limit of the process's cgroup, in bytes, where the container's `/sys/fs/cgroup`
/// shows it (cgroup v2's `memory.max`, v1's `memory.limit_in_bytes`); `None` when unlimited or
/// not shown (the kernel enforces it anyway).
pub(crate) fn memory_limit() -> Option<u64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let root = Path::new("/sys/fs/cgroup");
    for line in cgroups.lines() {
        // hierarchy-id:controllers:path
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_start_matches('/');
        let candidates: Vec<PathBuf> = match controllers {
            "" => vec![root.join(path).join("memory.max"), root.join("memory.max")],
            c if c.split(',').any(|c| c == "memory") => vec![
                root.join("memory").join(path).join("memory.limit_in_bytes"),
                root.join("memory/memory.limit_in_bytes"),
            ],
            _ => continue,
        };
        for file in candidates {
            if let Ok(text) = std::fs::read_to_string(&file) {
                return parse_limit(&text);
            }
        }
    }
    None
}

/// A cgroup memory limit file's value: `max` (v2) and v1's page-rounded `i64::MAX` are none.
fn parse_limit(text: &str) -> Option<u64> {
    let bytes: u64 = text.trim().parse().ok()?;
    (bytes < 1 << 62).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_keep_the_root_and_the_binds_with_their_modes() {
        let info = "\
600 500 0:50 / / rw,relatime - overlay overlay rw,lowerdir=/l
601 600 0:51 / /proc rw,nosuid - proc proc rw
602 600 0:52 / /dev rw,nosuid - tmpfs tmpfs rw
603 602 0:53 / /dev/pts rw - devpts devpts rw
604 600 0:54 / /sys ro - sysfs sysfs ro
605 600 8:1 /srv/data /data ro,relatime - ext4 /dev/sda1 rw
606 600 8:1 /srv/out /my\\040out rw,relatime - ext4 /dev/sda1 rw
607 600 8:1 /srv/data2 /data rw,relatime - ext4 /dev/sda1 rw
";
        assert_eq!(
            mounts(info),
            vec![
                Mount {
                    path: "/".into(),
                    read_only: false
                },
                Mount {
                    path: "/my out".into(),
                    read_only: false
                },
                Mount {
                    path: "/data".into(),
                    read_only: false
                },
            ]
        );
    }

    #[test]
    fn top_level_directories_and_deeper_mounts_without_the_kernels() {
        let mounts = [
            Mount {
                path: "/".into(),
                read_only: false,
            },
            Mount {
                path: "/config".into(),
                read_only: true,
            },
            Mount {
                path: "/var/data".into(),
                read_only: true,
            },
        ];
        let top: Vec<PathBuf> = ["/config", "/proc", "/sys", "/dev", "/var", "/etc"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(
            guest_dirs(&mounts, &top),
            vec![
                Mount {
                    path: "/config".into(),
                    read_only: true
                },
                Mount {
                    path: "/var".into(),
                    read_only: false
                },
                Mount {
                    path: "/etc".into(),
                    read_only: false
                },
                Mount {
                    path: "/var/data".into(),
                    read_only: true
                },
            ]
        );
    }

    #[test]
    fn limits_of_both_cgroup_versions() {
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("67108864\n"), Some(64 << 20));
    }
}
