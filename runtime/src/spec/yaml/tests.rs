//! Tests of `yaml`.

use super::*;

fn error_of(text: &str) -> FieldError {
    documents(text).unwrap_err().errors.remove(0)
}

#[test]
fn duplicate_keys_are_refused_with_their_path() {
    let e = error_of("spec:\n  containers:\n  - name: a\n    name: b\n");
    assert_eq!(e.path, "spec.containers[0].name");
    assert!(e.message.starts_with("duplicate key"), "{e}");
    let e = error_of("a: 1\na: 2\n");
    assert_eq!(e.path, "a");
}

#[test]
fn duplicate_keys_are_refused_in_json_too() {
    // serde_json alone keeps the last: the pod would run b.wasm.
    let pod = r#"{"containers":[{"name":"main","image":"a.wasm","image":"b.wasm"}]}"#;
    let e = error_of(pod);
    assert_eq!(e.path, "containers[0].image");
    assert!(e.message.starts_with("duplicate key"), "{e}");
    let e = error_of(r#"{"kind": "Pod", "kind": "Secret"}"#);
    assert_eq!(e.path, "kind");
    let docs = documents(r#"{"a": {"x": 1}, "b": {"x": 2.5, "y": [null, true]}}"#).unwrap();
    assert_eq!(docs[0]["b"]["x"], 2.5);
    assert_eq!(docs[0]["b"]["y"][1], true);
}

#[test]
fn an_alias_bomb_is_refused_quickly() {
    // Each level doubles: 2^30 leaves once expanded.
    let mut text = String::from("a0: &a0 [x, x]\n");
    for i in 1..30 {
        text += &format!("a{i}: &a{i} [*a{p}, *a{p}]\n", p = i - 1);
    }
    let start = std::time::Instant::now();
    assert!(documents(&text).is_err());
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
}

#[test]
fn a_wide_alias_repeated_is_refused_by_the_node_count() {
    let items = vec!["x"; 1000].join(", ");
    let aliases = vec!["*a"; 300].join(", ");
    let text = format!("a: &a [{items}]\nb: [{aliases}]\n");
    let e = error_of(&text);
    assert!(e.message.contains("more than 200000 values"), "{e}");
    assert!(e.path.starts_with("b["), "{e}");
}

#[test]
fn many_aliases_of_a_long_string_are_refused() {
    let mut text = format!("s: &s {}\nl:\n", "y".repeat(100_000));
    for _ in 0..200 {
        text += "- *s\n";
    }
    let e = error_of(&text);
    assert!(e.message.contains("bytes of values"), "{e}");
    assert!(e.path.starts_with("l["), "{e}");
}

#[test]
fn deep_nesting_and_large_inputs_are_refused() {
    let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let e = error_of(&deep);
    assert!(e.message.contains("nested too deeply"), "{e}");
    let big = format!("a: {}\n", "z".repeat(MAX_INPUT));
    assert!(error_of(&big).message.starts_with("too large"));
}

/// Worst cases of 3 MiB each: refused at once, not after a pass over the whole text.
#[test]
fn hostile_texts_are_refused_in_time_proportional_to_what_is_read() {
    let n = MAX_INPUT - 64;
    let cases = [
        ("flow sequences", format!("spec: {}", "[".repeat(n))),
        ("flow mappings", format!("spec: {}", "{a: ".repeat(n / 4))),
        ("block sequences", format!("spec:\n{}", "- ".repeat(n / 2))),
        ("block mappings", {
            let mut t = String::from("spec:\n");
            let mut indent = 1;
            while t.len() + indent + 4 < n {
                t += &" ".repeat(indent);
                t += "a:\n";
                indent += 1;
            }
            t
        }),
        ("many values", format!("spec: [{}]", "1,".repeat(n / 2 - 8))),
        ("JSON", format!("{{\"spec\": {}", "[".repeat(n))),
    ];
    for (what, text) in cases {
        let start = std::time::Instant::now();
        let e = documents(&text).map(|_| ()).expect_err(what);
        let took = start.elapsed();
        // A guard against work that grows faster than the text (a debug build on a machine
        // busy compiling takes a few seconds); the figure is measured in release, in
        // docs/security.md.
        assert!(
            took < std::time::Duration::from_secs(20),
            "{what}: {took:?}: {e}"
        );
        // In JSON the parser meets its own bound before the first value.
        if what != "JSON" {
            assert!(e.errors[0].path.starts_with("spec"), "{what}: {e}");
        }
        assert_eq!(
            e.errors[0].kind,
            crate::FieldErrorKind::TooLarge,
            "{what}: {e}"
        );
    }
    // A long value is no bound crossed, and is read in time too.
    let start = std::time::Instant::now();
    let long = documents(&format!("spec: {}", "x".repeat(n))).unwrap();
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(long[0]["spec"].as_str().map(str::len), Some(n));
}

#[test]
fn scalars_resolve_as_the_core_schema() {
    let docs = documents(
        "a: 0644\nb: 0x1F\nc: -12\nd: 1.5\ne: ~\nf: True\ng: '1'\nh: !!str 2\n\
             i: 18446744073709551615\nj: 1e3\nk: .inf\nl: yes\nm: |\n  x\nn: -0o7\n3: k\n",
    )
    .unwrap();
    let d = &docs[0];
    assert_eq!(d["a"], "0644");
    assert_eq!(d["b"], 31);
    assert_eq!(d["c"], -12);
    assert_eq!(d["d"], 1.5);
    assert_eq!(d["e"], Value::Null);
    assert_eq!(d["f"], true);
    assert_eq!(d["g"], "1");
    assert_eq!(d["h"], "2");
    assert_eq!(d["i"], u64::MAX);
    assert_eq!(d["j"], 1000.0);
    assert_eq!(d["k"], Value::Null);
    assert_eq!(d["l"], "yes");
    assert_eq!(d["m"], "x\n");
    assert_eq!(d["n"], -7);
    assert_eq!(d["3"], "k");
    let e = error_of("a: !custom x\n");
    assert!(e.message.contains("unsupported tag"), "{e}");
    assert_eq!(e.path, "a");
}

#[test]
fn json_is_bounded_as_yaml_is() {
    let deep = format!("{{\"a\": {}1{}}}", "[".repeat(100), "]".repeat(100));
    assert!(error_of(&deep).message.contains("nested too deeply"));
    let wide = format!("[{}0]", "0,".repeat(MAX_NODES as usize));
    assert!(error_of(&wide).message.contains("values"));
    let docs = documents(r#"{"kind": "Pod", "spec": {"a": [1, "x"]}}"#).unwrap();
    assert_eq!(docs[0]["spec"]["a"][1], "x");
}

#[test]
fn ordinary_documents_read_as_before() {
    let docs = documents("a: 1\nb: [x, {c: true}]\n---\n---\n1: one\n").unwrap();
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0]["b"][1]["c"], Value::Bool(true));
    assert_eq!(docs[1]["1"], Value::from("one"));
}
