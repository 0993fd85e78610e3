//! Packed relative relocations for the workspace's binaries (included by their build scripts).
//!
//! A binary of this size has ~76,000 relative relocations: the dynamic loader applies them at
//! every start from a 1.8 MiB table it reads and keeps resident, or, packed (`DT_RELR`), from a
//! 20 KiB one (a tenth of a `wasmpod run`'s time, 1 MiB of its peak memory). The binary then
//! needs a C library that knows the format: glibc ≥ 2.36, which the linker records as a
//! dependency on the `GLIBC_ABI_DT_RELR` version. So packed only where that holds for certain:
//! building for this machine, x86-64 Linux with glibc (GNU ld ≥ 2.38, lld ≥ 15 and mold know
//! the flag; an older ld ignores it with a warning), whose libc defines that version.

use std::env::var;

/// Asks the linker for packed relative relocations when the binary will run with them.
pub(crate) fn link_args() {
    println!("cargo:rerun-if-changed=../build/relr.rs");
    let for_this_machine = var("TARGET").ok() == var("HOST").ok();
    let cfg = |key: &str, value: &str| var(key).as_deref() == Ok(value);
    if for_this_machine
        && cfg("CARGO_CFG_TARGET_ARCH", "x86_64")
        && cfg("CARGO_CFG_TARGET_OS", "linux")
        && cfg("CARGO_CFG_TARGET_ENV", "gnu")
        && libc_knows_relr()
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether this machine's glibc defines the `GLIBC_ABI_DT_RELR` version (2.36 and later).
fn libc_knows_relr() -> bool {
    const VERSION: &[u8] = b"GLIBC_ABI_DT_RELR";
    [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/lib64/libc.so.6",
        "/usr/lib64/libc.so.6",
    ]
    .iter()
    .find_map(|path| std::fs::read(path).ok())
    .is_some_and(|libc| libc.windows(VERSION.len()).any(|w| w == VERSION))
}
