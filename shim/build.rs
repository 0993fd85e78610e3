//! How the binary is linked.

#[path = "../build/relr.rs"]
mod relr;
#[path = "../build/startup_order.rs"]
mod startup_order;

fn main() {
    relr::link_args();
    startup_order::link_args();
    println!("cargo:rerun-if-changed=build.rs");
}
