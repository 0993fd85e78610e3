//! Where a node's distribution keeps containerd's config, and how it is made.

use std::path::{Component, Path, PathBuf};

/// How containerd's config is made on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// A TOML file containerd reads (or a file of one of its `imports`).
    File(PathBuf),
    /// A Go template the distribution renders into `rendered` when it starts containerd.
    Template {
        /// The template (which may not exist yet).
        template: PathBuf,
        /// The config rendered from it, which containerd reads.
        rendered: PathBuf,
    },
}

/// A node's containerd, as found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Node {
    /// What runs containerd: a person reads it.
    pub(crate) distribution: &'static str,
    /// Where its config comes from (host paths).
    pub(crate) source: Source,
    /// The config file containerd is started with (host path), to find its process by.
    pub(crate) config: PathBuf,
    /// containerd's gRPC socket (host path), unless its config names another.
    pub(crate) socket: PathBuf,
}

/// k3s's and RKE2's generated config, template and socket, under their data directory.
fn rancher(distribution: &'static str, data: &str, rendered_version: Option<u8>) -> Node {
    let dir = Path::new(data).join("agent/etc/containerd");
    // containerd 2 (config version 3) reads `config-v3.toml.tmpl` first.
    let template = match rendered_version {
        Some(3..) => "config-v3.toml.tmpl",
        _ => "config.toml.tmpl",
    };
    Node {
        distribution,
        source: Source::Template {
            template: dir.join(template),
            rendered: dir.join("config.toml"),
        },
        config: dir.join("config.toml"),
        socket: "/run/k3s/containerd/containerd.sock".into(),
    }
}

/// The node's containerd: `config` when given (a file ending `.tmpl` is a template rendered
/// beside it), else the first distribution whose files are under `root`. `version_of` reads the
/// version of a rendered config.
pub(crate) fn find(
    root: &Path,
    config: Option<&Path>,
    version_of: impl Fn(&Path) -> Option<u8>,
) -> Node {
    if let Some(path) = config {
        let source = match path.to_str().and_then(|p| p.strip_suffix(".tmpl")) {
            Some(rendered) => Source::Template {
                template: path.to_owned(),
                rendered: PathBuf::from(rendered.replace("config-v3.toml", "config.toml")),
            },
            None => Source::File(path.to_owned()),
        };
        let read = match &source {
            Source::File(p) => p.clone(),
            Source::Template { rendered, .. } => rendered.clone(),
        };
        return Node {
            distribution: "containerd (--config)",
            source,
            config: read,
            socket: "/run/containerd/containerd.sock".into(),
        };
    }
    for (distribution, data) in [
        ("k3s", "/var/lib/rancher/k3s"),
        ("RKE2", "/var/lib/rancher/rke2"),
    ] {
        let rendered = Path::new(data).join("agent/etc/containerd/config.toml");
        if host(root, &rendered).exists() {
            return rancher(distribution, data, version_of(&host(root, &rendered)));
        }
    }
    let microk8s = Path::new("/var/snap/microk8s/current/args");
    if host(root, microk8s).exists() {
        return Node {
            distribution: "MicroK8s",
            source: Source::File(microk8s.join("containerd-template.toml")),
            config: microk8s.join("containerd.toml"),
            socket: "/var/snap/microk8s/common/run/containerd.sock".into(),
        };
    }
    if host(root, Path::new("/etc/k0s/containerd.toml")).exists() {
        // k0s imports every file of `containerd.d` into the config it generates.
        return Node {
            distribution: "k0s",
            source: Source::File("/etc/k0s/containerd.d/wasmpod.toml".into()),
            config: "/etc/k0s/containerd.toml".into(),
            socket: "/run/k0s/containerd.sock".into(),
        };
    }
    Node {
        distribution: "containerd (kubeadm and other nodes)",
        source: Source::File("/etc/containerd/config.toml".into()),
        config: "/etc/containerd/config.toml".into(),
        socket: "/run/containerd/containerd.sock".into(),
    }
}

/// `path` (absolute, on the host) as this process sees it, the host's root filesystem being at
/// `root`. Only normal components are kept: `..` cannot lead out of `root`.
pub(crate) fn host(root: &Path, path: &Path) -> PathBuf {
    let mut out = root.to_owned();
    out.extend(path.components().filter_map(|c| match c {
        Component::Normal(part) => Some(part),
        _ => None,
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distributions_are_found_by_their_files() {
        let root = tempfile::tempdir().unwrap();
        let none = |_: &Path| None;
        assert_eq!(
            find(root.path(), None, none).source,
            Source::File("/etc/containerd/config.toml".into())
        );
        let k3s = host(
            root.path(),
            Path::new("/var/lib/rancher/k3s/agent/etc/containerd"),
        );
        std::fs::create_dir_all(&k3s).unwrap();
        std::fs::write(k3s.join("config.toml"), "version = 3\n").unwrap();
        let node = find(root.path(), None, |_| Some(3));
        assert_eq!(node.distribution, "k3s");
        assert_eq!(
            node.source,
            Source::Template {
                template: "/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.tmpl".into(),
                rendered: "/var/lib/rancher/k3s/agent/etc/containerd/config.toml".into(),
            }
        );
        assert_eq!(
            node.socket,
            Path::new("/run/k3s/containerd/containerd.sock")
        );
        let given = find(root.path(), Some(Path::new("/x/config-v3.toml.tmpl")), none);
        assert_eq!(
            given.source,
            Source::Template {
                template: "/x/config-v3.toml.tmpl".into(),
                rendered: "/x/config.toml".into()
            }
        );
    }

    #[test]
    fn host_paths_stay_under_the_root() {
        assert_eq!(
            host(Path::new("/host"), Path::new("/etc/../../x/./y")),
            Path::new("/host/etc/x/y")
        );
        assert_eq!(
            host(Path::new("/"), Path::new("/etc/x")),
            Path::new("/etc/x")
        );
    }
}
