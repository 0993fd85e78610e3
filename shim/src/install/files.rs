//! The installer's files on the host: the record of what it did, the backup beside the edited
//! file, the shim put in place, each written whole or not at all.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::node::host;

/// What `install` did, kept beside the file it edited so that `uninstall` undoes exactly that.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Record {
    /// The edited file (host path).
    pub(super) file: PathBuf,
    /// Whether it existed before (its bytes are in the backup).
    pub(super) existed: bool,
    /// The SHA-256 of what `install` wrote.
    pub(super) written: String,
    /// The shim's path (host path), if `install` put it there.
    pub(super) shim: Option<PathBuf>,
}

/// The paths of an edit: the file, its backup and the record.
pub(super) struct Paths {
    pub(super) file: PathBuf,
    pub(super) backup: PathBuf,
    pub(super) record: PathBuf,
}

impl Paths {
    pub(super) fn of(root: &Path, file: &Path) -> Paths {
        let file = host(root, file);
        let mut backup = file.clone().into_os_string();
        backup.push(".before-wasmpod");
        let record = file.with_file_name("wasmpod-install.json");
        Paths {
            file,
            backup: backup.into(),
            record,
        }
    }

    pub(super) fn record(&self) -> anyhow::Result<Option<Record>> {
        match std::fs::read(&self.record) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).with_context(|| {
                format!("{} is not the installer's record", self.record.display())
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", self.record.display())),
        }
    }
}

/// Puts this binary at `path` unless the same bytes are there: whether it did.
pub(super) fn put_shim(path: &Path) -> anyhow::Result<bool> {
    let me = std::env::current_exe().context("cannot find this binary")?;
    let bytes = std::fs::read(&me).with_context(|| format!("cannot read {}", me.display()))?;
    if std::fs::read(path).is_ok_and(|there| there == bytes) {
        return Ok(false);
    }
    let dir = path.parent().context("the shim's path has no directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write_atomically(path, &bytes, path)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))?;
    Ok(true)
}

/// Writes `bytes` to `path` through a file beside it and a rename, so that a reader never sees
/// half of it; the new file takes `like`'s permissions when `like` exists.
pub(super) fn write_atomically(path: &Path, bytes: &[u8], like: &Path) -> anyhow::Result<()> {
    let dir = path.parent().context("a path without a directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".wasmpod-install")
        .tempfile_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    tmp.write_all(bytes)?;
    if let Ok(meta) = std::fs::metadata(like) {
        tmp.as_file().set_permissions(meta.permissions())?;
    } else {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    if let Ok(dir) = std::fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// A text file's contents, `None` when it is not there.
pub(super) fn read_optional(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// The SHA-256 of `bytes`, in hex.
pub(super) fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
