//! The node's image store: content-addressed blobs (`blobs/sha256/<hex>`), each written under
//! `tmp/` and renamed into place only once its digest is checked, so that a half-written pull
//! never becomes visible, and checked again whenever it is used; and a record per image
//! reference (`refs/<sha256 of the reference>.json`) of what it resolved to.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a reference resolved to when it was pulled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The reference, as `status.containerStatuses[].image` shows it.
    pub reference: String,
    /// `registry/repo@sha256:...` of the manifest.
    pub image_id: String,
    /// The digest of the `.wasm` blob.
    pub wasm: String,
    /// The image config's `Entrypoint` and `Cmd` (an ordinary image's).
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    /// Seconds since the epoch of its last use (for garbage collection).
    pub last_used: u64,
    /// The blob is machine code (a precompiled layer): used only while the node trusts the
    /// registry with machine code.
    #[serde(default)]
    pub precompiled: bool,
    /// The id of the key whose cosign signature of the image was checked at its pull.
    #[serde(default)]
    pub signed_by: Option<String>,
}

pub(crate) struct Store {
    root: PathBuf,
}

/// `sha256:<64 hex>` and its hex part; `None` for anything else (never a path).
fn hex_of(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
    .then_some(hex)
}

pub(crate) fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Store {
    /// Opens (making) the store under `root`; what a pull interrupted by a crash left in
    /// `tmp/` is removed.
    pub(crate) fn open(root: &Path) -> std::io::Result<Store> {
        let _ = std::fs::remove_dir_all(root.join("tmp"));
        for dir in ["blobs/sha256", "refs", "tmp"] {
            std::fs::create_dir_all(root.join(dir))?;
        }
        Ok(Store {
            root: root.to_owned(),
        })
    }

    fn blob(&self, digest: &str) -> Option<PathBuf> {
        Some(self.root.join("blobs/sha256").join(hex_of(digest)?))
    }

    fn record_path(&self, reference: &str) -> PathBuf {
        self.root
            .join("refs")
            .join(format!("{:x}.json", Sha256::digest(reference.as_bytes())))
    }

    /// Writes `bytes` in a file of `dir` under a fresh temporary name, then renames it to
    /// `target`.
    fn write_atomic(&self, target: &Path, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let tmp = self
            .root
            .join("tmp")
            .join(uuid::Uuid::new_v4().simple().to_string());
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, target).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }

    /// Stores `bytes` as a blob, refusing them unless they are `expected` (when given);
    /// returns their digest.
    pub(crate) fn put_blob(&self, expected: Option<&str>, bytes: &[u8]) -> Result<String, String> {
        let digest = digest_of(bytes);
        if let Some(want) = expected
            && want != digest
        {
            return Err(format!(
                "the content's digest is {digest}, not {want}: refused"
            ));
        }
        let path = self.blob(&digest).ok_or("bad digest")?;
        if !path.is_file() {
            self.write_atomic(&path, bytes)
                .map_err(|e| format!("cannot store {digest}: {e}"))?;
        }
        Ok(digest)
    }

    /// The blob's file, if it is there (its content not checked).
    pub(crate) fn existing(&self, digest: &str) -> Option<PathBuf> {
        self.blob(digest).filter(|p| p.is_file())
    }

    /// The blob's file, after checking that its content is its digest (a corrupt blob is
    /// removed, so the image is pulled again).
    pub(crate) fn verified(&self, digest: &str) -> Option<PathBuf> {
        let path = self.blob(digest)?;
        let bytes = std::fs::read(&path).ok()?;
        if digest_of(&bytes) == digest {
            Some(path)
        } else {
            tracing::warn!(%digest, "a stored image blob is corrupt: removed");
            let _ = std::fs::remove_file(&path);
            None
        }
    }

    /// The record of `reference`, if it was pulled.
    pub(crate) fn record(&self, reference: &str) -> Option<Record> {
        let text = std::fs::read(self.record_path(reference)).ok()?;
        serde_json::from_slice::<Record>(&text)
            .ok()
            .filter(|r| r.reference == reference)
    }

    pub(crate) fn put_record(&self, record: &Record) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(record).map_err(std::io::Error::other)?;
        self.write_atomic(&self.record_path(&record.reference), &bytes)
    }

    /// Every record and the stored blobs with their sizes.
    fn contents(&self) -> (Vec<Record>, Vec<(String, u64)>) {
        let records = std::fs::read_dir(self.root.join("refs"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| serde_json::from_slice::<Record>(&std::fs::read(e.path()).ok()?).ok())
            .collect();
        let blobs = std::fs::read_dir(self.root.join("blobs/sha256"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let size = e.metadata().ok()?.len();
                Some((format!("sha256:{}", e.file_name().to_str()?), size))
            })
            .collect();
        (records, blobs)
    }

    /// The kubelet's image garbage collection: when the blobs take more than `high` of
    /// `limit`, the images least recently used that no pod uses are removed until they take
    /// `low` or less. Blobs no record names go too. Returns the references removed.
    pub(crate) fn collect(
        &self,
        limit: u64,
        (high, low): (u64, u64),
        in_use: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let (mut records, blobs) = self.contents();
        let size_of = |digest: &str| {
            blobs
                .iter()
                .find(|(d, _)| d == digest)
                .map_or(0, |(_, s)| *s)
        };
        let mut used: u64 = blobs.iter().map(|(_, s)| s).sum();
        let mut removed = Vec::new();
        if used > limit / 100 * high {
            records.sort_by_key(|r| r.last_used);
            let mut kept = Vec::new();
            for r in records {
                if used > limit / 100 * low && !in_use(&r.wasm) {
                    let _ = std::fs::remove_file(self.record_path(&r.reference));
                    removed.push(r.reference.clone());
                    // The blob goes unless another record names it.
                    used = used.saturating_sub(size_of(&r.wasm));
                } else {
                    kept.push(r);
                }
            }
            records = kept;
        }
        for (digest, _) in &blobs {
            if !records.iter().any(|r| &r.wasm == digest)
                && !in_use(digest)
                && let Some(path) = self.blob(digest)
            {
                let _ = std::fs::remove_file(path);
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_are_checked_written_whole_and_collected_least_recent_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let a = vec![1u8; 1000];
        let wrong = digest_of(b"something else");
        assert!(store.put_blob(Some(&wrong), &a).is_err());
        assert!(store.verified(&digest_of(&a)).is_none(), "nothing stored");
        let da = store.put_blob(None, &a).unwrap();
        assert!(store.verified(&da).is_some());
        let db = store.put_blob(None, &[2u8; 1000]).unwrap();
        for (i, (r, d)) in [("x/a:1", &da), ("x/b:1", &db)].into_iter().enumerate() {
            store
                .put_record(&Record {
                    reference: r.into(),
                    image_id: format!("x/a@{d}"),
                    wasm: d.clone(),
                    entrypoint: None,
                    cmd: None,
                    last_used: i as u64,
                    precompiled: false,
                    signed_by: None,
                })
                .unwrap();
        }
        // Under the high threshold: nothing goes.
        assert!(store.collect(10_000, (85, 80), |_| false).is_empty());
        // Over it: the least recently used, unless in use.
        assert!(store.collect(2_000, (85, 50), |d| d == da).len() == 1);
        assert!(store.record("x/a:1").is_some(), "in use, kept");
        assert!(store.record("x/b:1").is_none());
        assert!(store.verified(&db).is_none(), "its blob went with it");
        // A corrupt blob is refused and removed.
        std::fs::write(store.blob(&da).unwrap(), b"corrupt").unwrap();
        assert!(store.verified(&da).is_none());
        assert!(!store.blob(&da).unwrap().exists());
        assert!(hex_of("sha256:../../etc").is_none());
    }
}
