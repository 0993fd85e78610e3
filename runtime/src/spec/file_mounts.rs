//! Single-file mounts (a ConfigMap key by its `subPath`, a `hostPath` file): WASI preopens
//! only directories, so each guest directory holding mounted files is given a directory of
//! its own, holding them. That directory hides whatever another mount shows at that path, so
//! a file whose directory is, or lies inside, another mount's is refused with the reason.

use super::errors::{FieldError, FieldPath};
use super::model::{FileDir, Mount};

/// Groups a container's file mounts by guest directory.
pub(super) fn group(
    path: &FieldPath,
    mounts: &[Mount],
    errors: &mut Vec<FieldError>,
) -> Vec<FileDir> {
    let inside = |outer: &str, inner: &str| {
        inner == outer || inner.starts_with(&format!("{}/", outer.trim_end_matches('/')))
    };
    let mut dirs: Vec<FileDir> = Vec::new();
    for (i, m) in mounts.iter().enumerate().filter(|(_, m)| m.file) {
        let at = path.child("volumeMounts").index(i).child("mountPath");
        let Some((dir, name)) = m
            .path
            .rsplit_once('/')
            .filter(|(_, name)| !name.is_empty() && *name != "." && *name != "..")
        else {
            errors.push(FieldError::invalid(
                at,
                format!(
                    "invalid value {:?}: a file's mountPath must end in its name",
                    m.path
                ),
            ));
            continue;
        };
        let dir = if dir.is_empty() { "/" } else { dir };
        if let Some(other) = mounts
            .iter()
            .find(|o| !std::ptr::eq(*o, m) && inside(&o.path, dir))
        {
            errors.push(FieldError::invalid(
                at,
                format!(
                    "invalid value {:?}: WASI preopens directories only, so the file is given a \
                     directory of its own at {dir}, which would hide what the mount at {} shows \
                     there: mount the file's directory instead, or put the file outside other \
                     mounts",
                    m.path, other.path
                ),
            ));
            continue;
        }
        match dirs.iter_mut().find(|d| d.dir == dir) {
            Some(d) if d.read_only != m.read_only => errors.push(FieldError::invalid(
                at,
                format!(
                    "invalid value {:?}: the files mounted in {dir} share one directory, so they \
                     must all be readOnly or all writable",
                    m.path
                ),
            )),
            Some(d) => d.files.push((name.to_owned(), i)),
            None => dirs.push(FileDir {
                dir: dir.to_owned(),
                read_only: m.read_only,
                files: vec![(name.to_owned(), i)],
            }),
        }
    }
    dirs
}
