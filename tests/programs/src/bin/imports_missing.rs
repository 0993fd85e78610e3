//! A module that imports something wasmpod does not provide.
#[link(wasm_import_module = "nosuch")]
unsafe extern "C" {
    fn frobnicate() -> i32;
}

fn main() {
    // SAFETY: never provided; the module must be rejected before it runs.
    std::process::exit(unsafe { frobnicate() });
}
