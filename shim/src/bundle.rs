//! An OCI bundle as a task: containerd's snapshot mounted as the root filesystem, and
//! config.json's argv, environment, working directory, mounts, limits and annotations as a
//! task's options, with the guest's `.wasm` found in the root filesystem.
//!
//! What the guest sees: each top-level directory of the root filesystem at its path (read-only
//! when the root is), and every bind mount of a directory at its destination, read-only where it
//! is mounted read-only. `/proc`, `/sys` and `/dev` are never shown, nor is `/` itself (files at
//! the very top of the image are not either), nor are mounts of single files (the kubelet's
//! `/etc/hosts`): WASI gives a guest directories.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, bail};
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use containerd_shim::protos::types::mount::Mount;
use oci_spec::runtime::Spec;
use wasmpod::task::TaskOptions;

/// The kernel's file systems, which a guest has no use for (and through `/proc/self/mem` would
/// reach the runtime's memory).
const SYSTEM: [&str; 3] = ["/proc", "/sys", "/dev"];

/// The largest `.wasm` a container may name.
pub(crate) const MAX_WASM: u64 = 512 << 20;

/// The annotation the CRI marks a pod's sandbox (pause) container with.
const CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";

/// A container's bundle, its root filesystem mounted.
#[derive(Debug)]
pub(crate) struct Bundle {
    pub(crate) spec: Spec,
    pub(crate) rootfs: PathBuf,
}

impl Bundle {
    /// Reads `dir/config.json`.
    pub(crate) fn load(dir: &Path) -> anyhow::Result<Bundle> {
        let config = dir.join("config.json");
        let spec =
            Spec::load(&config).with_context(|| format!("cannot read {}", config.display()))?;
        let root = spec
            .root()
            .as_ref()
            .map(|r| r.path().clone())
            .unwrap_or_else(|| "rootfs".into());
        Ok(Bundle {
            rootfs: dir.join(root),
            spec,
        })
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.spec
            .annotations()
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    /// The CRI's pod sandbox (pause) container: nothing runs in it.
    pub(crate) fn is_sandbox(&self) -> bool {
        self.annotation(CONTAINER_TYPE) == Some("sandbox")
    }

    /// The cgroup config.json puts the container in, as a path below the hierarchy's root.
    pub(crate) fn cgroups_path(&self) -> Option<PathBuf> {
        self.spec.linux().as_ref()?.cgroups_path().clone()
    }

    /// The memory limit in bytes, when there is one.
    pub(crate) fn memory_limit(&self) -> Option<u64> {
        let memory = self
            .spec
            .linux()
            .as_ref()?
            .resources()
            .as_ref()?
            .memory()
            .as_ref()?;
        memory
            .limit()
            .and_then(|l| u64::try_from(l).ok())
            .filter(|l| *l > 0)
    }

    /// The process's argv.
    pub(crate) fn args(&self) -> Vec<String> {
        self.spec
            .process()
            .as_ref()
            .and_then(|p| p.args().clone())
            .unwrap_or_default()
    }

    fn env(&self) -> Vec<String> {
        self.spec
            .process()
            .as_ref()
            .and_then(|p| p.env().clone())
            .unwrap_or_default()
    }

    /// The guest's `.wasm`: `args[0]`, a path in the root filesystem (relative to the working
    /// directory), or a name looked up in the container's `PATH`. Read within the root: a
    /// symbolic link in the image cannot lead out of it.
    pub(crate) fn wasm(&self) -> anyhow::Result<(PathBuf, Vec<u8>)> {
        let candidates = self.candidates()?;
        let root = Dir::open_ambient_dir(&self.rootfs, ambient_authority()).with_context(|| {
            format!("cannot open the root filesystem {}", self.rootfs.display())
        })?;
        for candidate in &candidates {
            let inside = in_root(candidate);
            let Ok(file) = root.open(&inside) else {
                continue;
            };
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            if len > MAX_WASM {
                bail!(
                    "{} is {len} bytes, more than the {MAX_WASM} a container's .wasm may be",
                    candidate.display()
                );
            }
            let mut wasm = Vec::with_capacity(len as usize);
            // Bounded as it is read too: the file may grow after its size was looked at.
            file.into_std()
                .take(MAX_WASM + 1)
                .read_to_end(&mut wasm)
                .with_context(|| format!("cannot read {}", candidate.display()))?;
            if wasm.len() as u64 > MAX_WASM {
                bail!(
                    "{} is more than the {MAX_WASM} bytes a container's .wasm may be",
                    candidate.display()
                );
            }
            return Ok((candidate.clone(), wasm));
        }
        bail!(
            "{}: no such file in the container's root filesystem",
            self.args()[0]
        );
    }

    /// Where the guest's `.wasm` may be (absolute paths in the root filesystem): `args[0]`
    /// against the working directory, or a name looked up in the container's `PATH`.
    pub(crate) fn candidates(&self) -> anyhow::Result<Vec<PathBuf>> {
        let args = self.args();
        let Some(program) = args.first() else {
            bail!("config.json: process.args is empty: there is no .wasm to run");
        };
        let cwd = self
            .spec
            .process()
            .as_ref()
            .map(|p| p.cwd().clone())
            .unwrap_or_else(|| "/".into());
        Ok(if program.contains('/') {
            vec![cwd.join(program)]
        } else {
            let path = self
                .env()
                .iter()
                .find_map(|kv| kv.strip_prefix("PATH=").map(str::to_owned))
                .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".to_owned());
            path.split(':')
                .map(|dir| Path::new(dir).join(program))
                .chain([Path::new("/").join(program)])
                .collect()
        })
    }

    /// The task's options: argv, environment, directories, working directory, limits and the
    /// `wasmpod.dev/*` annotations (the pod's, passed on by the CRI's `pod_annotations`).
    pub(crate) fn options(&self) -> anyhow::Result<TaskOptions> {
        let process = self
            .spec
            .process()
            .as_ref()
            .context("config.json has no process")?;
        if process.terminal().unwrap_or(false) {
            bail!("wasmpod gives containers no terminal (TTY): run without -t / tty: true");
        }
        let env = self.env();
        let mut options = TaskOptions::new(self.args())
            .envs(env.iter().map(|kv| kv.split_once('=').unwrap_or((kv, ""))))
            .working_dir(process.cwd().to_string_lossy());
        for (host, guest, read_only) in self.directories()? {
            options = options.mount(host, guest, read_only);
        }
        if let Some(limit) = self.memory_limit() {
            options = options.memory_limit(limit);
        }
        if let Some(share) = self.cpu_share() {
            options = options.cpu_share(share);
        }
        let ours: BTreeMap<String, String> = self
            .spec
            .annotations()
            .iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("wasmpod.dev/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        options.annotations(&ours).map_err(|errors| {
            let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
            anyhow::anyhow!("{}", all.join("; "))
        })
    }

