//! Ahead-of-time compilation: `.cwasm` artefacts made on one machine for the nodes of another
//! (`wasmpod compile`), and what a node says when it is given one it cannot load.
//!
//! An artefact carries the wasmtime version, target, CPU features and engine settings it was
//! made with; wasmtime refuses to load it where any differs, and wasmpod's version is part of
//! what it checks (the artefact's version string is wasmpod's and wasmtime's). It is machine
//! code: a node runs it as it is, so it is trusted as the `wasmpod` binary is (see
//! `docs/small-devices.md`), and a node takes one only from where its operator said
//! ([`MachineCode`], [`Origin`]).

use std::path::{Path, PathBuf};

use wasmtime::ModuleVersionStrategy;

use super::{AddressSpace, LoadError};
#[cfg(feature = "compiler")]
use super::{Kind, config_for};

/// The wasmtime this wasmpod is built on (checked against `Cargo.lock` by a test).
const WASMTIME_VERSION: &str = "48.0.8";

/// An artefact's version string: another wasmpod or wasmtime refuses it.
pub(super) fn version() -> String {
    format!(
        "wasmpod {} on wasmtime {WASMTIME_VERSION}",
        env!("CARGO_PKG_VERSION")
    )
}

pub(super) fn version_strategy() -> ModuleVersionStrategy {
    ModuleVersionStrategy::Custom(version())
}

/// Where an image file comes from, which decides whether it may be machine code.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Origin {
    /// A path in a pod spec: machine code only where [`MachineCode`] allows.
    Local,
    /// A registry image's blob: machine code only from a precompiled layer of a trusted
    /// registry.
    Pulled { machine_code: bool },
}

/// Where a node takes local precompiled artefacts (machine code, run as it is) from.
#[derive(Debug, Clone, Default)]
pub(crate) struct MachineCode {
    /// `None`: anywhere (the operator's own pod files); else only under these directories.
    pub dirs: Option<Vec<PathBuf>>,
    /// Never under these (where guests write: the state dir, the RAM-backed emptyDirs).
    pub never: Vec<PathBuf>,
}

impl MachineCode {
    /// Whether `file` (canonical) may be machine code.
    pub(super) fn allows(&self, file: &Path) -> bool {
        let under =
            |dir: &PathBuf| std::fs::canonicalize(dir).is_ok_and(|dir| file.starts_with(dir));
        !self.never.iter().any(under)
            && self.dirs.as_ref().is_none_or(|dirs| dirs.iter().any(under))
    }

    pub(super) fn sources(&self) -> String {
        match &self.dirs {
            Some(dirs) if dirs.is_empty() => {
                "from registries it trusts with it (--precompiled-registry) and from no local \
                 directory (--precompiled-dir names one)"
                    .into()
            }
            Some(dirs) => format!(
                "from {} and registries it trusts with it",
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => "outside the node's state directory and /dev/shm/wasmpod, where guests \
                     write"
                .into(),
        }
    }
}

/// The machines an artefact is for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompileTarget {
    /// The target triple (`aarch64-unknown-linux-gnu`); `None`: this machine, with its CPU's
    /// features.
    pub triple: Option<String>,
    /// How the nodes that run it use their address space.
    pub address_space: AddressSpace,
}

impl CompileTarget {
    /// This machine, as a node here would run it.
    pub fn host() -> CompileTarget {
        CompileTarget {
            triple: None,
            address_space: AddressSpace::of_process(),
        }
    }

    /// Sets [`CompileTarget::triple`].
    pub fn triple(mut self, triple: impl Into<String>) -> Self {
        self.triple = Some(triple.into());
        self
    }

    /// Sets [`CompileTarget::address_space`].
    pub fn address_space(mut self, space: AddressSpace) -> Self {
        self.address_space = space;
        self
    }

    #[cfg(feature = "compiler")]
    fn config(&self, name: &Path) -> Result<wasmtime::Config, LoadError> {
        let mut config = config_for(self.address_space);
        if let Some(triple) = &self.triple {
            config.target(triple).map_err(|e| LoadError::Compile {
                path: name.to_owned(),
                message: format!("target {triple}: {e:#}"),
            })?;
        }
        Ok(config)
    }
}

