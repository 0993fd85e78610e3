//! `wasmpod validate`: a good pod, and every kind of bad input named by field and file.

use super::*;

#[test]
fn validate_accepts_a_good_pod() {
    let dir = Dir::new();
    let pod = dir.write("pod.yaml", HELLO);
    let out = dir.wasmpod().arg("validate").arg(&pod).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout).trim(), "valid");
}

/// Bad input: exit code 2, a message naming the file and the field, nothing started.
fn rejects(yaml: &str, expect: &[&str]) {
    let dir = Dir::new();
    std::fs::write(dir.path("not.wasm"), b"\0asn this is not wasm").unwrap();
    let component = wat::parse_str("(component)").unwrap();
    std::fs::write(dir.path("norun.wasm"), component).unwrap();
    let pod = dir.write("pod.yaml", yaml);
    for cmd in ["validate", "run"] {
        if cmd == "validate"
            && expect
                .iter()
                .any(|e| e.contains("cannot run") || e.contains("not a WebAssembly"))
        {
            continue; // validation does not load modules
        }
        let out = if cmd == "run" {
            dir.run(&pod, &[])
        } else {
            dir.wasmpod().arg("validate").arg(&pod).output().unwrap()
        };
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {stderr}");
        assert!(
            stderr.contains(&pod.display().to_string()),
            "{cmd}: names the file: {stderr}"
        );
        for e in expect {
            assert!(stderr.contains(e), "{cmd}: expected {e:?} in: {stderr}");
        }
        assert_eq!(dir.pods_started(), 0, "{cmd}: nothing started");
    }
}

#[test]
fn rejects_text_that_is_not_yaml() {
    rejects(
        "apiVersion: v1\nkind: Pod\n  metadata: [unclosed\n",
        &["not valid YAML"],
    );
}

#[test]
fn rejects_yaml_that_is_not_a_pod() {
    rejects(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: { name: x }\n",
        &["not a Pod", "Deployment"],
    );
    rejects("- just\n- a list\n", &["not a Kubernetes object"]);
}

#[test]
fn rejects_missing_containers() {
    rejects(
        "apiVersion: v1\nkind: Pod\nmetadata: { name: x }\nspec: {}\n",
        &["spec.containers: required value"],
    );
}

#[test]
fn rejects_duplicate_container_names() {
    rejects(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: dup }
spec:
  initContainers: [ { name: a, image: "{p1}" } ]
  containers: [ { name: a, image: "{p1}" }, { name: b, image: "{p1}" }, { name: b, image: "{p1}" } ]
"#,
        &[
            "spec.containers[0].name: duplicate value \"a\"",
            "spec.containers[2].name: duplicate value \"b\"",
        ],
    );
}

#[test]
fn rejects_invalid_names() {
    rejects(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: Bad_Name }
spec:
  volumes: [ { name: "V!", emptyDir: {} } ]
  containers: [ { name: "-x", image: "{p1}" } ]
"#,
        &[
            "metadata.name: invalid value \"Bad_Name\"",
            "spec.volumes[0].name: invalid value",
            "spec.containers[0].name: invalid value \"-x\"",
        ],
    );
}

#[test]
fn rejects_unsupported_and_unknown_fields_all_at_once() {
    rejects(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: fields }
spec:
  hostPID: true
  containers:
  - name: a
    image: "{p1}"
    securityContext: { privileged: true }
    imagee: typo
  - { name: b, image: "{p1}", stdin: true, tty: true }
"#,
        &[
            "spec.hostPID: not supported by wasmpod",
            "spec.containers[0].securityContext.privileged: not supported by wasmpod: a wasm guest cannot be given",
            "spec.containers[0].imagee: unknown field",
            "spec.containers[1].tty: not supported by wasmpod",
        ],
    );
}

#[test]
fn rejects_a_missing_wasm_file() {
    rejects(
        "apiVersion: v1\nkind: Pod\nmetadata: { name: m }\nspec:\n  containers: [ { name: a, image: nowhere.wasm } ]\n",
        &["spec.containers[0].image", "nowhere.wasm does not exist"],
    );
}

#[test]
fn rejects_a_file_that_is_not_wasm() {
    rejects(
        "apiVersion: v1\nkind: Pod\nmetadata: { name: m }\nspec:\n  containers: [ { name: a, image: not.wasm } ]\n",
        &[
            "spec.containers[0].image",
            "not a WebAssembly module or component",
        ],
    );
}

