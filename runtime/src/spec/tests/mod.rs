use std::path::Path;

use proptest::prelude::*;
use serde_json::{Value, json};

use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;

use super::names::check_label;
use super::*;

fn base() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.wasm"), b"\0asm\x01\0\0\0").unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    dir
}

fn parse(yaml: &str) -> Result<PodSpec, InvalidPod> {
    let dir = base();
    PodSpec::from_yaml(yaml, dir.path())
}

fn errors(yaml: &str) -> Vec<String> {
    parse(yaml)
        .unwrap_err()
        .errors
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn a_full_pod_has_one_error_its_bad_image() {
    let spec = parse(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: web, namespace: prod, labels: { app: web } }
spec:
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 5
  activeDeadlineSeconds: 60
  volumes: [ { name: data, hostPath: { path: data, type: Directory } }, { name: tmp, emptyDir: {} } ]
  initContainers:
  - { name: init, image: a.wasm }
  - { name: side, image: "file:///dev/null", restartPolicy: Always }
  containers:
  - name: main
    image: a.wasm
    command: [prog, -v]
    args: [x]
    env: [ { name: A, value: "1" }, { name: B } ]
    volumeMounts: [ { name: data, mountPath: /data, readOnly: true }, { name: tmp, mountPath: / } ]
"#,
    );
    // /dev/null is not a file: the only error
    let err = spec.unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].path, "spec.initContainers[1].image");
}

#[test]
fn argv_follows_kubernetes() {
    let spec = parse(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: p }
spec:
  initContainers: [ { name: s, image: a.wasm, restartPolicy: Always, args: [x] } ]
  containers: [ { name: c, image: a.wasm, command: [prog, -v], args: [x] } ]
"#,
    )
    .unwrap();
    assert_eq!(
        spec.containers[0].argv,
        ["s", "x"],
        "argv[0] is the container name without command"
    );
    assert_eq!(spec.containers[0].role, Role::Sidecar);
    assert_eq!(spec.containers[1].argv, ["prog", "-v", "x"]);
    assert_eq!(spec.restart_policy, RestartPolicy::Always);
    assert_eq!(spec.grace_period, Duration::from_secs(30));
    assert_eq!(spec.namespace(), "default");
}

#[test]
fn errors_are_all_reported_with_paths() {
    let errs = errors(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: p }
spec:
  restartPolicy: Sometimes
  terminationGracePeriodSeconds: -1
  volumes: [ { name: v }, { name: h, hostPath: { path: /tmp, type: Socket } }, { name: d, hostPath: { path: /nonexistent-dir } } ]
  containers:
  - name: c
    image: a.wasm
    restartPolicy: Always
    env: [ { name: "A=B", value: x } ]
    volumeMounts: [ { name: nope, mountPath: /x }, { name: h, mountPath: relative } ]
"#,
    );
    let expected = [
        "spec.restartPolicy: unsupported value \"Sometimes\"",
        "spec.terminationGracePeriodSeconds: invalid value -1",
        "spec.volumes[0]: must specify a volume type",
        "spec.volumes[1].hostPath.type: unsupported value \"Socket\"",
        "spec.volumes[2].hostPath.path: /nonexistent-dir is not a directory",
        "spec.containers[0].restartPolicy: not supported by wasmpod",
        "spec.containers[0].env[0].name: invalid value",
        "spec.containers[0].volumeMounts[0].name: not found",
        "spec.containers[0].volumeMounts[1].mountPath: invalid value \"relative\"",
    ];
    for e in expected {
        assert!(
            errs.iter().any(|x| x.starts_with(e)),
            "missing {e:?} in {errs:#?}"
        );
    }
}

#[test]
fn wrong_types_name_the_field() {
    let errs =
        errors("apiVersion: v1\nkind: Pod\nmetadata: { name: p }\nspec: { containers: 3 }\n");
    assert!(
        errs[0].starts_with("spec.containers: invalid type: integer `3`, expected a sequence"),
        "{errs:?}"
    );
    let errs = errors(
        "apiVersion: v1\nkind: Pod\nmetadata: { name: p, labels: [a] }\nspec: { containers: [] }\n",
    );
    assert!(!errs.is_empty());
}

#[test]
fn labels_and_subdomains() {
    assert!(check_label("a-1").is_ok());
    for bad in ["", "-a", "a-", "A", "a_b", &"a".repeat(64)] {
        assert!(check_label(bad).is_err(), "{bad:?}");
    }
    assert!(check_subdomain("a.b-c.d").is_ok());
    assert!(check_subdomain("a..b").is_err());
}

#[test]
fn from_pod_accepts_kubernetes_values() {
    let pod: k8s::Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "a.wasm"}]}
    }))
    .unwrap();
    let dir = base();
    let spec = PodSpec::from_pod(&pod, dir.path()).unwrap();
    assert_eq!(spec.name(), "p");
    assert_eq!(spec.containers[0].image, dir.path().join("a.wasm"));
}

