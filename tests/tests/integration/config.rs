//! Configuration: ConfigMaps and Secrets given alongside the pod (as volumes, `configMapKeyRef`,
//! `secretKeyRef`, `envFrom`), the downward API and `$(VAR)` expansion.

use std::time::Duration;

use wasmpod::Reason;
use wasmpod_tests::{TestNode, log_lines, read, terminated};

const LIMIT: Duration = Duration::from_secs(20);

/// A multi-document pod file: the ConfigMap and Secret become read-only files and variables.
#[tokio::test]
async fn config_maps_and_secrets() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: configured }
spec:
  restartPolicy: Never
  volumes:
  - { name: conf, configMap: { name: app, items: [ { key: greeting, path: nested/greeting.txt } ] } }
  - { name: creds, secret: { secretName: creds } }
  containers:
  - name: c
    image: "{p2}"
    args: [cat, /conf/nested/greeting.txt, ls, /creds, cat, /creds/password, env, GREETING, env, USER, env, CFG_level, env, CFG_greeting, write, /conf/nested/new, x]
    volumeMounts: [ { name: conf, mountPath: /conf }, { name: creds, mountPath: /creds } ]
    envFrom: [ { prefix: CFG_, configMapRef: { name: app } } ]
    env:
    - { name: GREETING, valueFrom: { configMapKeyRef: { name: app, key: greeting } } }
    - { name: USER, valueFrom: { secretKeyRef: { name: creds, key: user } } }
    - { name: CFG_greeting, value: overridden }
---
apiVersion: v1
kind: ConfigMap
metadata: { name: app }
data: { greeting: hello, level: debug }
---
apiVersion: v1
kind: Secret
metadata: { name: creds }
data: { password: czNjcmV0 }
stringData: { user: admin }
"#,
        )
        .await;
    let status = tokio::time::timeout(LIMIT, pod.wait()).await.unwrap();
    let log = read(&pod.log_file("c", 0));
    let out = log_lines(&pod, "c");
    assert!(out.len() >= 8, "{log}");
    assert_eq!(
        out[..7],
        [
            "hello",
            "ls /creds: password user",
            "s3cret",
            "GREETING=hello",
            "USER=admin",
            "CFG_level=debug",
            "CFG_greeting=overridden",
        ],
        "{log}"
    );
    assert!(
        out[7].starts_with("agnhost: write /conf/nested/new"),
        "read-only: {log}"
    );
    assert_ne!(terminated(&status, "c").exit_code, 0);
}

/// The `kube-api-access-*` volume every pod exported from a cluster carries: a projected volume
/// of the service account's token (from its token Secret), the `kube-root-ca.crt` ConfigMap
/// and the namespace, taken without what the pod is not given (a `FailedMount` warning says
/// so); and a `downwardAPI` volume of the pod's labels and annotations.
#[tokio::test]
async fn projected_and_downward_api_volumes() {
    let node = TestNode::new();
    let pod = r#"
apiVersion: v1
kind: Pod
metadata:
  name: exported
  labels: { app: web, tier: "front end" }
  annotations: { note: 'say "hi"' }
spec:
  restartPolicy: Never
  serviceAccountName: builder
  volumes:
  - name: kube-api-access-x7k2p
    projected:
      defaultMode: 420
      sources:
      - serviceAccountToken: { expirationSeconds: 3607, path: token }
      - configMap: { name: kube-root-ca.crt, items: [ { key: ca.crt, path: ca.crt } ] }
      - downwardAPI: { items: [ { path: namespace, fieldRef: { apiVersion: v1, fieldPath: metadata.namespace } } ] }
  - name: podinfo
    downwardAPI:
      defaultMode: 0644
      items:
      - { path: labels, fieldRef: { fieldPath: metadata.labels } }
      - { path: annotations, fieldRef: { fieldPath: metadata.annotations } }
      - { path: uid, fieldRef: { fieldPath: metadata.uid } }
  containers:
  - name: c
    image: "{p2}"
    args: [cat, /var/run/secrets/kubernetes.io/serviceaccount/token, cat, /var/run/secrets/kubernetes.io/serviceaccount/namespace, cat, /var/run/secrets/kubernetes.io/serviceaccount/ca.crt, cat, /etc/podinfo/labels, cat, /etc/podinfo/annotations, cat, /etc/podinfo/uid]
    volumeMounts:
    - { name: kube-api-access-x7k2p, mountPath: /var/run/secrets/kubernetes.io/serviceaccount, readOnly: true }
    - { name: podinfo, mountPath: /etc/podinfo }
---
apiVersion: v1
kind: ConfigMap
metadata: { name: kube-root-ca.crt }
data: { ca.crt: CERTIFICATE }
"#;
    let token = r#"---
apiVersion: v1
kind: Secret
metadata: { name: builder-token, annotations: { kubernetes.io/service-account.name: builder } }
type: kubernetes.io/service-account-token
stringData: { token: eyJhbGciOi.test }
"#;
    // Without the token: the injected volume is mounted without it, with a warning (the pod
    // runs, and its `cat` of the token fails)...
    let (timeline, status) = node.run(pod, LIMIT).await;
    assert_ne!(terminated(&status, "c").exit_code, 0);
    let warnings = timeline.pod_positions(Reason::FailedMount);
    let [warning] = warnings.as_slice() else {
        panic!("one FailedMount: {timeline}");
    };
    let message = &timeline.0[*warning].message;
    assert!(
        message.contains("\"kube-api-access-x7k2p\"")
            && message.contains("token (no token for service account \"builder\"")
            && !message.contains("ca.crt"),
        "{message}"
    );
    // ... but a volume of that shape the pod names itself must have its token.
    let err = node.invalid(&pod.replace("kube-api-access-x7k2p", "api-access"));
    assert!(
        err.contains("spec.volumes[0].projected.sources[0].serviceAccountToken: not found: no token for service account \"builder\""),
        "{err}"
    );
    let pod = node.start(&format!("{pod}{token}")).await;
    let status = tokio::time::timeout(LIMIT, pod.wait()).await.unwrap();
    assert_eq!(terminated(&status, "c").exit_code, 0);
    let log = read(&pod.log_file("c", 0));
    let out = log_lines(&pod, "c");
    let uid = pod.uid().to_owned();
    assert_eq!(
        out,
        [
            "eyJhbGciOi.test",
            "default",
            "CERTIFICATE",
            "app=\"web\"",
            "tier=\"front end\"",
            "note=\"say \\\"hi\\\"\"",
            uid.as_str(),
        ],
        "{log}"
    );
}

