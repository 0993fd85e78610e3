//! containerd's configuration, as the installer edits it: the `wasmpod` runtime of the CRI
//! plugin added in the place the file's version reads it, every other byte kept.
//!
//! A config file is edited as a TOML document ([`toml_edit`]: comments, order and spacing
//! survive). A distribution that generates containerd's config from a Go template (k3s, RKE2)
//! gets a block appended to the template instead, between two marker lines, and the version and
//! the runtimes are read from the config it generated.

use std::fmt;

use toml_edit::{Array, DocumentMut, Item, Table};

/// The runtime handler's name: what a RuntimeClass's `handler` names.
pub(crate) const HANDLER: &str = "wasmpod";

/// The pod annotations containerd passes on to the shim (the pod's HTTP settings).
const POD_ANNOTATIONS: &str = "wasmpod.dev/*";

/// The first line of the block the installer appends to a template.
const BEGIN: &str =
    "# BEGIN wasmpod: added by `containerd-shim-wasmpod-v1 install`, removed by its `uninstall`";
/// The last line of that block.
const END: &str = "# END wasmpod";

/// The comment above the runtime's table in a config file.
const COMMENT: &str =
    "\n# wasmpod: added by `containerd-shim-wasmpod-v1 install`, removed by its `uninstall`.\n";

/// The comment above the default runtime's table when the installer writes it out (see
/// [`add`]).
const RUNC_COMMENT: &str = "\n# wasmpod: containerd 1.x reads a config's runtimes as the whole list, so runc, its default,\n\
# is written out beside `wasmpod`; removed by `containerd-shim-wasmpod-v1 uninstall`.\n";

/// containerd's default runtime when a config names none, and the type containerd gives it.
const RUNC: (&str, &str) = ("runc", "io.containerd.runc.v2");

/// A containerd config version the installer edits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Version {
    /// containerd 1.3 to 2.x: the CRI plugin is `io.containerd.grpc.v1.cri`.
    V2,
    /// containerd 2.0 and later: the CRI's runtimes are in `io.containerd.cri.v1.runtime`.
    V3,
    /// containerd 2.3 and later: servers are plugins too; the runtimes stay where 3 has them.
    V4,
}

impl Version {
    fn read(doc: &DocumentMut) -> Result<Version, ConfigError> {
        match doc.get("version") {
            None if doc.iter().next().is_none() => Ok(Version::V2),
            None => Err(ConfigError::Unversioned),
            Some(v) => match v.as_integer() {
                Some(2) => Ok(Version::V2),
                Some(3) => Ok(Version::V3),
                Some(4) => Ok(Version::V4),
                _ => Err(ConfigError::Version(v.to_string().trim().to_owned())),
            },
        }
    }

    /// The tables that lead to the CRI's runtimes in this version.
    fn runtimes(self) -> [&'static str; 4] {
        let plugin = match self {
            Version::V2 => "io.containerd.grpc.v1.cri",
            Version::V3 | Version::V4 => "io.containerd.cri.v1.runtime",
        };
        ["plugins", plugin, "containerd", "runtimes"]
    }

    /// The number containerd reads.
    pub(crate) fn number(self) -> u8 {
        match self {
            Version::V2 => 2,
            Version::V3 => 3,
            Version::V4 => 4,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "version {}", self.number())
    }
}

/// Why a config is left as it is.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ConfigError {
    /// Not TOML.
    #[error("is not TOML containerd can read: {0}")]
    Parse(String),
    /// No `version`: containerd reads it as version 1.
    #[error(
        "has no `version`, so containerd reads it as version 1, which the installer does not \
         edit: add `version = 2` (containerd 1.x) or migrate it (`containerd config migrate`, 2.x)"
    )]
    Unversioned,
    /// A version the installer does not know.
    #[error("has `version = {0}`; the installer edits versions 2, 3 and 4")]
    Version(String),
    /// Another runtime already has the handler's name.
    #[error(
        "already has a runtime named `wasmpod` whose runtime_type is {0}, not \
         `io.containerd.wasmpod.v1`: rename or remove it first"
    )]
    Clash(String),
    /// A key on the way to the runtimes is not a table.
    #[error("has `{0}` as something other than a table")]
    NotATable(String),
    /// A template's block has lost one of its marker lines.
    #[error("has a `# BEGIN wasmpod` line without its `# END wasmpod` (or the other way round)")]
    Markers,
}

/// What the runtime's entry says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Runtime {
    /// The shim's path on the node, as containerd sees it.
    pub(crate) path: String,
    /// Whether the node's default runtime (runc) uses systemd's cgroup driver.
    pub(crate) systemd_cgroup: bool,
}

/// What reading a config found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Found {
    /// Its version.
    pub(crate) version: Version,
    /// Whether its default runtime uses systemd's cgroup driver.
    pub(crate) systemd_cgroup: bool,
}

