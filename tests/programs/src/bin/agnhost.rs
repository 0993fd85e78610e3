//! The scriptable guest, without the termination import: TERM stops it at once.
fn main() {
    wasmpod_test_programs::main(None);
}