    fn cpu_share(&self) -> Option<f64> {
        let cpu = self
            .spec
            .linux()
            .as_ref()?
            .resources()
            .as_ref()?
            .cpu()
            .as_ref()?;
        cpu_share(cpu.quota(), cpu.period())
    }

    /// (host directory, guest path, read-only) of every directory the guest sees.
    fn directories(&self) -> anyhow::Result<Vec<(PathBuf, String, bool)>> {
        let read_only_root = self
            .spec
            .root()
            .as_ref()
            .and_then(|r| r.readonly())
            .unwrap_or(false);
        let root = Dir::open_ambient_dir(&self.rootfs, ambient_authority()).with_context(|| {
            format!("cannot open the root filesystem {}", self.rootfs.display())
        })?;
        let mut dirs = Vec::new();
        for entry in root.entries()?.flatten() {
            let name = entry.file_name();
            let guest = format!("/{}", name.to_string_lossy());
            // A symbolic link at the top of the image is not followed (it could lead anywhere
            // on the host).
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && !system(Path::new(&guest)) {
                dirs.push((self.rootfs.join(&name), guest, read_only_root));
            }
        }
        for mount in self.spec.mounts().iter().flatten() {
            let options = mount.options().clone().unwrap_or_default();
            let bind = mount.typ().as_deref() == Some("bind")
                || options.iter().any(|o| o == "bind" || o == "rbind");
            let destination = mount.destination();
            let Some(source) = mount.source() else {
                continue;
            };
            if !bind || system(destination) || !source.is_dir() {
                continue;
            }
            let guest = destination.to_string_lossy().into_owned();
            dirs.retain(|(_, g, _)| *g != guest);
            dirs.push((source.clone(), guest, options.iter().any(|o| o == "ro")));
        }
        Ok(dirs)
    }
}

