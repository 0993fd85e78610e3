//! Linking: an artefact deserialized in an engine and linked with its linkers into an image
//! ready to instantiate (a preview1 module, a 0.2 or 0.3 command, an HTTP handler), and telling
//! the kinds of bytes apart.

use std::borrow::Cow;
use std::path::Path;
#[cfg(feature = "compiler")]
use std::path::PathBuf;
use std::sync::Arc;

use wasmtime::Module;
use wasmtime::component::Component;
use wasmtime_wasi::p2::bindings::CommandPre;
#[cfg(feature = "http")]
use wasmtime_wasi_http::p2::bindings::ProxyPre;

#[cfg(feature = "http")]
use super::HttpPre;
use super::tier::Optimized;
use super::{Entry, Image, LoadError, Twin};
use crate::host::Linkers;

/// A compiled artefact: in memory, or a file of the compile cache (mapped as it is).
pub(crate) enum Artefact<'a> {
    Bytes(Cow<'a, [u8]>),
    #[cfg(feature = "compiler")]
    File(PathBuf),
}

/// Deserializes an artefact in `wasmtime` and links it with `linkers`; `optimized` is where a
/// baseline image finds its optimized twin.
///
/// # Safety
///
/// `artefact` must be a `precompile_*` output of an engine with `wasmtime`'s configuration.
pub(super) unsafe fn link(
    wasmtime: &wasmtime::Engine,
    linkers: &Linkers,
    path: &Path,
    kind: Kind,
    artefact: Artefact<'_>,
    twin: Twin,
    optimized: Option<Arc<Optimized>>,
) -> Result<Image, LoadError> {
    let compile_err = |e: wasmtime::Error| LoadError::Compile {
        path: path.to_owned(),
        message: format!("{e:#}"),
    };
    let link_err = |e: wasmtime::Error| LoadError::Link {
        path: path.to_owned(),
        message: format!("{e:#}"),
    };
    let image = match kind {
        Kind::Module => {
            // SAFETY: as the caller promised.
            let module = unsafe {
                match artefact {
                    Artefact::Bytes(bytes) => Module::deserialize(wasmtime, bytes),
                    #[cfg(feature = "compiler")]
                    Artefact::File(file) => Module::deserialize_file(wasmtime, file),
                }
            }
            .map_err(compile_err)?;
            let handles_term = module
                .imports()
                .any(|i| i.module() == crate::host::TERM_MODULE);
            let pre = linkers
                .p1()
                .and_then(|linker| linker.instantiate_pre(&module))
                .map_err(link_err)?;
            if module.get_export("_start").is_none() {
                return Err(LoadError::Link {
                    path: path.to_owned(),
                    message: "the module does not export `_start` (a WASI command)".into(),
                });
            }
            Image::Module {
                pre,
                handles_term,
                twin,
                optimized,
            }
        }
        Kind::Component => {
            // SAFETY: as the caller promised.
            let component = unsafe {
                match artefact {
                    Artefact::Bytes(bytes) => Component::deserialize(wasmtime, bytes),
                    #[cfg(feature = "compiler")]
                    Artefact::File(file) => Component::deserialize_file(wasmtime, file),
                }
            }
            .map_err(compile_err)?;
            let ty = component.component_type();
            let imports_term = ty
                .imports(wasmtime)
                .any(|(name, _)| name.starts_with(crate::host::TERM_INTERFACE));
            #[cfg(not(feature = "http"))]
            if let Some(name) = ty
                .imports(wasmtime)
                .chain(ty.exports(wasmtime))
                .map(|(name, _)| name)
                .find(|name| name.starts_with("wasi:http/"))
            {
                return Err(LoadError::Link {
                    path: path.to_owned(),
                    message: format!(
                        "the component uses `{name}`, and this wasmpod is built without \
                         `wasi:http` (its `http` feature)"
                    ),
                });
            }
            let instance = linkers
                .p2()
                .and_then(|linker| linker.instantiate_pre(&component))
                .map_err(link_err)?;
            // A component exporting an HTTP handler is served (as `wasmtime serve` does),
            // whether or not it also has a `main`.
            // A WASI 0.3 `run` is preferred to a 0.2 one, as `wasmtime run` does.
            let p3 = || wasmtime_wasi::p3::bindings::CommandPre::new(instance.clone());
            let command = || {
                CommandPre::new(instance.clone()).map_err(|e| LoadError::Link {
                    path: path.to_owned(),
                    message: format!(
                        "the component exports neither `wasi:cli/run` nor \
                         `wasi:http/incoming-handler`: {e:#}"
                    ),
                })
            };
            #[cfg(feature = "http")]
            let entry = {
                let p3_handler =
                    || wasmtime_wasi_http::p3::bindings::ServicePre::new(instance.clone());
                match ProxyPre::new(instance.clone()) {
                    Ok(proxy) => Entry::Http(HttpPre::P2(proxy)),
                    Err(_) if let Ok(service) = p3_handler() => Entry::Http(HttpPre::P3(service)),
                    Err(_) if let Ok(command) = p3() => Entry::CommandP3(command),
                    Err(_) => Entry::Command(command()?),
                }
            };
            #[cfg(not(feature = "http"))]
            let entry = match p3() {
                Ok(command) => Entry::CommandP3(command),
                Err(_) => Entry::Command(command()?),
            };
            Image::Component {
                // A server stops taking requests at TERM and finishes those it has.
                handles_term: imports_term || entry.serves(),
                entry,
                instance,
                twin,
                optimized,
            }
        }
    };
    Ok(image)
}

/// What a precompiled artefact holds, if `bytes` is one.
pub(super) fn precompiled_kind(bytes: &[u8]) -> Option<Kind> {
    match wasmtime::Engine::detect_precompiled(bytes)? {
        wasmtime::Precompiled::Module => Some(Kind::Module),
        wasmtime::Precompiled::Component => Some(Kind::Component),
    }
}

#[derive(Clone, Copy)]
pub(super) enum Kind {
    Module,
    Component,
}

impl Kind {
    /// Compiles `bytes`, of this kind, into an artefact of `engine`. Blocking.
    #[cfg(feature = "compiler")]
    pub(super) fn precompile(
        self,
        engine: &wasmtime::Engine,
        bytes: &[u8],
    ) -> wasmtime::Result<Vec<u8>> {
        match self {
            Kind::Module => engine.precompile_module(bytes),
            Kind::Component => engine.precompile_component(bytes),
        }
    }

    pub(super) fn of(bytes: &[u8]) -> Option<Kind> {
        match bytes.get(..8)? {
            [0, b'a', b's', b'm', 1, 0, 0, 0] => Some(Kind::Module),
            [0, b'a', b's', b'm', _, _, 1, 0] => Some(Kind::Component),
            _ => None,
        }
    }
}
