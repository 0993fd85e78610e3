//! A revision of the fleet source: the objects of one artifact in Flux's format (`flux push
//! artifact`: one `tar+gzip` layer of YAML and JSON files), read to bounds, each object with the
//! file it came from, the resource it is of, and the marks the source puts on what it applies.
//! The revision the node runs is kept in the state dir, so a node that starts without its
//! registry runs what it ran.

use std::io::Read;
use std::path::Path;

use serde_json::{Value, json};
use sha2::Digest as _;

use crate::api::source::{Applied, resource_of};

/// The media types of a Flux artifact's content layer (and of a plain OCI one).
const CONTENT_LAYERS: &[&str] = &[
    "application/vnd.cncf.flux.content.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar+gzip",
];
/// The manifest annotation Flux writes the source's revision in (`main@sha1:...`).
const REVISION_ANNOTATION: &str = "org.opencontainers.image.revision";

/// The most bytes of an artifact's layers, unpacked files together, one file; the most files
/// and objects; the longest path shown.
pub(super) const MAX_ARTIFACT: u64 = 16 << 20;
const MAX_UNPACKED: u64 = 64 << 20;
const MAX_FILE: u64 = 3 << 20;
const MAX_FILES: usize = 1000;
const MAX_OBJECTS: usize = 1000;
const MAX_PATH: usize = 1024;

/// The label on every object the source applied: only those are changed and pruned by it.
pub(crate) const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub(crate) const MANAGER: &str = "wasmpod-source";
/// The annotation holding the hash of the object as the revision gives it.
pub(crate) const HASH: &str = "wasmpod.dev/source-hash";

/// One object of a revision.
#[derive(Debug, Clone)]
pub(super) struct Item {
    /// The file it came from, for messages (`apps/web.yaml`).
    pub(super) file: String,
    /// The object as the file gives it.
    pub(super) given: Value,
    /// The object with the source's marks, ready to apply.
    pub(super) applied: Applied,
    /// The hash of `given`.
    pub(super) hash: String,
}

/// One revision's objects.
#[derive(Debug, Clone)]
pub(super) struct Revision {
    /// The artifact's manifest digest.
    pub(super) digest: String,
    /// The revision its publisher named (Flux's `--revision`), if any.
    pub(super) revision: Option<String>,
    /// The id of the key its signature was checked with, if any.
    pub(super) verified_by: Option<String>,
    pub(super) items: Vec<Item>,
}

impl Revision {
    /// Reads an artifact's objects, refusing it whole (naming the file and the field) when any
    /// part of it is not what a revision may hold.
    pub(super) fn read(
        artifact: &wasmpod::Artifact,
        verified_by: Option<String>,
    ) -> Result<Revision, String> {
        let layers: Vec<_> = artifact
            .layers
            .iter()
            .filter(|l| CONTENT_LAYERS.contains(&l.media_type.as_str()))
            .collect();
        let [layer] = layers.as_slice() else {
            return Err(format!(
                "the artifact has {} content layers ({}): one is read",
                layers.len(),
                CONTENT_LAYERS.join(" or ")
            ));
        };
        Revision::from_layer(
            &artifact.digest,
            artifact.annotations.get(REVISION_ANNOTATION).cloned(),
            verified_by,
            &layer.data,
        )
    }

    /// The revision a content layer (tar+gzip) holds.
    fn from_layer(
        digest: &str,
        revision: Option<String>,
        verified_by: Option<String>,
        layer: &[u8],
    ) -> Result<Revision, String> {
        let files = unpack(layer)?;
        let mut items = Vec::new();
        for (file, text) in &files {
            let documents = wasmpod::read_documents(text.as_bytes())
                .map_err(|e| format!("{file}: not YAML or JSON: {e}"))?;
            for (n, document) in documents.into_iter().enumerate() {
                for given in list_items(document) {
                    if items.len() == MAX_OBJECTS {
                        return Err(format!("more than {MAX_OBJECTS} objects"));
                    }
                    let at = format!("{file} (document {})", n + 1);
                    items.push(Item::new(&at, given)?);
                }
            }
        }
        let revision = Revision {
            digest: digest.to_owned(),
            revision,
            verified_by,
            items,
        };
        revision.unique()?;
        Ok(revision)
    }