/// Reads a (rendered) config: its version and cgroup driver, refusing one that another runtime
/// named `wasmpod` is in.
pub(crate) fn read(text: &str) -> Result<Found, ConfigError> {
    let doc = parse(text)?;
    let version = Version::read(&doc)?;
    if let Some(existing) = entry(&doc, version)?
        && let Some(other) = foreign(existing)
    {
        return Err(ConfigError::Clash(other));
    }
    Ok(Found {
        version,
        systemd_cgroup: systemd_cgroup(&doc, version)?,
    })
}

/// The config with the runtime in it; `None` when it is there already as `runtime` says. A
/// version 2 config that leaves runc, the default runtime, to containerd's defaults gets runc's
/// table written out too (containerd 1.x would otherwise lose it).
pub(crate) fn add(text: &str, runtime: &Runtime) -> Result<Option<String>, ConfigError> {
    let mut doc = parse(text)?;
    let version = Version::read(&doc)?;
    if doc.get("version").is_none() {
        doc["version"] = toml_edit::value(2);
    }
    if let Some(existing) = entry(&doc, version)? {
        if let Some(other) = foreign(existing) {
            return Err(ConfigError::Clash(other));
        }
        if says(existing, runtime) {
            return Ok(None);
        }
    }
    let default = default_runtime(&doc, version)?;
    let runtimes = tables(&mut doc, &version.runtimes())?;
    // containerd 1.x decodes a config's runtimes table into a new map, in place of its defaults:
    // a config that relied on the built-in runc (Debian's package's, an empty one) would lose
    // it, and the CRI plugin would refuse to load. containerd 2.x merges, and is given the same.
    if version == Version::V2 && default == RUNC.0 && !runtimes.contains_key(RUNC.0) {
        let mut runc = Table::new();
        runc.insert("runtime_type", toml_edit::value(RUNC.1));
        runc.decor_mut().set_prefix(RUNC_COMMENT);
        runtimes.insert(RUNC.0, Item::Table(runc));
    }
    let mut table = runtime_table(runtime);
    table.decor_mut().set_prefix(COMMENT);
    runtimes.insert(HANDLER, Item::Table(table));
    Ok(Some(doc.to_string()))
}

/// The config without the runtime (and without the default runtime's table [`add`] wrote out);
/// `None` when it is not there.
pub(crate) fn remove(text: &str) -> Result<Option<String>, ConfigError> {
    let mut doc = parse(text)?;
    let version = Version::read(&doc)?;
    match entry(&doc, version)? {
        None => Ok(None),
        Some(existing) if foreign(existing).is_some() => Ok(None),
        Some(_) => {
            let runtimes = tables(&mut doc, &version.runtimes())?;
            runtimes.remove(HANDLER);
            let written_out = runtimes
                .get(RUNC.0)
                .and_then(Item::as_table)
                .is_some_and(|t| t.decor().prefix().and_then(|p| p.as_str()) == Some(RUNC_COMMENT));
            if written_out {
                runtimes.remove(RUNC.0);
            }
            Ok(Some(doc.to_string()))
        }
    }
}

/// The gRPC socket a config names (`[grpc] address`; in version 4, the gRPC server plugin's).
pub(crate) fn grpc_address(text: &str) -> Option<String> {
    let doc = parse(text).ok()?;
    let v4 = lookup(doc.as_table(), &["plugins", "io.containerd.server.v1.grpc"]).ok()?;
    let older = lookup(doc.as_table(), &["grpc"]).ok()?;
    v4.or(older)?
        .get("address")?
        .as_str()
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
}

/// The template with the runtime's block appended (`{{ template "base" . }}` and the block when
/// there is none yet); `None` when its block already says what `runtime` says. `rendered` is
/// the config the distribution generated from its template, whose version the block takes.
pub(crate) fn add_to_template(
    template: Option<&str>,
    rendered: &str,
    runtime: &Runtime,
) -> Result<Option<String>, ConfigError> {
    let found = read(rendered)?;
    let block = template_block(found.version, runtime);
    let base = match template {
        None => "{{ template \"base\" . }}\n".to_owned(),
        Some(t) => strip_block(t)?.unwrap_or_else(|| t.to_owned()),
    };
    let mut new = base;
    if !new.is_empty() && !new.ends_with('\n') {
        new.push('\n');
    }
    new.push_str(&block);
    Ok((template != Some(new.as_str())).then_some(new))
}

/// The template without the runtime's block; `None` when it has none.
pub(crate) fn remove_from_template(template: &str) -> Result<Option<String>, ConfigError> {
    strip_block(template)
}

/// The template without its block (and the line break the installer put before it).
fn strip_block(template: &str) -> Result<Option<String>, ConfigError> {
    let begin = template.find(&format!("\n{BEGIN}\n"));
    let end = template.find(&format!("\n{END}\n"));
    match (begin, end) {
        (None, None) => Ok(None),
        (Some(b), Some(e)) if b < e => {
            let mut out = template[..b].to_owned();
            out.push_str(&template[e + END.len() + 2..]);
            Ok(Some(out))
        }
        _ => Err(ConfigError::Markers),
    }
}