/// References to missing ConfigMaps, Secrets or keys are errors naming the field, unless
/// `optional`.
#[test]
fn missing_references_are_errors_unless_optional() {
    let node = TestNode::new();
    let err = node.invalid(
        r#"
apiVersion: v1
kind: Pod
metadata: { name: missing }
spec:
  volumes:
  - { name: a, configMap: { name: nowhere } }
  - { name: b, secret: { secretName: nowhere, optional: true } }
  containers:
  - name: c
    image: "{p1}"
    env:
    - { name: A, valueFrom: { configMapKeyRef: { name: app, key: nokey } } }
    - { name: B, valueFrom: { secretKeyRef: { name: gone, key: k, optional: true } } }
    - { name: C, valueFrom: { fieldRef: { fieldPath: status.phase } } }
---
apiVersion: v1
kind: ConfigMap
metadata: { name: app }
data: { key: v }
"#,
    );
    for expected in [
        r#"spec.volumes[0].configMap.name: not found: no configmap "nowhere""#,
        r#"spec.containers[0].env[0].valueFrom.configMapKeyRef.key: not found: configmap "app" has no key "nokey""#,
        r#"spec.containers[0].env[2].valueFrom.fieldRef.fieldPath: unsupported value "status.phase""#,
    ] {
        assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
    }
    assert_eq!(
        err.lines().count(),
        3,
        "optional references are fine:\n{err}"
    );
}

/// The downward API and `$(VAR)` expansion in env values and args, as the kubelet does them.
#[tokio::test]
async fn downward_api_and_expansion() {
    let node = TestNode::with(|o| o.node_name("edge-1"));
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata:
  name: downward
  namespace: shop
  uid: 0b1c2d3e-0000-4000-8000-000000000001
  labels: { app: web }
  annotations: { team: blue }
spec:
  restartPolicy: Never
  serviceAccountName: shop-web
  containers:
  - name: c
    image: "{p2}"
    args: [print, "$(POD) on $(NODE) at $(IP) as $(SA)", print, "$$(POD) $(UNDEFINED)", env, URL, env, META]
    env:
    - { name: POD, valueFrom: { fieldRef: { fieldPath: metadata.name } } }
    - { name: SA, valueFrom: { fieldRef: { fieldPath: spec.serviceAccountName } } }
    - { name: NODE, valueFrom: { fieldRef: { fieldPath: spec.nodeName } } }
    - { name: IP, valueFrom: { fieldRef: { fieldPath: status.podIP } } }
    - { name: NS, valueFrom: { fieldRef: { fieldPath: metadata.namespace } } }
    - { name: UID, valueFrom: { fieldRef: { fieldPath: metadata.uid } } }
    - { name: APP, valueFrom: { fieldRef: { fieldPath: "metadata.labels['app']" } } }
    - { name: TEAM, valueFrom: { fieldRef: { fieldPath: "metadata.annotations['team']" } } }
    - { name: URL, value: "http://$(IP):8080/$(NS)/$(APP)" }
    - { name: META, value: "$(UID) $(TEAM) $(LATER)" }
    - { name: LATER, value: defined-after }
"#,
        )
        .await;
    let status = tokio::time::timeout(LIMIT, pod.wait()).await.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let ip = status.pod_ip.unwrap();
    let out = log_lines(&pod, "c");
    assert_eq!(
        out,
        [
            format!("downward on edge-1 at {ip} as shop-web"),
            "$(POD) $(UNDEFINED)".into(),
            format!("URL=http://{ip}:8080/shop/web"),
            "META=0b1c2d3e-0000-4000-8000-000000000001 blue $(LATER)".into(),
        ]
    );
}
