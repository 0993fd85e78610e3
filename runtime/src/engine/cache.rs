//! The on-disk compile cache: compiled artefacts keyed by the module's hash and the engine's
//! compatibility hash. An artefact is a file wasmtime maps as it is (its code is the page
//! cache's, shared by every process that runs it, never copied); a small file beside it holds
//! its length and CRC-32, so that a truncated or corrupt artefact is recompiled rather than run.
//! (What may write the directory is checked when the cache is opened: the checksum guards
//! against accidents, not against an attacker.)

use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The start of an artefact's sum file.
const MAGIC: &[u8; 8] = b"wasmpod2";
/// Magic, CRC-32, length.
const SUM_LEN: usize = MAGIC.len() + 4 + 8;

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

    /// Whether an intact artefact is stored at `path`: its length and CRC-32 are those its sum
    /// file says. Reads it through a small buffer (the page cache keeps it for the mapping).
    pub(crate) fn intact(path: &Path) -> bool {
        let Ok(sum) = std::fs::read(sum_path(path)) else {
            return false;
        };
        if sum.len() != SUM_LEN || &sum[..MAGIC.len()] != MAGIC {
            return false;
        }
        let crc = u32::from_le_bytes(sum[8..12].try_into().expect("4 bytes"));
        let len = u64::from_le_bytes(sum[12..20].try_into().expect("8 bytes"));
        let Ok(mut file) = std::fs::File::open(path) else {
            return false;
        };
        let (mut hasher, mut read, mut buf) = (crc32fast::Hasher::new(), 0u64, vec![0; 64 << 10]);
        loop {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    hasher.update(&buf[..n]);
                    read += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        let intact = read == len && hasher.finalize() == crc;
        if !intact {
            tracing::warn!(path = %path.display(), "compile cache entry is corrupt; recompiling");
        }
        intact
    }

    /// Stores `artefact` at `path`, then its sum beside it, each atomically (written to a
    /// temporary file, then renamed): a reader finds no sum, or one that does not match, until
    /// both are in place.
    pub(crate) fn write(path: &Path, artefact: &[u8]) -> std::io::Result<()> {
        let mut sum = Vec::with_capacity(SUM_LEN);
        sum.extend_from_slice(MAGIC);
        sum.extend_from_slice(&crc32fast::hash(artefact).to_le_bytes());
        sum.extend_from_slice(&(artefact.len() as u64).to_le_bytes());
        write_atomically(path, artefact)?;
        write_atomically(&sum_path(path), &sum)
    }
}

/// The file holding the length and CRC-32 of the artefact at `path`.
fn sum_path(path: &Path) -> PathBuf {
    path.with_extension("sum")
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".tmp-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    drop(file);
    std::fs::rename(&tmp, path)
}

/// Makes the cache directory (only its owner may enter it) and checks that it is safe to load
/// native code from: owned by this user and writable by nobody else. A cache file is compiled
/// machine code that wasmpod runs: one another user could write would run as this one.
fn trusted_dir(dir: &Path) -> Result<(), String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        let meta = match std::fs::metadata(dir) {
            Ok(meta) => meta,
            Err(_) => {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| format!("cannot create it: {e}"))?;
                std::fs::metadata(dir).map_err(|e| e.to_string())?
            }
        };
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

    #[test]
    fn an_artefact_is_intact_only_with_its_own_sum() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.cwasm");
        assert!(!CompileCache::intact(&path), "nothing there");
        let artefact: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        CompileCache::write(&path, &artefact).unwrap();
        assert!(CompileCache::intact(&path));
        assert_eq!(std::fs::read(&path).unwrap(), artefact, "stored as it is");
        // One byte changed, the file cut short, or its sum gone: recompiled.
        let mut flipped = artefact.clone();
        flipped[100_000] ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        assert!(!CompileCache::intact(&path));
        std::fs::write(&path, &artefact[..1000]).unwrap();
        assert!(!CompileCache::intact(&path));
        CompileCache::write(&path, &artefact).unwrap();
        std::fs::remove_file(sum_path(&path)).unwrap();
        assert!(!CompileCache::intact(&path));
    }
}