    /// Refuses two objects of one kind, namespace and name.
    fn unique(&self) -> Result<(), String> {
        let mut seen = std::collections::HashMap::new();
        for item in &self.items {
            let a = &item.applied;
            let key = (a.resource.name, a.namespace.as_str(), a.name.as_str());
            if let Some(first) = seen.insert(key, &item.file) {
                return Err(format!(
                    "{}: {} {}: also in {first}: an object is given once",
                    item.file,
                    a.resource.kind,
                    item.shown()
                ));
            }
        }
        Ok(())
    }

    /// How the revision is named in messages: its publisher's name for it and its digest.
    pub(super) fn shown(&self) -> String {
        match &self.revision {
            Some(r) => format!("{r} ({})", short(&self.digest)),
            None => short(&self.digest).to_owned(),
        }
    }

    /// Keeps the revision in `file` (written whole, then renamed into place).
    pub(super) fn save(&self, file: &Path) -> std::io::Result<()> {
        let objects: Vec<Value> = self
            .items
            .iter()
            .map(|i| json!({"file": i.file, "object": i.given}))
            .collect();
        let text = serde_json::to_vec(&json!({
            "digest": self.digest,
            "revision": self.revision,
            "verifiedBy": self.verified_by,
            "objects": objects,
        }))?;
        let tmp = file.with_extension("tmp");
        {
            use std::io::Write as _;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&text)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, file)?;
        if let Some(dir) = file.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    /// The revision kept in `file`, if there is one.
    pub(super) fn load(file: &Path) -> Result<Option<Revision>, String> {
        let text = match std::fs::read(file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", file.display())),
        };
        let at = |e: &dyn std::fmt::Display| format!("{}: {e}", file.display());
        let saved: Value = serde_json::from_slice(&text).map_err(|e| at(&e))?;
        let text_at = |key: &str| saved.get(key).and_then(Value::as_str).map(str::to_owned);
        let digest = text_at("digest").ok_or_else(|| at(&"no digest"))?;
        let mut items = Vec::new();
        for o in saved
            .get("objects")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let file = o.get("file").and_then(Value::as_str).unwrap_or_default();
            let given = o.get("object").cloned().unwrap_or_default();
            items.push(Item::new(file, given).map_err(|e| at(&e))?);
        }
        Ok(Some(Revision {
            digest,
            revision: text_at("revision"),
            verified_by: text_at("verifiedBy"),
            items,
        }))
    }
}

impl Item {
    /// One object of file `file`: its resource, namespace and name, with the source's marks.
    fn new(file: &str, given: Value) -> Result<Item, String> {
        let at = |field: &str, what: String| format!("{file}: {field}: {what}");
        let text = |pointer: &str| given.pointer(pointer).and_then(Value::as_str);
        let api_version =
            text("/apiVersion").ok_or_else(|| at("apiVersion", "Required value".into()))?;
        let kind = text("/kind").ok_or_else(|| at("kind", "Required value".into()))?;
        let resource = resource_of(api_version, kind).ok_or_else(|| {
            at(
                "kind",
                format!(
                    "{api_version} {kind} is not applied by the source (Pods, ConfigMaps, \
                     Secrets, ServiceAccounts, Namespaces, PriorityClasses and RuntimeClasses are)"
                ),
            )
        })?;
        let name = text("/metadata/name")
            .filter(|n| !n.is_empty())
            .ok_or_else(|| at("metadata.name", "Required value".into()))?
            .to_owned();
        let namespace = match (resource.namespaced, text("/metadata/namespace")) {
            (true, Some(ns)) if !ns.is_empty() => ns.to_owned(),
            (true, _) => "default".to_owned(),
            (false, _) => String::new(),
        };
        if given.pointer("/metadata/generateName").is_some() {
            return Err(at(
                "metadata.generateName",
                "a source's object has a name of its own".into(),
            ));
        }
        let hash = format!(
            "{:x}",
            sha2::Sha256::digest(serde_json::to_vec(&given).unwrap_or_default())
        );
        let mut object = given.clone();
        let meta = &mut object["metadata"];
        for (field, key, value) in [
            ("labels", MANAGED_BY, MANAGER),
            ("annotations", HASH, &hash),
        ] {
            if !meta.get(field).is_some_and(Value::is_object) {
                meta[field] = json!({});
            }
            meta[field][key] = json!(value);
        }
        if resource.namespaced {
            meta["namespace"] = json!(namespace);
        }
        Ok(Item {
            file: file.to_owned(),
            given,
            applied: Applied {
                resource,
                namespace,
                name,
                object,
            },
            hash,
        })
    }

