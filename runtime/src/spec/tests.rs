use std::path::Path;

use proptest::prelude::*;
use serde_json::{Value, json};

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
fn a_full_pod_converts() {
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
