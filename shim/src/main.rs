//! `containerd-shim-wasmpod-v1`: the containerd shim of the runtime `io.containerd.wasmpod.v1`.
//!
//! containerd starts it for each task (or each pod, when the CRI groups a pod's containers);
//! runwasi's `containerd-shim-wasm` does the containerd side (the task API, the container's
//! namespaces, cgroups and mounts, through youki's libcontainer), and in the container's
//! process wasmpod runs the module or component as a [`wasmpod::task::Task`]: see
//! [`sandbox`] for what it takes from the OCI spec and how signals reach the guest, and
//! [`compiler`] for the node's compile cache.

mod compiler;
mod sandbox;
mod spec;

use containerd_shim_wasm::shim::{Cli, Config, Shim, Version, version};

/// The shim: its name (`wasmpod`, hence `io.containerd.wasmpod.v1`) and how it runs and compiles.
struct WasmpodShim;

impl Shim for WasmpodShim {
    type Sandbox = sandbox::WasmpodSandbox;

    fn name() -> &'static str {
        "wasmpod"
    }

    fn version() -> Version {
        version!()
    }

    async fn compiler() -> Option<impl containerd_shim_wasm::shim::Compiler> {
        Some(compiler::WasmpodCompiler)
    }
}

fn main() {
    WasmpodShim::run(Config::default());
}
