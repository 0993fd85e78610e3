//! The memory cgroup the process is in: the limit over it (its own or an ancestor's, whichever
//! is smallest) and what it uses against that limit, in cgroup v1's memory hierarchy or the
//! unified one. Guests run inside the process, so that limit is the most their memory and the
//! runtime's together may reach before the kernel ends the process.

use std::path::{Path, PathBuf};

/// The limit over the process and its use against it, in bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Memory {
    pub(crate) limit: u64,
    /// Usage less inactive file pages (the kubelet's working set).
    pub(crate) working_set: u64,
}

/// The memory limit over this process, and what it uses against it: of the process's memory
/// cgroup and its ancestors (a systemd unit's `MemoryMax`, a container's limit, the kubelet's
/// pod cgroup), the one with the smallest limit, and its working set. `None` where no limit
/// applies.
pub(crate) fn memory() -> Option<Memory> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    // cgroup v1's memory hierarchy, else the unified one.
    let (root, path, v1) = cgroups
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once(':')?;
            let (controllers, path) = rest.split_once(':')?;
            controllers.split(',').any(|c| c == "memory").then_some((
                "/sys/fs/cgroup/memory",
                path,
                true,
            ))
        })
        .or_else(|| {
            let path = cgroups.lines().find_map(|l| l.strip_prefix("0::"))?;
            Some(("/sys/fs/cgroup", path, false))
        })?;
    let (limit_file, usage_file, inactive) = if v1 {
        (
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            "total_inactive_file",
        )
    } else {
        ("memory.max", "memory.current", "inactive_file")
    };
    let read = |dir: &Path, file: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let mut dir = Path::new(root).join(path.trim_start_matches('/'));
    let mut tightest: Option<(u64, PathBuf)> = None;
    loop {
        // v1 writes no limit as a number near 2^63, v2 as `max`.
        if let Some(limit) = read(&dir, limit_file).filter(|&l| l < 1 << 62)
            && tightest.as_ref().is_none_or(|(t, _)| limit < *t)
        {
            tightest = Some((limit, dir.clone()));
        }
        if dir == Path::new(root) || !dir.pop() {
            break;
        }
    }
    let (limit, dir) = tightest?;
    let usage = read(&dir, usage_file)?;
    let stat = std::fs::read_to_string(dir.join("memory.stat")).unwrap_or_default();
    let inactive = stat
        .lines()
        .find_map(|l| {
            l.strip_prefix(inactive)?
                .strip_prefix(' ')?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    Some(Memory {
        limit,
        working_set: usage.saturating_sub(inactive),
    })
}
