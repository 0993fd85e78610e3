//! How the binary is linked.

#[path = "../build/relr.rs"]
mod relr;

fn main() {
    relr::link_args();
    println!("cargo:rerun-if-changed=build.rs");
}