    #[cfg(test)]
    pub(super) fn for_test(given: Value) -> Item {
        Item::new("test.yaml", given).unwrap()
    }

    /// `namespace/name`, or the name of a cluster-scoped object.
    pub(super) fn shown(&self) -> String {
        let a = &self.applied;
        if a.namespace.is_empty() {
            a.name.clone()
        } else {
            format!("{}/{}", a.namespace, a.name)
        }
    }
}

/// A `v1 List`'s items, or the document itself; nothing for an empty document.
fn list_items(document: Value) -> Vec<Value> {
    match document {
        Value::Null => Vec::new(),
        Value::Object(ref m)
            if m.get("kind").and_then(Value::as_str) == Some("List")
                && m.get("apiVersion").and_then(Value::as_str) == Some("v1") =>
        {
            match document.get("items") {
                Some(Value::Array(items)) => items.clone(),
                _ => Vec::new(),
            }
        }
        other => vec![other],
    }
}

/// The YAML and JSON files of a tar+gzip layer, by path, sorted: hidden files and anything
/// that is not a regular file are left out; a file or the whole beyond its bound refuses it.
fn unpack(layer: &[u8]) -> Result<Vec<(String, String)>, String> {
    // The files' declared sizes are counted; the decompressed stream is cut a little past the
    // bound too (headers and padding), whatever the headers say.
    let unpacked = flate2::read::GzDecoder::new(layer).take(MAX_UNPACKED + (8 << 20));
    let mut archive = tar::Archive::new(unpacked);
    let mut files = Vec::new();
    let mut total = 0u64;
    let entries = archive
        .entries()
        .map_err(|e| format!("the content layer is not a tar+gzip: {e}"))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| format!("the content layer is not a tar+gzip: {e}"))?;
        total = total.saturating_add(entry.size());
        if total > MAX_UNPACKED {
            return Err(format!(
                "the content layer unpacks to more than {MAX_UNPACKED} bytes"
            ));
        }
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry
            .path()
            .map(|p| p.to_string_lossy().trim_start_matches("./").to_owned())
            .unwrap_or_default();
        let shown: String = path.chars().take(MAX_PATH).collect();
        let hidden = path.split('/').any(|c| c.starts_with('.'));
        let ext = path.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
        if hidden || !matches!(ext, "yaml" | "yml" | "json") {
            continue;
        }
        if files.len() == MAX_FILES {
            return Err(format!("more than {MAX_FILES} YAML and JSON files"));
        }
        if entry.size() > MAX_FILE {
            return Err(format!("{shown}: larger than {MAX_FILE} bytes"));
        }
        let mut text = String::new();
        entry
            .by_ref()
            .take(MAX_FILE)
            .read_to_string(&mut text)
            .map_err(|e| format!("{shown}: {e}"))?;
        files.push((shown, text));
    }
    files.sort();
    Ok(files)
}

