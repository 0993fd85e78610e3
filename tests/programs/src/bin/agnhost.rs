//! The scriptable guest, without the termination import: TERM stops it at once.
wasmpod_test_programs::p1_exports!();

fn main() {
    wasmpod_test_programs::main(None);
}
