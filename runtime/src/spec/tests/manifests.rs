//! Real manifests: what the API server sets, security contexts, runtime classes, tolerations.

use super::*;

/// What `kubectl run demo --image=... --restart=Never --dry-run=client -o yaml` prints.
#[test]
fn a_pod_made_by_kubectl_run_validates() {
    let yaml = r#"
apiVersion: v1
kind: Pod
metadata:
  creationTimestamp: null
  labels:
    run: demo
  name: demo
spec:
  containers:
  - image: a.wasm
    name: demo
    resources: {}
  dnsPolicy: ClusterFirst
  restartPolicy: Never
status: {}
"#;
    let spec = parse(yaml).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(spec.restart_policy, RestartPolicy::Never);
}

/// A pod that sets nothing of its DNS or its placement keeps no copy of either: every such pod
/// shares one `Dns`, and its spec holds no scheduling constraints; one that sets them has its own.
#[test]
fn default_dns_and_scheduling_take_no_room_of_their_own() {
    let plain = |name: &str| {
        parse(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{ name: {name} }}\nspec:\n  containers: [ {{ name: c, image: a.wasm }} ]\n"
        ))
        .unwrap_or_else(|e| panic!("{e}"))
    };
    let (a, b) = (plain("a"), plain("b"));
    assert!(std::sync::Arc::ptr_eq(&a.dns, &b.dns));
    assert!(a.scheduling.is_none());
    assert!(a.scheduling().tolerations.is_empty());
    let set = parse(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: set }
spec:
  containers: [ { name: c, image: a.wasm } ]
  hostAliases: [ { ip: 10.1.2.3, hostnames: [db.internal] } ]
  tolerations: [ { key: dedicated, operator: Exists, effect: NoSchedule } ]
"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!std::sync::Arc::ptr_eq(&a.dns, &set.dns));
    assert_eq!(set.dns.aliases.len(), 1);
    assert!(set.scheduling.is_some());
    assert_eq!(
        set.scheduling().tolerations[0].key.as_deref(),
        Some("dedicated")
    );
}

/// Fields the API server sets are accepted on input and not used.
#[test]
fn server_set_fields_are_accepted() {
    let yaml = r#"
apiVersion: v1
kind: Pod
metadata:
  name: exported
  creationTimestamp: "2026-11-23T10:00:00Z"
  resourceVersion: "12345"
  generation: 2
  selfLink: /api/v1/namespaces/default/pods/exported
  finalizers: [example.com/keep]
  ownerReferences: [ { apiVersion: apps/v1, kind: ReplicaSet, name: rs, uid: 0b5c4a4e-1111-4222-8333-944455556666 } ]
  managedFields: [ { manager: kubectl, operation: Update, apiVersion: v1, fieldsType: FieldsV1, fieldsV1: { "f:spec": {} } } ]
spec:
  containers: [ { name: c, image: a.wasm } ]
status:
  phase: Running
  podIP: 10.0.0.7
"#;
    parse(yaml).unwrap_or_else(|e| panic!("{e}"));
    let errs = errors(&pod_with("", "  dnsPolicy: None\n", ""));
    assert!(
        errs[0].starts_with("spec.dnsConfig.nameservers: Required value"),
        "{errs:?}"
    );
    let errs = errors(&pod_with("", "  dnsPolicy: Sometimes\n", ""));
    assert!(
        errs[0].starts_with("spec.dnsPolicy: unsupported value"),
        "{errs:?}"
    );
}

