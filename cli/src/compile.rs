//! `wasmpod compile`: a module or component compiled ahead of time (the `compiler` feature).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use wasmpod::{AddressSpace, CompileTarget};

#[derive(Args)]
pub(crate) struct CompileArgs {
    /// The target triple of the nodes that run it (`aarch64-unknown-linux-gnu`,
    /// `riscv64gc-unknown-linux-gnu`, `x86_64-unknown-linux-gnu`) [default: this machine, with
    /// its CPU's features].
    #[arg(long, value_name = "TRIPLE")]
    target: Option<String>,
    /// For nodes with little address space (they say `compact` in their Node object): bounds
    /// checks in the code, memories that reserve only their size [default: as a node here].
    #[arg(long)]
    compact: bool,
    /// For nodes with a full 64-bit address space (`reserved`), wherever this runs.
    #[arg(long, conflicts_with = "compact")]
    reserved: bool,
    /// Where to write the artefact [default: the input with the extension `.cwasm`].
    #[arg(short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// The `.wasm` module or component.
    input: PathBuf,
}

pub(crate) fn compile(args: CompileArgs) -> anyhow::Result<()> {
    let wasm = std::fs::read(&args.input)
        .with_context(|| format!("cannot read {}", args.input.display()))?;
    let mut target = CompileTarget::host();
    if let Some(triple) = args.target {
        target = target.triple(triple);
    }
    if args.compact {
        target = target.address_space(AddressSpace::Compact);
    } else if args.reserved {
        target = target.address_space(AddressSpace::Reserved);
    }
    let artefact = wasmpod::compile(&args.input, &wasm, &target)?;
    let output = args
        .output
        .unwrap_or_else(|| args.input.with_extension("cwasm"));
    std::fs::write(&output, artefact)
        .with_context(|| format!("cannot write {}", output.display()))?;
    Ok(())
}