/// The block a template gets: the runtime's tables, in `version`'s place.
fn template_block(version: Version, runtime: &Runtime) -> String {
    let mut doc = DocumentMut::new();
    let runtimes = tables(&mut doc, &version.runtimes()).expect("a new document has room");
    runtimes.insert(HANDLER, Item::Table(runtime_table(runtime)));
    format!("\n{BEGIN}\n{}{END}\n", doc.to_string().trim_start())
}

fn parse(text: &str) -> Result<DocumentMut, ConfigError> {
    text.parse::<DocumentMut>()
        .map_err(|e| ConfigError::Parse(e.to_string().trim().to_owned()))
}

/// The runtime's table: what containerd's CRI reads for the handler.
fn runtime_table(runtime: &Runtime) -> Table {
    let mut table = Table::new();
    table.insert("runtime_type", toml_edit::value(crate::shim::RUNTIME));
    table.insert("runtime_path", toml_edit::value(runtime.path.as_str()));
    let mut annotations = Array::new();
    annotations.push(POD_ANNOTATIONS);
    table.insert("pod_annotations", toml_edit::value(annotations));
    if runtime.systemd_cgroup {
        let mut options = Table::new();
        options.insert("SystemdCgroup", toml_edit::value(true));
        table.insert("options", Item::Table(options));
    }
    table
}

/// Whether the shim's table already says what `runtime` says.
fn says(table: &Table, runtime: &Runtime) -> bool {
    let annotations = table
        .get("pod_annotations")
        .and_then(Item::as_array)
        .map(|a| a.iter().map(|v| v.as_str()).collect::<Vec<_>>());
    let systemd = table
        .get("options")
        .and_then(Item::as_table)
        .and_then(|o| o.get("SystemdCgroup"))
        .and_then(Item::as_bool)
        .unwrap_or(false);
    table.get("runtime_path").and_then(Item::as_str) == Some(runtime.path.as_str())
        && annotations == Some(vec![Some(POD_ANNOTATIONS)])
        && systemd == runtime.systemd_cgroup
}

/// The `wasmpod` runtime's table, where `version` reads it.
fn entry(doc: &DocumentMut, version: Version) -> Result<Option<&Table>, ConfigError> {
    let Some(runtimes) = lookup(doc.as_table(), &version.runtimes())? else {
        return Ok(None);
    };
    match runtimes.get(HANDLER) {
        None => Ok(None),
        Some(item) => item
            .as_table()
            .map(Some)
            .ok_or_else(|| ConfigError::NotATable(HANDLER.to_owned())),
    }
}

/// Another runtime's type, when the table is not the shim's.
fn foreign(table: &Table) -> Option<String> {
    let kind = table.get("runtime_type").and_then(Item::as_str);
    (kind != Some(crate::shim::RUNTIME)).then(|| match kind {
        Some(kind) => format!("`{kind}`"),
        None => "not set".to_owned(),
    })
}

/// The config's default runtime: `runc` unless it names another.
fn default_runtime(doc: &DocumentMut, version: Version) -> Result<String, ConfigError> {
    Ok(lookup(doc.as_table(), &version.runtimes()[..3])?
        .and_then(|containerd| containerd.get("default_runtime_name"))
        .and_then(Item::as_str)
        .unwrap_or(RUNC.0)
        .to_owned())
}

/// Whether the config's default runtime sets `SystemdCgroup`.
fn systemd_cgroup(doc: &DocumentMut, version: Version) -> Result<bool, ConfigError> {
    let path = version.runtimes();
    let default = default_runtime(doc, version)?;
    let options = lookup(doc.as_table(), &path)?
        .and_then(|runtimes| runtimes.get(&default))
        .and_then(Item::as_table)
        .and_then(|runtime| runtime.get("options"))
        .and_then(Item::as_table);
    Ok(options
        .and_then(|o| o.get("SystemdCgroup"))
        .and_then(Item::as_bool)
        .unwrap_or(false))
}

/// The table at `path`, if each step is there.
fn lookup<'d>(mut table: &'d Table, path: &[&str]) -> Result<Option<&'d Table>, ConfigError> {
    for key in path {
        match table.get(key) {
            None => return Ok(None),
            Some(Item::Table(next)) => table = next,
            Some(_) => {
                return Err(ConfigError::NotATable((*key).to_owned()));
            }
        }
    }
    Ok(Some(table))
}

/// The table at `path`, made (implicit, so that no empty header appears) where it is missing.
fn tables<'d>(doc: &'d mut DocumentMut, path: &[&str]) -> Result<&'d mut Table, ConfigError> {
    let mut table = doc.as_table_mut();
    for key in path {
        let item = table.entry(key).or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        });
        table = item
            .as_table_mut()
            .ok_or_else(|| ConfigError::NotATable((*key).to_owned()))?;
    }
    Ok(table)
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
