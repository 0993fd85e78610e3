//! What a container's `image` names: a `.wasm` file on the node, or an image in a registry
//! (`[registry[:port]/]repo[:tag][@sha256:...]`, with Docker Hub's defaults as Kubernetes has
//! them), and the pull policy that goes with it.

use oci_spec::distribution::Reference;

/// Whether `image` is a file on the node rather than a registry reference: an absolute or
/// `./`/`../` path, a `file://` URL, or a name ending in `.wasm`.
pub(crate) fn is_path(image: &str) -> bool {
    image.starts_with('/')
        || image.starts_with("./")
        || image.starts_with("../")
        || image.starts_with("file://")
        || {
            let image = image.to_ascii_lowercase();
            image.ends_with(".wasm") || image.ends_with(".cwasm")
        }
}

/// `imagePullPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    /// Kubernetes' default: `Always` for `:latest` or no tag (without a digest), else
    /// `IfNotPresent`.
    pub(crate) fn default_for(reference: &Reference) -> PullPolicy {
        if reference.digest().is_none() && reference.tag().is_none_or(|t| t == "latest") {
            PullPolicy::Always
        } else {
            PullPolicy::IfNotPresent
        }
    }
}

/// Parses a registry reference (`app:1.0` is `docker.io/library/app:1.0`).
pub(crate) fn parse(image: &str) -> Result<Reference, String> {
    if image.len() > 4096 {
        return Err("is longer than 4096 bytes".into());
    }
    let reference = image
        .parse::<Reference>()
        .map_err(|e| format!("is neither a .wasm path nor an image reference: {e}"))?;
    if reference
        .repository()
        .bytes()
        .any(|b| b.is_ascii_uppercase())
    {
        return Err("is not an image reference: repository name must be lowercase".into());
    }
    Ok(reference)
}

/// The reference as Kubernetes writes it in `status.containerStatuses[].image`: the registry,
/// the repository, and the tag (`latest` by default) or the digest.
pub(crate) fn shown(reference: &Reference) -> String {
    match (reference.tag(), reference.digest()) {
        (_, Some(digest)) => format!(
            "{}/{}@{digest}",
            reference.registry(),
            reference.repository()
        ),
        (tag, None) => format!(
            "{}/{}:{}",
            reference.registry(),
            reference.repository(),
            tag.unwrap_or("latest")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_follow_docker_hub_defaults() {
        for (image, want, policy) in [
            ("app", "docker.io/library/app:latest", PullPolicy::Always),
            (
                "app:1.0",
                "docker.io/library/app:1.0",
                PullPolicy::IfNotPresent,
            ),
            (
                "org/app:latest",
                "docker.io/org/app:latest",
                PullPolicy::Always,
            ),
            (
                "ghcr.io/org/app:1.0",
                "ghcr.io/org/app:1.0",
                PullPolicy::IfNotPresent,
            ),
            (
                "localhost:5000/app",
                "localhost:5000/app:latest",
                PullPolicy::Always,
            ),
            (
                "127.0.0.1:5000/a/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "127.0.0.1:5000/a/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                PullPolicy::IfNotPresent,
            ),
        ] {
            let r = parse(image).unwrap();
            assert_eq!(shown(&r), want, "{image}");
            assert_eq!(PullPolicy::default_for(&r), policy, "{image}");
        }
        for path in [
            "./app.wasm",
            "/abs/app.wasm",
            "app.wasm",
            "file:///x",
            "../x",
        ] {
            assert!(is_path(path), "{path}");
        }
        assert!(!is_path("ghcr.io/org/app:1.0"));
        for bad in ["UPPER/app", "app:bad tag", "a@sha256:xyz", ""] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