/// Security settings the wasm sandbox gives already are accepted; those it cannot give are
/// refused with the reason.
#[test]
fn security_contexts_the_sandbox_satisfies_are_accepted() {
    let good = pod_with(
        "",
        "  securityContext: { runAsNonRoot: true, runAsUser: 1000, fsGroup: 2000, seccompProfile: { type: RuntimeDefault } }\n  schedulerName: default-scheduler\n  enableServiceLinks: true\n",
        "    imagePullPolicy: IfNotPresent\n    stdin: false\n    tty: false\n    securityContext: { runAsNonRoot: true, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: { drop: [ALL] }, seccompProfile: { type: RuntimeDefault } }\n",
    );
    parse(&good).unwrap_or_else(|e| panic!("{e}"));
    let bad = pod_with(
        "",
        "  securityContext: { sysctls: [ { name: net.core.somaxconn, value: \"1024\" } ], seccompProfile: { type: Unconfined } }\n  schedulerName: my-scheduler\n",
        "    imagePullPolicy: Sometimes\n    tty: true\n    securityContext: { privileged: true, allowPrivilegeEscalation: true, capabilities: { add: [NET_ADMIN] } }\n",
    );
    let err = parse(&bad).unwrap_err();
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    for path in [
        "spec.containers[0].securityContext.privileged",
        "spec.containers[0].securityContext.allowPrivilegeEscalation",
        "spec.containers[0].securityContext.capabilities.add",
        "spec.containers[0].imagePullPolicy",
        "spec.containers[0].tty",
        "spec.securityContext.seccompProfile.type",
        "spec.securityContext.sysctls",
        "spec.schedulerName",
    ] {
        assert!(paths.contains(&path), "{path} in {paths:?}");
    }
    let privileged = err
        .errors
        .iter()
        .find(|e| e.path.ends_with("privileged"))
        .unwrap();
    assert_eq!(privileged.kind, FieldErrorKind::NotSupportedByWasmpod);
    assert!(
        privileged.message.contains("cannot be given"),
        "{privileged}"
    );
}

#[test]
fn runtime_class_names_are_validated_and_resolved_by_the_node() {
    for class in ["wasmpod", "wasmtime-spin-v2", "gvisor"] {
        parse(&pod_with("", &format!("  runtimeClassName: {class}\n"), ""))
            .unwrap_or_else(|e| panic!("{class}: {e}"));
    }
    let err = parse(&pod_with("", "  runtimeClassName: Not_A_Name\n", "")).unwrap_err();
    assert_eq!(err.errors[0].path, "spec.runtimeClassName");
    assert_eq!(err.errors[0].kind, FieldErrorKind::Invalid);
}

#[test]
fn tolerations_are_validated_as_the_api_server_does() {
    let ok = "  tolerations: [ { key: a, operator: Equal, value: b, effect: NoSchedule }, { operator: Exists }, { key: c, operator: Exists, effect: NoExecute, tolerationSeconds: 30 } ]\n";
    parse(&pod_with("", ok, "")).unwrap_or_else(|e| panic!("{e}"));
    let bad = "  tolerations: [ { value: b }, { key: a, operator: Exists, value: b }, { key: a, operator: Near }, { key: a, effect: Sometimes }, { key: a, tolerationSeconds: 5 } ]\n";
    let paths = error_paths(bad);
    assert_eq!(
        paths,
        [
            "spec.tolerations[0].operator",
            "spec.tolerations[1].value",
            "spec.tolerations[2].operator",
            "spec.tolerations[3].effect",
            "spec.tolerations[4].effect",
        ]
    );
}