/// Compiles a module or component (`name` names it in errors) into an artefact for `target`.
/// Blocking: compiling takes from milliseconds to seconds.
#[cfg(feature = "compiler")]
pub fn compile(name: &Path, wasm: &[u8], target: &CompileTarget) -> Result<Vec<u8>, LoadError> {
    let kind = Kind::of(wasm).ok_or_else(|| LoadError::NotWasm {
        path: name.to_owned(),
    })?;
    let compiled = wasmtime::Engine::new(&target.config(name)?)
        .and_then(|engine| kind.precompile(&engine, wasm));
    compiled.map_err(|e| {
        let mut message = format!("{e:#}");
        // wasmtime's words for a code generator left out of this build.
        if let Some(triple) = &target.triple
            && message.contains("target is disabled")
        {
            message = format!(
                "this wasmpod cannot compile for {triple} ({message}): build it with \
                 `--features cross`"
            );
        }
        LoadError::Compile {
            path: name.to_owned(),
            message,
        }
    })
}

/// Why this node cannot load the artefact at `path` (wasmtime's `reason`), in words that say
/// what to do.
pub(super) fn mismatch(path: &Path, reason: &str) -> LoadError {
    LoadError::Mismatch {
        path: path.to_owned(),
        message: format!("{reason}; make it again with `{}`", command_for_here(None)),
    }
}

/// The `wasmpod compile` command that makes an artefact this node loads (of `input`).
pub(super) fn command_for_here(input: Option<&Path>) -> String {
    let space = match AddressSpace::of_process() {
        AddressSpace::Compact => "--compact",
        AddressSpace::Reserved => "--reserved",
    };
    let input = input
        .map(|p| format!(" {}", p.display()))
        .unwrap_or_default();
    format!(
        "wasmpod compile --target {} {space}{input}",
        target_lexicon::HOST
    )
}

#[cfg(test)]
mod tests {
    use super::MachineCode;

    /// Machine code is taken from the named directories (anywhere without any), never from where
    /// guests write, also when that is inside a named directory, and never through a link out
    /// of one.
    #[test]
    fn machine_code_comes_only_from_where_the_operator_said() {
        let tmp = tempfile::tempdir().unwrap();
        let (bin, state, other) = (
            tmp.path().join("bin"),
            tmp.path().join("bin/state"),
            tmp.path().join("other"),
        );
        for dir in [&state, &other] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let file = |dir: &std::path::Path, name: &str| {
            std::fs::write(dir.join(name), b"").unwrap();
            std::fs::canonicalize(dir.join(name)).unwrap()
        };
        let (app, guest, elsewhere) = (
            file(&bin, "app.cwasm"),
            file(&state, "x.cwasm"),
            file(&other, "y.cwasm"),
        );
        std::os::unix::fs::symlink(&elsewhere, bin.join("link.cwasm")).unwrap();
        let linked = std::fs::canonicalize(bin.join("link.cwasm")).unwrap();

        let anywhere = MachineCode {
            dirs: None,
            never: vec![state.clone()],
        };
        assert!(anywhere.allows(&app) && anywhere.allows(&elsewhere));
        assert!(!anywhere.allows(&guest));
        let named = MachineCode {
            dirs: Some(vec![bin.clone()]),
            never: vec![state.clone()],
        };
        assert!(named.allows(&app));
        assert!(!named.allows(&guest) && !named.allows(&elsewhere) && !named.allows(&linked));
        let none = MachineCode {
            dirs: Some(Vec::new()),
            never: vec![state],
        };
        assert!(!none.allows(&app));
    }
    #[test]
    fn the_wasmtime_version_is_the_locked_one() {
        let lock =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock")).unwrap();
        let locked = lock
            .split("[[package]]")
            .find(|p| p.contains("\nname = \"wasmtime\"\n"))
            .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = ")))
            .unwrap()
            .trim_matches('"');
        assert_eq!(locked, super::WASMTIME_VERSION);
    }
}