/// Arbitrary JSON shaped like a Pod (right and wrong keys, any values).
fn pod_like() -> impl Strategy<Value = Value> {
    let key = prop::sample::select(vec![
        "apiVersion",
        "kind",
        "metadata",
        "spec",
        "name",
        "containers",
        "initContainers",
        "image",
        "args",
        "command",
        "env",
        "value",
        "volumes",
        "emptyDir",
        "hostPath",
        "path",
        "type",
        "volumeMounts",
        "mountPath",
        "readOnly",
        "restartPolicy",
        "terminationGracePeriodSeconds",
        "labels",
        "securityContext",
        "x",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-zA-Z0-9./_-]{0,12}".prop_map(Value::from),
        Just(Value::from("v1")),
        Just(Value::from("Pod")),
        Just(Value::from("a.wasm")),
    ];
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..6).prop_map(|m| Value::Object(
                m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
            )),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// The parser never panics, and every rejection carries at least one error.
    #[test]
    fn parser_never_panics_on_pod_like_documents(mut doc in pod_like()) {
        if let Value::Object(map) = &mut doc {
            map.insert("apiVersion".into(), "v1".into());
            map.insert("kind".into(), "Pod".into());
        }
        let text = serde_json::to_string(&doc).unwrap();
        if let Err(e) = PodSpec::from_yaml(&text, Path::new("/nonexistent")) {
            prop_assert!(!e.errors.is_empty());
        }
    }

    #[test]
    fn parser_never_panics_on_arbitrary_text(text in "\\PC{0,200}") {
        let _ = PodSpec::from_yaml(&text, Path::new("/nonexistent"));
    }
}

/// A pod of one container whose spec lines are `more` (indented under the container).
fn pod_with(meta: &str, spec: &str, container: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{ name: p{meta} }}\nspec:\n{spec}  containers:\n  - name: c\n    image: a.wasm\n{container}"
    )
}

#[test]
fn a_uid_is_a_uuid_and_never_a_path() {
    for bad in ["../../..", "a/b", "..", "x y", &"u".repeat(65)] {
        let errs = errors(&pod_with(&format!(", uid: {bad:?}"), "", ""));
        assert_eq!(errs.len(), 1, "{bad}: {errs:?}");
        assert!(
            errs[0].starts_with("metadata.uid: invalid value"),
            "{errs:?}"
        );
    }
    let spec = parse(&pod_with(
        ", uid: 6f1f0c36-98a4-4c1e-9a0b-6f0d3c2b9e11",
        "",
        "",
    ))
    .unwrap();
    assert_eq!(
        spec.uid.as_deref(),
        Some("6f1f0c36-98a4-4c1e-9a0b-6f0d3c2b9e11")
    );
}

#[test]
fn huge_durations_are_bounded_not_panics() {
    let max = i64::MAX;
    let spec = parse(&pod_with(
        "",
        &format!("  terminationGracePeriodSeconds: {max}\n  activeDeadlineSeconds: 2147483647\n"),
        &format!(
            "    livenessProbe: {{ exec: {{ command: [liveness] }}, terminationGracePeriodSeconds: {max} }}\n    lifecycle: {{ preStop: {{ sleep: {{ seconds: {max} }} }} }}\n"
        ),
    ))
    .unwrap();
    assert_eq!(spec.grace_period, MAX_DURATION);
    assert_eq!(
        spec.containers[0].liveness.as_ref().unwrap().grace,
        Some(MAX_DURATION)
    );
    assert_eq!(
        spec.containers[0].pre_stop.as_deref(),
        Some(&Handler::Sleep(MAX_DURATION))
    );
    let errs = errors(&pod_with("", "  activeDeadlineSeconds: 2147483648\n", ""));
    assert_eq!(
        errs,
        [
            "spec.activeDeadlineSeconds: invalid value 2147483648: must be between 1 and 2147483647, inclusive"
        ]
    );
}

#[test]
fn config_map_item_paths_that_cannot_be_written_are_refused() {
    let config =
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: { name: cm }\ndata: { k: v, l: w }\n";
    for (items, bad) in [
        (
            "[ { key: k, path: . } ]",
            "spec.volumes[0].configMap.items[0].path",
        ),
        (
            "[ { key: k, path: a/./b } ]",
            "spec.volumes[0].configMap.items[0].path",
        ),
        (
            "[ { key: k, path: a }, { key: l, path: a/b } ]",
            "spec.volumes[0].configMap.items[1].path",
        ),
        (
            "[ { key: k, path: a/b }, { key: l, path: a } ]",
            "spec.volumes[0].configMap.items[1].path",
        ),
        (
            "[ { key: k, path: x }, { key: l, path: x } ]",
            "spec.volumes[0].configMap.items[1].path",
        ),
    ] {
        let yaml = pod_with(
            "",
            &format!("  volumes: [ {{ name: v, configMap: {{ name: cm, items: {items} }} }} ]\n"),
            "",
        ) + config;
        let errs = parse(&yaml).unwrap_err().errors;
        assert_eq!(errs.len(), 1, "{items}: {errs:?}");
        assert_eq!(errs[0].path, bad, "{items}");
    }
}

