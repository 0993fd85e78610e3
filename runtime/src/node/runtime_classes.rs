//! The node's RuntimeClasses: the handlers it runs, and the classes that name them.
//!
//! Built in are the names wasm pods carry in the wild — wasmpod's own and those of the runtimes
//! whose manifests users bring (runwasi's shims, SpinKube, WasmEdge, crun's wasm handler) — each
//! a class whose handler is itself. `RuntimeClass` objects given to the node
//! ([`Node::set_runtime_classes`](super::Node::set_runtime_classes)) add names for these handlers.

use std::collections::HashMap;

use k8s_openapi::api::node::v1::RuntimeClass;

use super::Error;

/// The handlers this node runs (every one of them is wasmpod).
pub(crate) const HANDLERS: &[&str] = &[
    "wasmpod",
    "wasmtime",
    "wasm",
    "spin",
    "wasmtime-spin-v2",
    "wasmedge",
    "crun",
];

/// RuntimeClass names to handlers.
#[derive(Debug, Default)]
pub(super) struct RuntimeClasses(HashMap<String, String>);

impl RuntimeClasses {
    pub(super) fn new(list: &[RuntimeClass]) -> RuntimeClasses {
        RuntimeClasses(
            list.iter()
                .filter_map(|c| Some((c.metadata.name.clone()?, c.handler.clone())))
                .collect(),
        )
    }

    /// Checks a pod's `runtimeClassName`: a built-in name, or a class whose handler this node
    /// runs. The errors are the API server's (`RuntimeClass "x" not found`) and the runtime's
    /// (`no runtime for "y" is configured`).
    pub(super) fn check(&self, class: Option<&str>) -> Result<(), Error> {
        let Some(class) = class else {
            return Ok(());
        };
        let handler = match self.0.get(class) {
            Some(handler) => handler.as_str(),
            None if HANDLERS.contains(&class) => class,
            None => return Err(Error::UnknownRuntimeClass(class.to_owned())),
        };
        if HANDLERS.contains(&handler) {
            Ok(())
        } else {
            Err(Error::UnknownRuntimeHandler {
                class: class.to_owned(),
                handler: handler.to_owned(),
            })
        }
    }
}
