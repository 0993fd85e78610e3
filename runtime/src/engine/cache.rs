//! The on-disk compile cache: compiled artefacts keyed by the module's hash and the engine's
//! compatibility hash, each file carrying a checksum so that a corrupt or foreign file is
//! recompiled rather than trusted.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

const MAGIC: &[u8; 8] = b"wasmpod1";
const HEADER: usize = MAGIC.len() + 32;

#[derive(Debug)]
pub(crate) struct CompileCache {
    dir: Option<PathBuf>,
    engine_key: [u8; 32],
}

impl CompileCache {
    pub(crate) fn new(dir: Option<PathBuf>, engine: &wasmtime::Engine) -> Self {
        let mut hasher = std::hash::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let mut key = Sha256::new();
        key.update(super::compile::version());
        key.update(hasher.finish().to_le_bytes());
        CompileCache {
            dir: dir.filter(|d| match trusted_dir(d) {
                Ok(()) => true,
                Err(why) => {
                    tracing::warn!(dir = %d.display(), "compile cache disabled: {why}");
                    false
                }
            }),
            engine_key: key.finalize().into(),
        }
    }

    /// The file a module with these bytes is cached in.
    pub(crate) fn path_for(&self, wasm: &[u8]) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        let mut h = Sha256::new();
        h.update(self.engine_key);
        h.update(wasm);
        Some(dir.join(format!("{}.cwasm", hex(&h.finalize()))))
    }

    /// The compiled artefact stored at `path`, when it is there and intact.
    pub(crate) fn read(path: &Path) -> Option<Vec<u8>> {
        let mut bytes = std::fs::read(path).ok()?;
        if bytes.len() < HEADER || &bytes[..MAGIC.len()] != MAGIC {
            return None;
        }
        let sum: [u8; 32] = Sha256::digest(&bytes[HEADER..]).into();
        if sum[..] != bytes[MAGIC.len()..HEADER] {
            tracing::warn!(path = %path.display(), "compile cache entry is corrupt; recompiling");
            return None;
        }
        bytes.drain(..HEADER);
        Some(bytes)
    }

    /// Stores `artefact` at `path` atomically (write to a temporary file, then rename).
    pub(crate) fn write(path: &Path, artefact: &[u8]) -> std::io::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let tmp = dir.join(format!(
            ".tmp-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(MAGIC)?;
        file.write_all(&Sha256::digest(artefact))?;
        file.write_all(artefact)?;
        drop(file);
        std::fs::rename(&tmp, path)
    }
}

/// Makes the cache directory (only its owner may enter it) and checks that it is safe to load
/// native code from: owned by this user and writable by nobody else. A cache file is compiled
/// machine code that wasmpod runs: one another user could write would run as this one.
fn trusted_dir(dir: &Path) -> Result<(), String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create it: {e}"))?;
        let meta = std::fs::metadata(dir).map_err(|e| e.to_string())?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me {
            return Err(format!(
                "it is owned by uid {}, not by this user ({me})",
                meta.uid()
            ));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(format!(
                "others may write to it (mode {:o}); it must be writable by its owner only",
                meta.mode() & 0o777
            ));
        }
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create it: {e}"))?;
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn the_cache_dir_is_private_and_a_shared_one_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("cache");
        trusted_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let why = trusted_dir(&dir).unwrap_err();
        assert!(why.contains("others may write"), "{why}");
    }
}
