//! The shipped WIT package parses, and names what the host links.

#[test]
fn wit_package_parses_and_matches_the_host() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    let mut resolve = wit_parser::Resolve::new();
    let (pkg, _) = resolve.push_dir(&dir).expect("wit/ parses");
    let package = &resolve.packages[pkg];
    assert_eq!(package.name.to_string(), "wasmpod:pod@0.1.0");
    let termination = &resolve.interfaces[package.interfaces["termination"]];
    let mut functions: Vec<&str> = termination.functions.keys().map(String::as_str).collect();
    functions.sort();
    assert_eq!(functions, ["requested", "subscribe"]);
    for (interface, names) in [
        ("probes", ["liveness", "readiness", "startup"].as_slice()),
        ("hooks", &["post-start", "pre-stop"]),
    ] {
        let i = &resolve.interfaces[package.interfaces[interface]];
        for name in names {
            assert!(i.functions.contains_key(*name), "{interface}.{name}");
        }
    }
}
