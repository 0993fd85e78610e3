//! The cgroup the shim's process runs in: the one config.json names for the first container it
//! serves (under the CRI, the pod's sandbox; under `ctr run`, the container), with that
//! container's memory limit. A pod's containers share the process, so each one's own limits are
//! the runtime's (its memory budget, its CPU share); the cgroup bounds them all together.

use std::path::Path;

use cgroups_rs::{Cgroup, CgroupPid, hierarchies, memory::MemController};

/// The cgroup this process joined; it goes back to its parent cgroup and removes this one when
/// dropped (the shim's end).
pub(crate) struct Joined(Cgroup);

/// Moves this process into the cgroup at `path` (made if needed), limited to `memory` bytes.
pub(crate) fn join(path: &Path, memory: Option<u64>) -> anyhow::Result<Joined> {
    let relative = path.to_string_lossy();
    let relative = relative.trim_start_matches('/');
    if relative.contains(':') {
        // systemd's "slice:prefix:name" form: systemd owns those cgroups.
        anyhow::bail!("{relative}: systemd cgroups are not supported; use cgroupfs");
    }
    let cgroup = Cgroup::new(hierarchies::auto(), relative)
        .map_err(|e| anyhow::anyhow!("cannot make the cgroup {relative}: {e}"))?;
    if let Some(limit) = memory
        && let Some(mem) = cgroup.controller_of::<MemController>()
    {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        mem.set_limit(limit)
            .map_err(|e| anyhow::anyhow!("cannot limit the cgroup {relative}'s memory: {e}"))?;
    }
    cgroup
        .add_task_by_tgid(CgroupPid::from(u64::from(std::process::id())))
        .map_err(|e| anyhow::anyhow!("cannot join the cgroup {relative}: {e}"))?;
    Ok(Joined(cgroup))
}

impl Drop for Joined {
    fn drop(&mut self) {
        let pid = CgroupPid::from(u64::from(std::process::id()));
        if self.0.move_task_to_parent_by_tgid(pid).is_ok() {
            let _ = self.0.delete();
        }
    }
}
