//! The scriptable guest with the preview1 termination import: it keeps its grace period.
wasmpod_test_programs::p1_exports!();

#[link(wasm_import_module = "wasmpod")]
unsafe extern "C" {
    fn termination_requested() -> i32;
}

fn requested() -> bool {
    // SAFETY: a host function without arguments or memory access.
    unsafe { termination_requested() != 0 }
}

fn main() {
    wasmpod_test_programs::main(Some(requested));
}
