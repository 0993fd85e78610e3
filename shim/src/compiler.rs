//! The node's compile cache: runwasi stores what [`WasmpodCompiler`] makes of an image's wasm
//! layers in containerd's content store (once per image and [`wasmpod::task::precompile_key`]),
//! and hands every later container of that image the artefact instead of the wasm.
//!
//! Images whose `.wasm` is a file in an ordinary rootfs are compiled in each container's
//! process: runwasi reads only wasm layers in the shim.

use std::path::Path;

use containerd_shim_wasm::sandbox::context::WasmLayer;
use containerd_shim_wasm::shim::Compiler;

/// The largest layer compiled in the shim's process, which no container's limits bound (a larger
/// one is compiled in the container's process, under its cgroup).
const MAX_PRECOMPILED: usize = 64 << 20;

/// Precompiles wasm layers with wasmpod's engine configuration.
pub(crate) struct WasmpodCompiler;

impl Compiler for WasmpodCompiler {
    fn cache_key(&self) -> impl std::hash::Hash {
        (env!("CARGO_PKG_VERSION"), wasmpod::task::precompile_key())
    }

    async fn compile(&self, layers: &[WasmLayer]) -> anyhow::Result<Vec<Option<Vec<u8>>>> {
        let layers = layers.to_vec();
        tokio::task::spawn_blocking(move || {
            layers
                .iter()
                .map(|layer| {
                    // Already an artefact, not wasm (runwasi passes every layer it supports), or
                    // too large to compile outside a container.
                    if layer.precompiled
                        || !layer.layer.starts_with(b"\0asm")
                        || layer.layer.len() > MAX_PRECOMPILED
                    {
                        return Ok(None);
                    }
                    let name = Path::new(layer.config.digest().as_ref());
                    Ok(Some(wasmpod::task::precompile(name, &layer.layer)?))
                })
                .collect()
        })
        .await?
    }
}