/// A CPU quota per period as a share of one core (none without a positive quota).
pub(crate) fn cpu_share(quota: Option<i64>, period: Option<u64>) -> Option<f64> {
    let quota = quota.filter(|q| *q > 0)?;
    let period = period.filter(|p| *p > 0).unwrap_or(100_000);
    Some(quota as f64 / period as f64)
}

fn system(path: &Path) -> bool {
    SYSTEM.iter().any(|s| path.starts_with(s))
}

/// `path` (absolute in the container) as a path relative to its root, `..` kept for the root's
/// own checks (cap-std refuses to leave it).
fn in_root(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, Component::RootDir | Component::Prefix(_)))
        .collect()
}

/// Mounts containerd's snapshot (`mounts`, from the create request) at `rootfs`; with none the
/// bundle's root filesystem is already there.
pub(crate) fn mount_rootfs(rootfs: &Path, mounts: &[Mount]) -> anyhow::Result<bool> {
    if mounts.is_empty() {
        return Ok(false);
    }
    std::fs::create_dir_all(rootfs).with_context(|| format!("cannot make {}", rootfs.display()))?;
    for m in mounts {
        let typ = (!m.type_.is_empty()).then_some(m.type_.as_str());
        let source = (!m.source.is_empty()).then_some(m.source.as_str());
        containerd_shim::mount::mount_rootfs(typ, source, &m.options, rootfs)
            .with_context(|| format!("cannot mount the root filesystem at {}", rootfs.display()))?;
    }
    Ok(true)
}

/// Unmounts whatever is mounted at `rootfs` (lazily: a file still open keeps it until closed).
pub(crate) fn unmount_rootfs(rootfs: &Path) {
    let Ok(path) = std::ffi::CString::new(rootfs.as_os_str().as_encoded_bytes()) else {
        return;
    };
    // Layers mounted over each other come off one by one (at most a few).
    for _ in 0..16 {
        // SAFETY: a plain system call with a NUL-terminated path.
        if unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } != 0 {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_relative_to_the_root() {
        assert_eq!(in_root(Path::new("/app.wasm")), PathBuf::from("app.wasm"));
        assert_eq!(
            in_root(Path::new("/usr/bin/../app.wasm")),
            PathBuf::from("usr/bin/../app.wasm")
        );
    }

    #[test]
    fn a_quota_is_a_share_of_a_core() {
        assert_eq!(cpu_share(Some(50_000), Some(100_000)), Some(0.5));
        assert_eq!(cpu_share(Some(200_000), None), Some(2.0));
        assert_eq!(cpu_share(Some(-1), Some(100_000)), None);
        assert_eq!(cpu_share(None, Some(100_000)), None);
    }

    #[test]
    fn the_images_links_do_not_lead_out_of_its_root() {
        let dir = tempfile::tempdir().unwrap();
        let rootfs = dir.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("etc")).unwrap();
        std::fs::write(dir.path().join("secret.wasm"), b"\0asm\x01\0\0\0").unwrap();
        std::os::unix::fs::symlink("../secret.wasm", rootfs.join("app.wasm")).unwrap();
        std::os::unix::fs::symlink("/", rootfs.join("host")).unwrap();
        let spec = serde_json::json!({
            "ociVersion": "1.0.2",
            "root": {"path": "rootfs", "readonly": true},
            "process": {
                "args": ["/app.wasm"], "cwd": "/", "env": ["PATH=/bin"],
                "user": {"uid": 0, "gid": 0}
            },
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        });
        std::fs::write(dir.path().join("config.json"), spec.to_string()).unwrap();
        let bundle = Bundle::load(dir.path()).unwrap();
        let err = bundle.wasm().unwrap_err().to_string();
        assert!(err.contains("no such file"), "{err}");
        let dirs = bundle.directories().unwrap();
        assert_eq!(dirs, vec![(rootfs.join("etc"), "/etc".to_owned(), true)]);
    }
}
