//! How the binary is linked.

fn main() {
    // Packed relative relocations (DT_RELR): the dynamic loader applies the binary's ~76,000
    // relative relocations from a 20 KiB table instead of a 1.8 MiB one that every start reads
    // and keeps resident (a tenth of a `wasmpod run`'s time, 1 MiB of its peak memory). GNU ld
    // ≥ 2.38 and lld ≥ 15 know the flag; ld keeps the old format where libc (< 2.36) lacks it.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu")
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