#[test]
fn rejects_a_module_with_an_unknown_import() {
    rejects(
        "apiVersion: v1\nkind: Pod\nmetadata: { name: m }\nspec:\n  containers: [ { name: a, image: \"{missing-import}\" } ]\n",
        &[
            "spec.containers[0].image",
            "cannot run in wasmpod",
            "nosuch::frobnicate",
        ],
    );
}

#[test]
fn rejects_a_component_without_wasi_cli_run() {
    rejects(
        "apiVersion: v1\nkind: Pod\nmetadata: { name: m }\nspec:\n  containers: [ { name: a, image: norun.wasm } ]\n",
        &[
            "spec.containers[0].image",
            "cannot run in wasmpod",
            "wasi:cli/run",
        ],
    );
}

/// `--config FILE` supplies ConfigMaps and Secrets; without it the reference is an error, and a
/// config file holding something else is an error naming that file.
#[test]
fn config_files() {
    let dir = Dir::new();
    let pod = dir.write(
        "pod.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: { name: cfg }
spec:
  restartPolicy: Never
  volumes: [ { name: c, configMap: { name: settings } } ]
  containers:
  - { name: app, image: "{p1}", args: [cat, /etc/app/mode, env, TOKEN], volumeMounts: [ { name: c, mountPath: /etc/app } ], env: [ { name: TOKEN, valueFrom: { secretKeyRef: { name: api, key: token } } } ] }
"#,
    );
    let config = dir.write(
        "config.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: settings }\ndata: { mode: fast }\n---\napiVersion: v1\nkind: Secret\nmetadata: { name: api }\nstringData: { token: abc }\n",
    );
    let out = dir.wasmpod().arg("validate").arg(&pod).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains(r#"spec.volumes[0].configMap.name: not found: no configmap "settings""#),
        "{err}"
    );
    let out = dir
        .wasmpod()
        .args(["validate", "--config"])
        .arg(&config)
        .arg(&pod)
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout).trim(), "valid", "{}", text(&out.stderr));
    let out = dir.run(&pod, &["--config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "[app] fast\n[app] TOKEN=abc\n");

    let wrong = dir.write(
        "wrong.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: { name: d }\n",
    );
    let out = dir.run(&pod, &["--config", wrong.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "{}: document 1: expected a v1 ConfigMap or Secret",
            wrong.display()
        )),
        "{err}"
    );
}

/// PriorityClasses come with the pod file or `--config` files; a pod naming an unknown class is
/// refused (exit 2), as is an invalid class.
#[test]
fn priority_classes_from_the_pod_file_and_config() {
    let dir = Dir::new();
    let pod = |class: &str| {
        format!(
            r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{ name: important }}
value: 1000
---
apiVersion: v1
kind: Pod
metadata: {{ name: prio }}
spec:
  restartPolicy: Never
  priorityClassName: {class}
  containers:
  - {{ name: c, image: "{{p1}}", args: [print, hello] }}
"#
        )
    };
    let good = dir.write("good.yaml", &pod("important"));
    let out = dir.run(&good, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "[c] hello\n");
    let validate = dir.wasmpod().arg("validate").arg(&good).output().unwrap();
    assert_eq!(text(&validate.stdout), "valid\n");

    let classes = dir.write(
        "classes.yaml",
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: other}\nvalue: 7\n",
    );
    let other = dir.write("other.yaml", &pod("other"));
    let out = dir.run(&other, &["--config", classes.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let out = dir.run(&other, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr)
            .contains("spec.priorityClassName: no PriorityClass with name other was found"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(dir.pods_started(), 2, "nothing started for the refused pod");

    let bad = dir.write(
        "bad.yaml",
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: other}\nvalue: 2000000000\n",
    );
    let out = dir.run(&other, &["--config", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("bad.yaml") && stderr.contains("document 1.value"),
        "{stderr}"
    );
}

#[test]
fn rejects_a_repeated_key_in_json() {
    // Read as JSON alone, the pod would run the second image.
    rejects(
        r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "twice"},
           "spec": {"containers": [{"name": "main", "image": "a.wasm", "image": "b.wasm"}]}}"#,
        &["spec.containers[0].image", "duplicate key"],
    );
}