/// `sha256:` and the digest's first 12 hex digits (a kept file's digest may be anything).
pub(super) fn short(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(files: &[(&str, &[u8])]) -> Vec<u8> {
        wasmpod_tests::registry::tar_gz(files, 0o644)
    }

    fn read(files: &[(&str, &[u8])]) -> Result<Revision, String> {
        Revision::from_layer(
            "sha256:abc",
            Some("main@sha1:1".into()),
            None,
            &layer(files),
        )
    }

    const CONFIG: &[u8] =
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: conf}\ndata: {a: b}\n";

    #[test]
    fn a_revision_holds_its_files_objects_marked() {
        let pods = b"apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: apps}\nspec: {}\n---\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: scheduling.k8s.io/v1, kind: PriorityClass, metadata: {name: high}, value: 10}\n";
        let r = read(&[
            ("./apps/pods.yaml", pods),
            (
                "config.json",
                br#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "conf"}}"#,
            ),
            ("README.md", b"# not read"),
            (".git/config.yaml", b"not: read"),
        ])
        .unwrap();
        let shown: Vec<_> = r
            .items
            .iter()
            .map(|i| format!("{} {} {}", i.file, i.applied.resource.kind, i.shown()))
            .collect();
        assert_eq!(
            shown,
            [
                "apps/pods.yaml (document 1) Pod apps/web",
                "apps/pods.yaml (document 2) PriorityClass high",
                "config.json (document 1) ConfigMap default/conf",
            ]
        );
        let web = &r.items[0].applied.object;
        assert_eq!(web["metadata"]["labels"][MANAGED_BY], MANAGER);
        assert_eq!(
            web["metadata"]["annotations"][HASH],
            r.items[0].hash.as_str()
        );
        assert_eq!(r.shown(), "main@sha1:1 (sha256:abc)");
    }

    #[test]
    fn a_bad_part_refuses_the_revision_naming_its_file_and_field() {
        for (files, why) in [
            (
                vec![("a.yaml", &b"key: [unclosed"[..])],
                "a.yaml: not YAML or JSON",
            ),
            (
                vec![
                    ("a.yaml", CONFIG),
                    ("b.yaml", b"kind: ConfigMap\nmetadata: {name: x}\n"),
                ],
                "b.yaml (document 1): apiVersion: Required value",
            ),
            (
                vec![(
                    "a.yaml",
                    b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
                )],
                "a.yaml (document 1): kind: apps/v1 Deployment is not applied by the source",
            ),
            (
                vec![(
                    "a.yaml",
                    b"apiVersion: v1\nkind: Event\nmetadata: {name: x}\n",
                )],
                "kind: v1 Event is not applied",
            ),
            (
                vec![(
                    "a.yaml",
                    b"apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: x-}\n",
                )],
                "metadata.name: Required value",
            ),
            (
                vec![("a.yaml", CONFIG), ("b.yaml", CONFIG)],
                "b.yaml (document 1): ConfigMap default/conf: also in a.yaml (document 1)",
            ),
        ] {
            let error = read(&files).unwrap_err();
            assert!(error.contains(why), "{error}\nwanted: {why}");
        }
        let big = vec![b'#'; MAX_FILE as usize + 1];
        assert!(
            read(&[("big.yaml", &big)])
                .unwrap_err()
                .contains("big.yaml: larger than")
        );
        let many: Vec<(String, &[u8])> = (0..=MAX_FILES)
            .map(|n| (format!("{n}.yaml"), &b""[..]))
            .collect();
        let many: Vec<(&str, &[u8])> = many.iter().map(|(n, d)| (n.as_str(), *d)).collect();
        assert!(read(&many).unwrap_err().contains("more than 1000"));
        // A bomb: a small layer that unpacks past the bound is refused, not read out.
        let spaces = vec![b' '; 2 << 20];
        let names: Vec<String> = (0..40).map(|n| format!("{n}.yaml")).collect();
        let files: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &spaces[..])).collect();
        let bomb = layer(&files);
        assert!(bomb.len() < 1 << 20, "{}", bomb.len());
        let error = Revision::from_layer("d", None, None, &bomb).unwrap_err();
        assert!(error.contains("unpacks to more than"), "{error}");
        assert!(
            Revision::from_layer("d", None, None, b"not gzip")
                .unwrap_err()
                .contains("not a tar+gzip")
        );
    }

    #[test]
    fn a_kept_revision_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kept.json");
        assert!(Revision::load(&file).unwrap().is_none());
        let r = read(&[("a.yaml", CONFIG)]).unwrap();
        r.save(&file).unwrap();
        let back = Revision::load(&file).unwrap().unwrap();
        assert_eq!(back.shown(), r.shown());
        assert_eq!(back.items[0].hash, r.items[0].hash);
        assert_eq!(back.items[0].applied.object, r.items[0].applied.object);
        std::fs::write(&file, b"{").unwrap();
        assert!(Revision::load(&file).unwrap_err().contains("kept.json"));
    }
}