#[test]
fn an_image_that_is_not_wasm_is_refused() {
    let dir = base();
    std::fs::write(dir.path().join("script.wasm"), "#!/bin/sh\necho hi\n").unwrap();
    let yaml = pod_with("", "", "").replace("a.wasm", "script.wasm");
    let err = PodSpec::from_yaml(&yaml, dir.path()).unwrap_err();
    assert_eq!(err.errors.len(), 1);
    assert_eq!(err.errors[0].path, "spec.containers[0].image");
    assert!(
        err.errors[0]
            .message
            .contains("is not a WebAssembly module or component")
    );
}

#[test]
fn exponential_variable_expansion_is_refused_at_validation() {
    let mut env = String::from("    env:\n    - { name: V0, value: xxxxxxxx }\n");
    for i in 1..40 {
        env += &format!(
            "    - {{ name: V{i}, value: \"$(V{p})$(V{p})\" }}\n",
            p = i - 1
        );
    }
    let start = std::time::Instant::now();
    let errs = parse(&pod_with("", "", &env)).unwrap_err().errors;
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
    // 8 · 2^15 bytes is the first past 128 KiB.
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].path, "spec.containers[0].env[V15]");
    // argv too
    let args = "    env: [ { name: A, value: aaaaaaaaaaaaaaaa } ]\n    args: [\"$(A)\"]\n";
    parse(&pod_with("", "", args)).unwrap();
}

#[test]
fn duplicate_keys_are_refused_with_their_field() {
    let errs = errors(&pod_with("", "", "    image: b.wasm\n"));
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].starts_with("spec.containers[0].image: duplicate key"),
        "{errs:?}"
    );
}

/// YAML made of anchors and aliases of random fan-out and depth.
fn alias_heavy() -> impl Strategy<Value = String> {
    prop::collection::vec((1usize..8, 0usize..4), 1..40).prop_map(|levels| {
        let mut text =
            String::from("apiVersion: v1\nkind: Pod\nmetadata: { name: p }\na0: &a0 [x]\n");
        for (i, (fan, back)) in levels.into_iter().enumerate() {
            let i = i + 1;
            let target = i.saturating_sub(1 + back);
            let items = vec![format!("*a{target}"); fan].join(", ");
            text += &format!("a{i}: &a{i} [{items}]\n");
        }
        text
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// However the aliases multiply, parsing ends quickly (refused past the bounds) and never
    /// panics.
    #[test]
    fn alias_heavy_documents_are_bounded(text in alias_heavy()) {
        let start = std::time::Instant::now();
        let result = PodSpec::from_yaml(&text, Path::new("/nonexistent"));
        prop_assert!(result.is_err());
        prop_assert!(start.elapsed() < std::time::Duration::from_secs(2));
    }

    /// Deeply nested flow collections are refused by depth, in linear time.
    #[test]
    fn deep_documents_are_bounded(depth in 1usize..400) {
        let text = format!("a: {}{}\n", "[".repeat(depth), "]".repeat(depth));
        let start = std::time::Instant::now();
        let result = yaml::documents(&text);
        prop_assert_eq!(result.is_ok(), depth < yaml::MAX_DEPTH);
        prop_assert!(start.elapsed() < std::time::Duration::from_secs(1));
    }
}

#[test]
fn field_errors_have_kinds_callers_can_match() {
    use FieldErrorKind as K;
    let yaml = r#"
apiVersion: v1
kind: Pod
metadata: { name: kinds }
spec:
  restartPolicy: Sometimes
  hostPID: true
  containers:
  - { name: c, image: a.wasm, volumeMounts: [ { name: nowhere, mountPath: /x } ], bogus: 1 }
  - { name: c, image: a.wasm, ports: [ { containerPort: 0 } ], livenessProbe: { periodSeconds: 5 } }
"#;
    let err = parse(yaml).unwrap_err();
    let kind = |path: &str| {
        err.errors
            .iter()
            .find(|e| e.path == path)
            .unwrap_or_else(|| panic!("no error at {path}: {err}"))
            .kind
    };
    assert_eq!(kind("spec.restartPolicy"), K::Unsupported);
    assert_eq!(kind("spec.hostPID"), K::NotSupportedByWasmpod);
    assert_eq!(kind("spec.containers[0].bogus"), K::Unknown);
    assert_eq!(kind("spec.containers[0].volumeMounts[0].name"), K::NotFound);
    assert_eq!(kind("spec.containers[1].name"), K::Duplicate);
    assert_eq!(
        kind("spec.containers[1].ports[0].containerPort"),
        K::Invalid
    );
    assert_eq!(kind("spec.containers[1].livenessProbe"), K::Required);
    assert_eq!(K::Required.cause_type(), "FieldValueRequired");
}

mod manifests;
