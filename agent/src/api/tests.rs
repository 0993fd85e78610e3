//! Tests of `api`.

use super::*;

#[test]
fn paths_route_to_resources() {
    let r = route("/api/v1/namespaces/default/pods/hello/log").unwrap();
    assert!(
        matches!(r, Route::Item { resource, namespace: Some(ns), name, sub: Some(sub) }
            if resource.name == "pods" && ns == "default" && name == "hello" && sub == "log")
    );
    let r = route("/api/v1/pods").unwrap();
    assert!(
        matches!(r, Route::Collection { resource, namespace: None } if resource.name == "pods")
    );
    let r = route("/api/v1/namespaces/kube-system").unwrap();
    assert!(
        matches!(r, Route::Item { resource, name, .. } if resource.name == "namespaces" && name == "kube-system")
    );
    let r = route("/api/v1/namespaces/default/status").unwrap();
    assert!(
        matches!(r, Route::Item { resource, name, sub: Some(sub), .. }
            if resource.name == "namespaces" && name == "default" && sub == "status")
    );
    let r = route("/api/v1/nodes/edge-1/status").unwrap();
    assert!(
        matches!(r, Route::Item { resource, sub: Some(sub), .. } if resource.name == "nodes" && sub == "status")
    );
    assert!(route("/api/v1/pods/hello/log").is_err());
    let r = route("/apis/scheduling.k8s.io/v1/priorityclasses/high").unwrap();
    assert!(matches!(r, Route::Item { resource, .. } if resource.name == "priorityclasses"));
    assert!(route("/api/v1/pods/hello").is_err());
    assert!(route("/api/v1/widgets").is_err());
    assert!(route("/apis/apps/v1/deployments").is_err());
    assert!(route("/../../etc/passwd").is_err());
    let r = route("/api/v1/nodes/edge-1/proxy/stats/summary").unwrap();
    assert!(
        matches!(r, Route::Kubelet { node: Some(n), endpoint: metrics::Endpoint::Summary } if n == "edge-1")
    );
    let r = route("/metrics/resource").unwrap();
    assert!(matches!(
        r,
        Route::Kubelet {
            node: None,
            endpoint: metrics::Endpoint::Resource
        }
    ));
    assert!(route("/api/v1/nodes/edge-1/proxy/etc/passwd").is_err());
    assert!(route("/apis/metrics.k8s.io/v1/pods").is_err());
}

#[test]
fn queries_are_decoded() {
    let q = Query::parse(Some(
        "fieldSelector=metadata.name%3Dsingle&limit=500&watch=1&x=a+b&bad=%zz",
    ));
    assert_eq!(q.get("fieldSelector"), Some("metadata.name=single"));
    assert!(q.flag("watch"));
    assert_eq!(q.get("x"), Some("a b"));
    assert_eq!(q.get("bad"), Some("%zz"));
    assert_eq!(q.number("limit").unwrap(), Some(500));
    assert!(q.number("x").is_err());
    assert_eq!(
        repeated(Some("command=sh&command=-c&container=c"), "command"),
        ["sh", "-c"]
    );
}
