//! The DaemonSet, RuntimeClass and RBAC of `deploy/kubernetes/installer.yaml`: each object is read into
//! its Kubernetes type (k8s-openapi's, v1.33) and written back, and must come back whole (a
//! misspelt or misplaced field is dropped on the way and fails the comparison); and what the
//! objects say fits the installer and the shim.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use serde_json::Value;

const MANIFESTS: &str = include_str!("../../deploy/kubernetes/installer.yaml");

fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value) -> Value {
    let typed: T = serde_path_to_error::deserialize(doc.clone()).unwrap_or_else(|e| panic!("{e}"));
    serde_json::to_value(typed).unwrap()
}

#[test]
fn the_installers_manifests_are_kubernetes_objects_and_fit_the_installer() {
    let docs = wasmpod::read_documents(MANIFESTS.as_bytes()).unwrap();
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "Namespace",
            "RuntimeClass",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "DaemonSet"
        ]
    );
    for doc in &docs {
        let back = match doc["kind"].as_str().unwrap() {
            "Namespace" => round_trip::<Namespace>(doc),
            "RuntimeClass" => round_trip::<RuntimeClass>(doc),
            "ServiceAccount" => round_trip::<ServiceAccount>(doc),
            "ClusterRole" => round_trip::<ClusterRole>(doc),
            "ClusterRoleBinding" => round_trip::<ClusterRoleBinding>(doc),
            _ => round_trip::<DaemonSet>(doc),
        };
        assert_eq!(&back, doc, "a field was dropped");
    }
    let class: RuntimeClass = serde_json::from_value(docs[1].clone()).unwrap();
    assert_eq!(class.handler, "wasmpod", "the installer's handler");
    let set: DaemonSet = serde_json::from_value(docs[5].clone()).unwrap();
    let namespace = set.metadata.namespace.clone();
    let pod = set.spec.unwrap().template.spec.unwrap();
    // Pods of the class go only where the installer has labelled the node (it runs where the
    // DaemonSet's selector says).
    let class_nodes = class.scheduling.unwrap().node_selector.unwrap();
    assert_eq!(
        class_nodes.into_iter().collect::<Vec<_>>(),
        [("wasmpod.dev/installed".to_owned(), "true".to_owned())]
    );
    // What the installer asks of the API server, its service account may do.
    let role: ClusterRole = serde_json::from_value(docs[3].clone()).unwrap();
    let may = |group: &str, resource: &str, verb: &str| {
        role.rules.iter().flatten().any(|r| {
            r.api_groups.iter().flatten().any(|g| g == group)
                && r.resources.iter().flatten().any(|x| x == resource)
                && r.verbs.iter().any(|v| v == verb)
        })
    };
    for (group, resource, verb) in [
        ("", "nodes", "get"),
        ("", "nodes", "patch"),
        ("node.k8s.io", "runtimeclasses", "get"),
        ("node.k8s.io", "runtimeclasses", "create"),
        ("node.k8s.io", "runtimeclasses", "update"),
    ] {
        assert!(may(group, resource, verb), "{verb} {resource}");
    }
    let binding: ClusterRoleBinding = serde_json::from_value(docs[4].clone()).unwrap();
    assert_eq!(binding.role_ref.name, role.metadata.name.clone().unwrap());
    let account = &binding.subjects.as_ref().unwrap()[0];
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some(account.name.as_str())
    );
    assert_eq!(account.namespace, namespace);
    let install = &pod.init_containers.as_ref().unwrap()[0];
    let node_name = install
        .env
        .as_ref()
        .unwrap()
        .iter()
        .find(|e| e.name == "NODE_NAME");
    let field = node_name.and_then(|e| e.value_from.as_ref()?.field_ref.as_ref());
    assert_eq!(field.map(|f| f.field_path.as_str()), Some("spec.nodeName"));
    let command = install.command.clone().unwrap();
    assert_eq!(command[..2], ["/containerd-shim-wasmpod-v1", "install"]);
    let root = command[2].strip_prefix("--host-root=").unwrap();
    let mount = &install.volume_mounts.as_ref().unwrap()[0];
    assert_eq!(mount.mount_path, root);
    let volume = &pod.volumes.as_ref().unwrap()[0];
    assert_eq!(
        (
            volume.name.as_str(),
            volume.host_path.as_ref().unwrap().path.as_str()
        ),
        (mount.name.as_str(), "/")
    );
    assert_eq!(
        pod.host_pid,
        Some(true),
        "the installer finds containerd among the host's processes"
    );
    assert_eq!(
        install.security_context.as_ref().unwrap().privileged,
        Some(true)
    );
    // The installer's own command line accepts what the DaemonSet gives it.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_containerd-shim-wasmpod-v1"))
        .args(&command[1..])
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
