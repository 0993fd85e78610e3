//! The release binaries' code layout: the functions running a pod executes, first and together
//! (included by the build scripts of the CLI and the shim).
//!
//! Starting a pod runs about 2,000 of a binary's functions, spread over its 32 MiB of code; a
//! page fault on code maps the 64 KiB around it, so a `wasmpod run` kept 12.5 MiB of the
//! executable resident for 1.7 MiB of functions, and each pod's shim process likewise.
//! `startup.order` beside the crate's manifest lists them (written by `tools/startup-order.py`)
//! and the linker puts them at the start of the text. Only rust-lld reads the list, the linker of
//! release builds for x86-64 Linux since Rust 1.90 unless another one is configured; the names
//! are those of a release build of the crate alone by this compiler.

use std::env::var;
use std::process::Command;

/// Hands the linker the startup order when it is rust-lld linking a release build.
///
/// Both paths are relative (the list to the crate, as cargo reads `rerun-if-changed`; to the
/// workspace root, where cargo runs rustc and so the linker): a build script's output is shared
/// by every checkout built into one target dir, and an absolute path would have each link with
/// the list of whichever checkout ran the script last.
pub(crate) fn link_args() {
    let dir = std::path::PathBuf::from(var("CARGO_MANIFEST_DIR").unwrap_or_default());
    println!("cargo:rerun-if-changed=startup.order");
    println!("cargo:rerun-if-changed=../build/startup_order.rs");
    let Some(crate_dir) = dir.file_name().and_then(|d| d.to_str()) else {
        return;
    };
    if !dir.join("startup.order").is_file() {
        return;
    }
    let order = format!("{crate_dir}/startup.order");
    let target = var("TARGET").unwrap_or_default();
    let rustflags = var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let linker_configured =
        var("RUSTC_LINKER").is_ok() || ["linker", "fuse-ld"].iter().any(|f| rustflags.contains(f));
    if target == "x86_64-unknown-linux-gnu"
        && var("HOST").ok().as_deref() == Some(&target)
        && var("PROFILE").ok().as_deref() == Some("release")
        && !linker_configured
        && links_with_rust_lld()
    {
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={order}");
        // A name the binary lacks (a function since renamed) is no error: it is skipped.
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// Whether the compiler is 1.90 or later, whose default linker here is its own lld.
fn links_with_rust_lld() -> bool {
    let rustc = var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("--version").output() else {
        return false;
    };
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let version = String::from_utf8_lossy(&out.stdout);
    let mut numbers = version
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .split('.')
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    (major, minor) >= (1, 90)
}
