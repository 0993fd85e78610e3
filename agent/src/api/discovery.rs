//! Discovery: `/version`, the API groups and their resources, and the OpenAPI v3 documents
//! kubectl reads before it creates or patches (it checks that the server validates fields).

use serde_json::{Value, json};

use super::resources::{ALL, Resource};

/// The Kubernetes version the agent serves the API of: kubectl's dispatcher picks its client by
/// the minor.
pub(crate) const MAJOR: &str = "1";
pub(crate) const MINOR: &str = "33";
pub(crate) const GIT_VERSION: &str = concat!("v1.33.0-wasmpod.", env!("CARGO_PKG_VERSION"));

pub(crate) fn version() -> Value {
    json!({
        "major": MAJOR,
        "minor": MINOR,
        "gitVersion": GIT_VERSION,
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "rust",
        "compiler": "rustc",
        "platform": format!("linux/{}", std::env::consts::ARCH),
    })
}

/// `/api`.
pub(crate) fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [],
    })
}

/// `/apis`.
pub(crate) fn groups() -> Value {
    let groups: Vec<Value> = GROUPS[1..]
        .iter()
        .map(|name| {
            let gv = json!({"groupVersion": format!("{name}/v1"), "version": "v1"});
            json!({"name": name, "versions": [gv], "preferredVersion": gv})
        })
        .chain(std::iter::once({
            let gv = json!({
                "groupVersion": format!("{}/{}", super::metrics::GROUP, super::metrics::VERSION),
                "version": super::metrics::VERSION,
            });
            json!({"name": super::metrics::GROUP, "versions": [gv], "preferredVersion": gv})
        }))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// The API groups served, the core group (`""`) first; each at version `v1`.
pub(crate) const GROUPS: &[&str] = &["", "scheduling.k8s.io", "node.k8s.io"];

/// `/api/v1` or `/apis/<group>/v1`.
pub(crate) fn resources(group: &str) -> Value {
    let mut list = Vec::new();
    for r in ALL.iter().filter(|r| r.group == group) {
        list.push(json!({
            "name": r.name,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs,
            "shortNames": r.short_names,
            "categories": if r.name == "pods" { json!(["all"]) } else { json!([]) },
        }));
        for (sub, verbs) in r.subresources {
            list.push(json!({
                "name": format!("{}/{sub}", r.name),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": match *sub {
                    "exec" => "PodExecOptions",
                    "attach" => "PodAttachOptions",
                    "portforward" => "PodPortForwardOptions",
                    "token" => "TokenRequest",
                    "proxy" => "NodeProxyOptions",
                    _ => r.kind,
                },
                "verbs": verbs,
            }));
        }
    }
    let gv = if group.is_empty() {
        "v1".to_owned()
    } else {
        format!("{group}/v1")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list})
}

/// The OpenAPI v3 paths of a group: `api/v1`, `apis/scheduling.k8s.io/v1`.
fn openapi_path(group: &str) -> String {
    if group.is_empty() {
        "api/v1".into()
    } else {
        format!("apis/{group}/v1")
    }
}

/// `/openapi/v3`.
pub(crate) fn openapi_index() -> Value {
    let mut paths = serde_json::Map::new();
    for group in GROUPS.iter().copied() {
        let path = openapi_path(group);
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", hash())}),
        );
    }
    json!({ "paths": paths })
}

/// Changes with the agent's version, so clients re-read the documents after an upgrade.
fn hash() -> String {
    GIT_VERSION.replace(['.', '-'], "")
}

/// `/openapi/v3/api/v1` and `/openapi/v3/apis/<group>/v1`: a PATCH operation per kind that
/// takes `fieldValidation`, which is what kubectl looks for; `None` for other paths.
pub(crate) fn openapi_document(path: &str) -> Option<Value> {
    let group = GROUPS.iter().copied().find(|g| openapi_path(g) == path)?;
    let mut paths = serde_json::Map::new();
    for r in ALL.iter().filter(|r| r.group == group) {
        paths.insert(item_path(r), json!({ "patch": patch_operation(r) }));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

fn item_path(r: &Resource) -> String {
    let base = format!("/{}", openapi_path(r.group));
    if r.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.name)
    } else {
        format!("{base}/{}/{{name}}", r.name)
    }
}

fn patch_operation(r: &Resource) -> Value {
    let query = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string"}});
    json!({
        "operationId": format!("patch{}", r.kind),
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": {"group": r.group, "version": "v1", "kind": r.kind},
        "parameters": [query("dryRun"), query("fieldManager"), query("fieldValidation"), query("force")],
        "responses": {"200": {"description": "OK"}},
    })
}
