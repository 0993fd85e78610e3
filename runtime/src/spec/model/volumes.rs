//! The model's volumes: what a container mounts, and what a volume holds.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::PodSpec;

#[derive(Debug, Clone)]
pub(crate) struct Mount {
    /// Index into [`PodSpec::volumes`].
    pub volume: usize,
    pub path: String,
    pub read_only: bool,
    /// `subPath`: a directory inside the volume (made if missing) mounted instead of its root,
    /// or its file.
    pub sub_path: Option<String>,
    /// A single file (see [`FileDir`]), not a directory.
    pub file: bool,
}

/// The directory of a container's single-file mounts in one guest directory: WASI preopens
/// only directories, so the guest is given a directory of its own at the files' parent, holding
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileDir {
    /// The guest directory (the mount paths' parent).
    pub dir: String,
    /// Every file read-only (they all are, or none is).
    pub read_only: bool,
    /// The files: their names in `dir` and their mounts (indexes into the container's mounts).
    pub files: Vec<(String, usize)>,
}

#[derive(Debug, Clone)]
pub(crate) enum VolumeSource {
    EmptyDir {
        /// `medium: Memory`: kept in RAM (`/dev/shm`) rather than under the state dir.
        memory: bool,
        /// `sizeLimit` in bytes: a pod whose volume grows past it is evicted.
        size_limit: Option<u64>,
    },
    /// The host's path, and what to make there at pod start (`DirectoryOrCreate`,
    /// `FileOrCreate`) if it is missing.
    HostPath(PathBuf, Option<HostCreate>),
    /// `configMap`, `secret`, `downwardAPI` and `projected`: files (relative path, contents)
    /// written at pod start and mounted read-only.
    Files(Vec<(String, FileData)>),
}

/// What a file of a `Files` volume holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileData {
    /// Data known at validation (a ConfigMap's or Secret's key, a token).
    Bytes(Vec<u8>),
    /// A field of the pod (the downward API), known when it starts.
    Field(crate::spec::env::FieldRef),
    /// `metadata.labels`: every label, `key="value"` a line, sorted.
    Labels,
    /// `metadata.annotations`, as `Labels`.
    Annotations,
}

impl FileData {
    /// The file's contents for pod `spec` running with `uid`.
    pub(crate) fn contents(&self, spec: &PodSpec, uid: &str) -> Vec<u8> {
        use crate::spec::env::FieldRef;
        let text = match self {
            FileData::Bytes(bytes) => return bytes.clone(),
            FileData::Field(FieldRef::Name) => spec.name.clone(),
            FileData::Field(FieldRef::Namespace) => spec.namespace.clone(),
            FileData::Field(FieldRef::Uid) => uid.to_owned(),
            FileData::Field(FieldRef::Label(k)) => spec.labels.get(k).cloned().unwrap_or_default(),
            FileData::Field(FieldRef::Annotation(k)) => {
                spec.annotations.get(k).cloned().unwrap_or_default()
            }
            // Validation offers no other field to volumes.
            FileData::Field(_) => String::new(),
            FileData::Labels => format_map(&spec.labels),
            FileData::Annotations => format_map(&spec.annotations),
        };
        text.into_bytes()
    }
}

/// The kubelet's format of a map in a downward API file: `key="value"` lines, sorted by key,
/// values quoted as Go's `%q` quotes them.
fn format_map(map: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    for (key, value) in map {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(key);
        out.push_str("=\"");
        for c in value.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if c.is_control() && (c as u32) < 0x80 => {
                    out.push_str(&format!("\\x{:02x}", c as u32))
                }
                c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out
}

#[derive(Debug, Clone)]
pub(crate) struct Volume {
    pub name: String,
    pub source: VolumeSource,
}

/// What a `hostPath` of type `DirectoryOrCreate` or `FileOrCreate` makes when missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostCreate {
    Directory,
    File,
}