#[test]
fn node_affinity_is_validated_as_the_api_server_does() {
    let ok = r#"  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions: [ { key: kubernetes.io/arch, operator: In, values: [amd64, arm64] }, { key: gpu, operator: DoesNotExist } ]
        - matchFields: [ { key: metadata.name, operator: In, values: [edge-1] } ]
      preferredDuringSchedulingIgnoredDuringExecution:
      - { weight: 10, preference: { matchExpressions: [ { key: zone, operator: In, values: [a] } ] } }
"#;
    parse(&pod_with("", ok, "")).unwrap_or_else(|e| panic!("{e}"));
    let bad = r#"  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions: [ { key: zone, operator: In }, { key: zone, operator: Exists, values: [a] }, { key: cores, operator: Gt, values: [many] }, { key: zone, operator: Near, values: [a] }, { key: "-bad", operator: Exists } ]
        - matchFields: [ { key: metadata.labels, operator: In, values: [a] }, { key: metadata.name, operator: In, values: [a, b] } ]
      preferredDuringSchedulingIgnoredDuringExecution:
      - { weight: 0, preference: { matchExpressions: [ { key: zone, operator: In, values: [a] } ] } }
"#;
    let paths = error_paths(bad);
    let preferred = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution";
    let terms = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
    assert_eq!(
        paths,
        [
            format!("{preferred}[0].weight"),
            format!("{terms}[0].matchExpressions[0].values"),
            format!("{terms}[0].matchExpressions[1].values"),
            format!("{terms}[0].matchExpressions[2].values"),
            format!("{terms}[0].matchExpressions[3].operator"),
            format!("{terms}[0].matchExpressions[4].key"),
            format!("{terms}[1].matchFields[0].key"),
            format!("{terms}[1].matchFields[1].values"),
        ]
    );
    let empty = "  affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [] } } }\n";
    let err = parse(&pod_with("", empty, "")).unwrap_err();
    assert_eq!(err.errors[0].path, terms);
    // Pod affinity is honoured (see `placement`): an empty one is no constraint.
    let pod_affinity = "  affinity: { podAffinity: {} }\n";
    parse(&pod_with("", pod_affinity, "")).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn host_namespaces_are_what_a_wasm_pod_is_or_refused_with_why() {
    let off = "  hostNetwork: false\n  hostPID: false\n  hostIPC: false\n  shareProcessNamespace: false\n  hostUsers: true\n";
    parse(&pod_with("", off, "")).unwrap_or_else(|e| panic!("{e}"));
    let on = "  hostNetwork: true\n  hostPID: true\n  hostIPC: true\n  shareProcessNamespace: true\n  hostUsers: false\n";
    let err = parse(&pod_with("", on, "")).unwrap_err();
    let found: Vec<(String, bool)> = err
        .errors
        .iter()
        .map(|e| (e.path.clone(), e.message.contains("wasm")))
        .collect();
    assert_eq!(
        found,
        [
            ("spec.hostPID".to_owned(), true),
            ("spec.hostIPC".to_owned(), true),
            ("spec.shareProcessNamespace".to_owned(), true),
        ]
    );
}

#[test]
fn termination_message_paths_are_files_beside_no_mount() {
    let container = |fields: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{ name: p }}\nspec:\n  volumes: [ {{ name: data, emptyDir: {{}} }} ]\n  containers:\n  - {{ name: c, image: a.wasm, volumeMounts: [ {{ name: data, mountPath: /data }} ], {fields} }}\n"
        )
    };
    for ok in [
        "terminationMessagePath: /dev/termination-log, terminationMessagePolicy: File",
        "terminationMessagePolicy: FallbackToLogsOnError",
        "terminationMessagePath: /run/app/message",
    ] {
        let spec = parse(&container(ok)).unwrap_or_else(|e| panic!("{ok}: {e}"));
        let t = spec.containers[0].termination.as_ref().unwrap();
        assert!(t.dir.starts_with('/') && !t.file.is_empty(), "{ok}: {t:?}");
    }
    let plain = parse(&container("args: []")).unwrap();
    assert!(plain.containers[0].termination.is_none());
    for (bad, field) in [
        (
            "terminationMessagePolicy: Sometimes",
            "terminationMessagePolicy",
        ),
        (
            "terminationMessagePath: relative/file",
            "terminationMessagePath",
        ),
        (
            "terminationMessagePath: /toplevel",
            "terminationMessagePath",
        ),
        (
            "terminationMessagePath: /data/message",
            "terminationMessagePath",
        ),
        (
            "terminationMessagePath: /data/deeper/message",
            "terminationMessagePath",
        ),
        (
            "terminationMessagePath: /dev/../etc/x",
            "terminationMessagePath",
        ),
    ] {
        let err = parse(&container(bad)).unwrap_err();
        assert_eq!(
            err.errors[0].path,
            format!("spec.containers[0].{field}"),
            "{bad}"
        );
    }
    // A mount inside the message's directory would be hidden too.
    let nested = "apiVersion: v1\nkind: Pod\nmetadata: { name: p }\nspec:\n  volumes: [ { name: data, emptyDir: {} } ]\n  containers:\n  - { name: c, image: a.wasm, volumeMounts: [ { name: data, mountPath: /run/app/data } ], terminationMessagePath: /run/app/message }\n";
    let err = parse(nested).unwrap_err();
    assert!(err.errors[0].message.contains("/run/app/data"), "{err}");
}

/// The paths of the errors of a pod whose spec has `spec_lines` (which it must have).
fn error_paths(spec_lines: &str) -> Vec<String> {
    parse(&pod_with("", spec_lines, ""))
        .unwrap_err()
        .errors
        .into_iter()
        .map(|e| e.path)
        .collect()
}
