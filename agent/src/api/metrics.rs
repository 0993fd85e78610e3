//! What the node uses, as a cluster shows it without add-ons:
//! - `metrics.k8s.io/v1beta1` (`PodMetrics`, `NodeMetrics`), what metrics-server serves and
//!   `kubectl top` reads: CPU as a rate over the sampler's window, memory as the working set;
//! - the kubelet's own endpoints, through the node proxy (`/api/v1/nodes/{node}/proxy/...`) and
//!   directly on the agent: `/metrics/resource` (Prometheus text, the kubelet's metric names)
//!   and `/stats/summary` (the kubelet's Summary API).
//!
//! A container's CPU and memory are the runtime's own counts (see `wasmpod::ContainerUsage`);
//! the node's are the agent process's (its CPU time and resident memory), which hold every pod
//! and the runtime's overhead beside them.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use http::{HeaderValue, Response, StatusCode, header};
use jiff::Timestamp;
use serde_json::{Value, json};

use super::select::Labels;
use super::{Api, Call, json};
use crate::body::Body;
use crate::metrics::{Window, process_usage};
use crate::object::Object;
use crate::status::ApiError;

pub(crate) const GROUP: &str = "metrics.k8s.io";
pub(crate) const VERSION: &str = "v1beta1";
const API_VERSION: &str = "metrics.k8s.io/v1beta1";

/// `/apis/metrics.k8s.io/v1beta1`.
pub(crate) fn resources() -> Value {
    let resource = |name: &str, kind: &str, namespaced: bool| json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": ["get", "list"]});
    json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": API_VERSION,
        "resources": [resource("nodes", "NodeMetrics", false), resource("pods", "PodMetrics", true)],
    })
}

/// A kubelet endpoint of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `/metrics/resource`.
    Resource,
    /// `/stats/summary`.
    Summary,
}

impl Endpoint {
    /// The endpoint at `path` (below the node proxy or the agent's root).
    pub(crate) fn at(path: &[&str]) -> Option<Endpoint> {
        match path {
            ["metrics", "resource"] => Some(Endpoint::Resource),
            ["stats", "summary"] => Some(Endpoint::Summary),
            _ => None,
        }
    }
}

/// A Go `time.Duration` as `metav1.Duration` prints it (`15s`, `15.002s`, `1m0.5s`).
fn go_duration(d: Duration) -> String {
    let (minutes, rest) = (
        d.as_secs() / 60,
        d - Duration::from_secs(d.as_secs() / 60 * 60),
    );
    let mut secs = format!("{}.{:09}", rest.as_secs(), rest.subsec_nanos());
    while secs.ends_with('0') {
        secs.pop();
    }
    if secs.ends_with('.') {
        secs.pop();
    }
    match minutes {
        0 => format!("{secs}s"),
        m if m < 60 => format!("{m}m{secs}s"),
        m => format!("{}h{}m{secs}s", m / 60, m % 60),
    }
}

/// Memory as a quantity: `Ki` when whole kibibytes, else bytes.
fn bytes_quantity(bytes: u64) -> String {
    if bytes.is_multiple_of(1024) {
        format!("{}Ki", bytes / 1024)
    } else {
        bytes.to_string()
    }
}

