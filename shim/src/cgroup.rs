//! The cgroup the shim's process runs in: the one config.json names for the first container it
//! serves (under the CRI, the pod's sandbox; under `ctr run`, the container), with that
//! container's memory limit. A pod's containers share the process, so each one's own limits are
//! the runtime's (its memory budget, its CPU share); the cgroup bounds them all together.
//!
//! A path in systemd's `slice:prefix:name` form (what containerd's CRI writes when the kubelet's
//! cgroup driver is systemd, its pod cgroups being slices) is the cgroup systemd would give that
//! unit: the slice under its parents (`kubepods-besteffort-pod1.slice` is
//! `kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice`), the scope
//! `prefix-name.scope` in it. The shim makes it itself in the cgroup filesystem, as the cgroupfs
//! driver does, rather than asking systemd over D-Bus for a transient unit: the kubelet's slices
//! and their accounting hold the pod, but `systemctl` does not list the scope.

use std::path::Path;

use cgroups_rs::{Cgroup, CgroupPid, hierarchies, memory::MemController};

/// The cgroup this process joined; it goes back to its parent cgroup and removes this one when
/// dropped (the shim's end).
pub(crate) struct Joined(Cgroup);

/// Moves this process into the cgroup at `path` (made if needed), limited to `memory` bytes.
pub(crate) fn join(path: &Path, memory: Option<u64>) -> anyhow::Result<Joined> {
    let path = path.to_string_lossy();
    let relative = if path.contains(':') {
        systemd_path(&path)?
    } else {
        cgroupfs_path(&path)
    };
    if relative.is_empty() {
        anyhow::bail!("{path}: names the root cgroup, which no container joins");
    }
    let relative = relative.as_str();
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

/// A cgroupfs path relative to the hierarchy's root, cleaned as runc cleans it: read as rooted
/// at `/`, so that no `..` leads above the root (`/../../tmp/x` is `tmp/x`), without `.` or
/// empty components.
fn cgroupfs_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    parts.join("/")
}

/// The cgroup (relative to the hierarchy's root) systemd gives the unit that `spec`, in
/// systemd's `slice:prefix:name` form, names: runc's and containerd's reading of it.
fn systemd_path(spec: &str) -> anyhow::Result<String> {
    let [slice, prefix, name] = spec.splitn(3, ':').collect::<Vec<_>>()[..] else {
        anyhow::bail!("{spec}: a systemd cgroup is `slice:prefix:name`");
    };
    if !unit_name(name) || !(prefix.is_empty() || unit_name(prefix)) {
        anyhow::bail!("{spec}: a systemd unit's prefix and name are letters, digits and `-_.@`");
    }
    let slice = if slice.is_empty() {
        "system.slice"
    } else {
        slice
    };
    let mut parts = expand_slice(slice)
        .ok_or_else(|| anyhow::anyhow!("{spec}: `{slice}` is not a systemd slice name"))?;
    // A name that is itself a slice is that slice, else a scope of prefix and name.
    parts.push(if name.ends_with(".slice") {
        name.to_owned()
    } else if prefix.is_empty() {
        format!("{name}.scope")
    } else {
        format!("{prefix}-{name}.scope")
    });
    Ok(parts.join("/"))
}

/// A part of a unit's name: letters, digits and `-_.@`, not starting with a dot.
fn unit_name(part: &str) -> bool {
    !part.is_empty()
        && part.len() <= 255
        && !part.starts_with('.')
        && part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b))
}

/// `a-b-c.slice` as the cgroups from the root down, `a.slice`, `a-b.slice`, `a-b-c.slice`
/// (`-.slice` is the root itself): `None` for a name systemd would not take as a slice.
fn expand_slice(slice: &str) -> Option<Vec<String>> {
    let stem = slice.strip_suffix(".slice")?;
    if stem == "-" {
        return Some(Vec::new());
    }
    if !unit_name(stem) || stem.starts_with('-') || stem.ends_with('-') || stem.contains("--") {
        return None;
    }
    let parents = stem
        .match_indices('-')
        .map(|(at, _)| format!("{}.slice", &stem[..at]));
    Some(parents.chain([slice.to_owned()]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroupfs_paths_stay_under_the_root() {
        for (path, relative) in [
            (
                "/kubepods/besteffort/pod1/abc",
                "kubepods/besteffort/pod1/abc",
            ),
            ("/../../../tmp/x", "tmp/x"),
            ("kubepods/../../etc", "etc"),
            ("/a/./b//c/..", "a/b"),
            ("..", ""),
        ] {
            assert_eq!(cgroupfs_path(path), relative, "{path}");
        }
    }

    #[test]
    fn systemd_units_are_their_cgroups_under_the_slices_parents() {
        for (spec, path) in [
            (
                "kubepods-besteffort-pod1_2.slice:cri-containerd:abc",
                "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1_2.slice/cri-containerd-abc.scope",
            ),
            (
                "kubepods.slice:cri-containerd:abc",
                "kubepods.slice/cri-containerd-abc.scope",
            ),
            ("-.slice:cri:abc", "cri-abc.scope"),
            (":cri:abc", "system.slice/cri-abc.scope"),
            ("a-b.slice::abc", "a.slice/a-b.slice/abc.scope"),
            ("a.slice:x:a-b.slice", "a.slice/a-b.slice"),
        ] {
            assert_eq!(systemd_path(spec).unwrap(), path, "{spec}");
        }
        for bad in [
            "a.slice:b",
            "a:cri:abc",
            "-a.slice:cri:abc",
            "a-.slice:cri:abc",
            "a--b.slice:cri:abc",
            "../x.slice:cri:abc",
            "a.slice:cri:../x",
            "a.slice:cri/x:abc",
            "a.slice:cri:",
            "..slice:cri:abc",
            "a.slice:cri:.x",
        ] {
            assert!(systemd_path(bad).is_err(), "{bad}");
        }
    }
}
