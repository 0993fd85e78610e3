//! Paths of the test guests, built by this crate's build script.
include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));
