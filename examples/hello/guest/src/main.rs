//! The smallest wasmpod container: prints a greeting with what the pod gave it, then exits 0.

fn main() {
    let name = std::env::var("GREETING_NAME").unwrap_or_else(|_| "world".into());
    println!(
        "Hello, {name}! I am {:?}.",
        std::env::args().next().unwrap_or_default()
    );
}