fn rfc3339(t: SystemTime) -> String {
    Timestamp::try_from(t)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

impl Api {
    /// `GET /apis/metrics.k8s.io/v1beta1/...`: `rest` is the path after the version.
    pub(super) fn metrics_api(
        &self,
        rest: &[&str],
        call: &Call,
    ) -> Result<Response<Body>, ApiError> {
        let labels = Labels::parse(call.query.get("labelSelector").unwrap_or(""))?;
        match rest {
            [] => Ok(json(StatusCode::OK, &resources())),
            ["pods"] => Ok(self.pod_metrics_list(None, &labels)),
            ["namespaces", ns, "pods"] => {
                self.namespace_exists(ns)?;
                Ok(self.pod_metrics_list(Some(ns), &labels))
            }
            ["namespaces", ns, "pods", name] => {
                let pod = self.store.get("pods", ns, name);
                let metrics = pod.as_deref().and_then(|p| self.pod_metrics(p));
                match metrics {
                    Some(m) => Ok(json(StatusCode::OK, &m)),
                    None => Err(ApiError::not_found("podmetrics.metrics.k8s.io", name)),
                }
            }
            ["nodes"] => {
                let items: Vec<Value> = self
                    .node_metrics()
                    .filter(|_| labels.matches_labels(&self.kubelet.node().labels()))
                    .into_iter()
                    .collect();
                Ok(json(
                    StatusCode::OK,
                    &json!({"kind": "NodeMetricsList", "apiVersion": API_VERSION, "metadata": {}, "items": items}),
                ))
            }
            ["nodes", name] if *name == self.kubelet.node_name() => match self.node_metrics() {
                Some(m) => Ok(json(StatusCode::OK, &m)),
                None => Err(ApiError::not_found("nodemetrics.metrics.k8s.io", name)),
            },
            ["nodes", name] => Err(ApiError::not_found("nodemetrics.metrics.k8s.io", name)),
            _ => Err(ApiError::no_route()),
        }
    }

    fn pod_metrics_list(&self, ns: Option<&str>, labels: &Labels) -> Response<Body> {
        let (_, pods) = self.store.list("pods", ns);
        let items: Vec<Value> = pods
            .iter()
            .filter(|p| labels.matches(p))
            .filter_map(|p| self.pod_metrics(p))
            .collect();
        json(
            StatusCode::OK,
            &json!({"kind": "PodMetricsList", "apiVersion": API_VERSION, "metadata": {}, "items": items}),
        )
    }

    /// A pod's `PodMetrics`, once each of its running containers has a rate.
    fn pod_metrics(&self, pod: &Object) -> Option<Value> {
        let windows = self.metrics.pod(pod.uid())?;
        let mut containers = Vec::with_capacity(windows.len());
        let mut span = Duration::ZERO;
        let mut time = None;
        for name in container_order(pod, &windows) {
            let w = &windows[name];
            let (nanocores, window) = w.rate()?;
            span = span.max(window);
            time = Some(w.last.time);
            containers.push(json!({
                "name": name,
                "usage": {"cpu": format!("{nanocores}n"), "memory": bytes_quantity(w.last.memory)},
            }));
        }
        let time = time?;
        Some(json!({
            "kind": "PodMetrics",
            "apiVersion": API_VERSION,
            "metadata": {
                "name": pod.name(),
                "namespace": pod.namespace(),
                "labels": pod.metadata.labels.clone().unwrap_or_default(),
                "creationTimestamp": time.to_string(),
            },
            "timestamp": time.to_string(),
            "window": go_duration(span),
            "containers": containers,
        }))
    }

    /// The node's `NodeMetrics`, once the process has a rate.
    fn node_metrics(&self) -> Option<Value> {
        let w = self.metrics.node()?;
        let (nanocores, window) = w.rate()?;
        let node = self.kubelet.node();
        Some(json!({
            "kind": "NodeMetrics",
            "apiVersion": API_VERSION,
            "metadata": {
                "name": self.kubelet.node_name(),
                "labels": *node.labels(),
                "creationTimestamp": w.last.time.to_string(),
            },
            "timestamp": w.last.time.to_string(),
            "window": go_duration(window),
            "usage": {"cpu": format!("{nanocores}n"), "memory": bytes_quantity(w.last.memory)},
        }))
    }

    /// The running containers of the node's pods, read now: (pod object, its usage).
    fn running(&self) -> Vec<(std::sync::Arc<Object>, Vec<wasmpod::ContainerUsage>)> {
        let (_, pods) = self.store.list("pods", None);
        pods.into_iter()
            .filter_map(|p| {
                let usage = self.kubelet.handle(p.uid())?.usage();
                Some((p, usage))
            })
            .collect()
    }

    /// `/metrics/resource` or `/stats/summary`, of this node.
    pub(super) fn kubelet_endpoint(&self, endpoint: Endpoint) -> Response<Body> {
        match endpoint {
            Endpoint::Resource => {
                let mut r = Response::new(Body::full(self.resource_metrics().into_bytes()));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                r
            }
            Endpoint::Summary => json(StatusCode::OK, &self.summary()),
        }
    }

    /// The kubelet's `/metrics/resource`, in the Prometheus text format: every sample with the
    /// time it was read (milliseconds).
    fn resource_metrics(&self) -> String {
        let now = Timestamp::now().as_millisecond();
        let process = process_usage();
        let running = self.running();
        let mut out = String::with_capacity(1024 + 512 * running.len());
        let pod_labels = |pod: &Object| {
            format!(
                "namespace=\"{}\",pod=\"{}\"",
                escape(pod.namespace()),
                escape(pod.name())
            )
        };
        let per_container = |value: fn(&wasmpod::ContainerUsage) -> String| {
            running
                .iter()
                .flat_map(|(pod, usage)| {
                    usage.iter().map(move |c| {
                        let labels =
                            format!("container=\"{}\",{}", escape(&c.name), pod_labels(pod));
                        (labels, value(c))
                    })
                })
                .collect::<Vec<_>>()
        };
        let per_pod = |value: fn(&[wasmpod::ContainerUsage]) -> String| {
            running
                .iter()
                .map(|(pod, usage)| (pod_labels(pod), value(usage)))
                .collect::<Vec<_>>()
        };
        let node = |value: Option<String>| {
            value
                .map(|v| (String::new(), v))
                .into_iter()
                .collect::<Vec<_>>()
        };
        let families = [
            (
                "container_cpu_usage_seconds_total",
                "counter",
                "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
                per_container(|c| c.cpu.as_secs_f64().to_string()),
            ),
            (
                "container_memory_working_set_bytes",
                "gauge",
                "[STABLE] Current working set of the container in bytes",
                per_container(|c| c.memory.to_string()),
            ),
            (
                "container_start_time_seconds",
                "gauge",
                "[STABLE] Start time of the container since unix epoch in seconds",
                per_container(|c| seconds(c.started).to_string()),
            ),
            (
                "node_cpu_usage_seconds_total",
                "counter",
                "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
                node(process.map(|(cpu, _)| cpu.as_secs_f64().to_string())),
            ),
            (
                "node_memory_working_set_bytes",
                "gauge",
                "[STABLE] Current working set of the node in bytes",
                node(process.map(|(_, rss)| rss.to_string())),
            ),
            (
                "pod_cpu_usage_seconds_total",
                "counter",
                "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
                per_pod(|u| {
                    u.iter()
                        .map(|c| c.cpu)
                        .sum::<Duration>()
                        .as_secs_f64()
                        .to_string()
                }),
            ),
            (
                "pod_memory_working_set_bytes",
                "gauge",
                "[STABLE] Current working set of the pod in bytes",
                per_pod(|u| u.iter().map(|c| c.memory).sum::<u64>().to_string()),
            ),
            (
                "scrape_error",
                "gauge",
                "[ALPHA] 1 if there was an error while getting container metrics, 0 otherwise",
                node(Some(u8::from(process.is_none()).to_string())),
            ),
        ];
        for (name, kind, help, samples) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in samples {
                let labels = if labels.is_empty() {
                    labels
                } else {
                    format!("{{{labels}}}")
                };
                let _ = writeln!(out, "{name}{labels} {value} {now}");
            }
        }
        out
    }

    /// The kubelet's Summary API (`stats/v1alpha1`).
    fn summary(&self) -> Value {
        let time = Timestamp::now().to_string();
        let node = self.kubelet.node_name();
        let cpu = |cumulative: Duration, rate: Option<u64>| {
            let mut v = json!({
                "time": time,
                "usageCoreNanoSeconds": u64::try_from(cumulative.as_nanos()).unwrap_or(u64::MAX),
            });
            if let Some(rate) = rate {
                v["usageNanoCores"] = json!(rate);
            }
            v
        };
        let memory = |bytes: u64| json!({"time": time, "workingSetBytes": bytes, "usageBytes": bytes, "rssBytes": bytes});
        let pods: Vec<Value> = self
            .running()
            .iter()
            .map(|(pod, usage)| {
                let windows = self.metrics.pod(pod.uid()).unwrap_or_default();
                let rate = |name: &str| windows.get(name).and_then(|w| w.rate()).map(|r| r.0);
                let containers: Vec<Value> = usage
                    .iter()
                    .map(|c| {
                        json!({
                            "name": c.name,
                            "startTime": rfc3339(c.started),
                            "cpu": cpu(c.cpu, rate(&c.name)),
                            "memory": memory(c.memory),
                        })
                    })
                    .collect();
                let rates: Option<u64> = usage.iter().map(|c| rate(&c.name)).sum();
                json!({
                    "podRef": {
                        "name": pod.name(),
                        "namespace": pod.namespace(),
                        "uid": pod.uid(),
                    },
                    "startTime": pod.field("status").and_then(|s| s.get("startTime").cloned()),
                    "containers": containers,
                    "cpu": cpu(usage.iter().map(|c| c.cpu).sum(), rates),
                    "memory": memory(usage.iter().map(|c| c.memory).sum()),
                })
            })
            .collect();
        let window = self.metrics.node();
        let (node_cpu, node_memory) = process_usage().unwrap_or_default();
        json!({
            "node": {
                "nodeName": node,
                "startTime": self.kubelet.started(),
                "cpu": cpu(node_cpu, window.as_ref().and_then(Window::rate).map(|r| r.0)),
                "memory": memory(node_memory),
                "systemContainers": [],
            },
            "pods": pods,
        })
    }
}

/// The pod's containers that have windows, in the pod's order (init containers first).
fn container_order<'a>(pod: &Object, windows: &'a HashMap<String, Window>) -> Vec<&'a String> {
    let mut names: Vec<&String> = windows.keys().collect();
    let spec = pod.pod().spec.unwrap_or_default();
    let position = |name: &str| {
        spec.init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .position(|c| c.name == name)
            .unwrap_or(usize::MAX)
    };
    names.sort_by_key(|n| position(n));
    names
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_go_prints_them() {
        assert_eq!(go_duration(Duration::from_secs(15)), "15s");
        assert_eq!(go_duration(Duration::from_millis(15_002)), "15.002s");
        assert_eq!(go_duration(Duration::from_millis(60_500)), "1m0.5s");
        assert_eq!(go_duration(Duration::from_secs(3_725)), "1h2m5s");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn quantities_and_labels() {
        assert_eq!(bytes_quantity(8 << 20), "8192Ki");
        assert_eq!(bytes_quantity(1000), "1000");
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
