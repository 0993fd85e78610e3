//! `pods/{name}/log`: a container's log as the kubelet serves it, whole or followed, with
//! `previous`, `tailLines`, `timestamps` and `limitBytes`.

use std::collections::VecDeque;

use bytes::Bytes;
use http::{HeaderValue, Response, header};
use wasmpod::LogOptions;
use wasmpod::k8s_openapi::api::core::v1::{Container, Pod};

use super::{Api, Call};
use crate::body::Body;
use crate::status::ApiError;

/// The most a log answer that is not followed holds; past it the oldest lines are left out.
const MAX_ANSWER: usize = 16 << 20;

fn names<'a>(containers: impl IntoIterator<Item = &'a Container>) -> Vec<String> {
    containers.into_iter().map(|c| c.name.clone()).collect()
}

impl Api {
    /// `pods/{name}/log`: a container's log, whole, from a point, or followed.
    pub(super) async fn logs(
        &self,
        ns: &str,
        name: &str,
        call: &Call,
    ) -> Result<Response<Body>, ApiError> {
        let pod = self
            .store
            .get("pods", ns, name)
            .ok_or_else(|| ApiError::not_found("pods", name))?;
        let uid = pod.uid().to_owned();
        let Pod { spec, status, .. } = pod.pod();
        let spec = spec.unwrap_or_default();
        let containers = names(&spec.containers);
        let container = match call.query.get("container") {
            Some(c) if !c.is_empty() => c.to_owned(),
            _ if containers.len() == 1 => containers[0].clone(),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}] or one of the init containers: [{}]",
                    containers.join(" "),
                    names(spec.init_containers.iter().flatten()).join(" ")
                )));
            }
        };
        let source = match self.kubelet.handle(&uid) {
            Some(handle) => Source::Running(handle),
            None => Source::Ended {
                // Which instance is the last: from the status the pod ended with.
                restarts: status
                    .iter()
                    .flat_map(|s| {
                        s.init_container_statuses
                            .iter()
                            .chain(&s.container_statuses)
                    })
                    .flatten()
                    .find(|c| c.name == container)
                    .map_or(0, |c| c.restart_count),
                ns: ns.to_owned(),
                name: name.to_owned(),
                uid,
            },
        };
        let mut options = LogOptions::default();
        let follow = call.query.flag("follow");
        if follow {
            options = options.follow();
        }
        if call.query.flag("previous") {
            options = options.previous();
        }
        let tail = call.query.number("tailLines")?.map(|n| n.max(0) as usize);
        let limit = call.query.number("limitBytes")?.map(|n| n.max(0) as usize);
        let timestamps = call.query.flag("timestamps");
        let format = move |line: &wasmpod::OutputLine| -> Vec<u8> {
            let mut out = Vec::with_capacity(line.line.len() + 40);
            if timestamps {
                out.extend_from_slice(line.time.as_deref().unwrap_or("").as_bytes());
                out.push(b' ');
            }
            out.extend_from_slice(line.line.as_bytes());
            if !line.partial {
                out.push(b'\n');
            }
            out
        };
        let bad = |e: wasmpod::Error| ApiError::bad_request(e.to_string());
        // What the log holds now: all of it, or its last `tail` lines.
        let mut skip = 0;
        let mut head: VecDeque<Vec<u8>> = VecDeque::new();
        if !follow || tail.is_some() {
            let mut what_is_there = LogOptions::default();
            if options.previous {
                what_is_there = what_is_there.previous();
            }
            let mut now = source.logs(self, &container, what_is_there).map_err(bad)?;
            let mut size = 0;
            while let Some(line) = now.next().await {
                skip += 1;
                let bytes = format(&line);
                size += bytes.len();
                head.push_back(bytes);
                while tail.is_some_and(|t| head.len() > t) || size > MAX_ANSWER {
                    size -= head.pop_front().map_or(0, |b| b.len());
                }
            }
        }
        let mut r = if !follow {
            let mut all: Vec<u8> = head.into_iter().flatten().collect();
            if let Some(limit) = limit {
                all.truncate(limit);
            }
            Response::new(Body::full(all))
        } else {
            let mut rest = source.logs(self, &container, options).map_err(bad)?;
            let (tx, body) = Body::channel();
            let from_start = tail.is_none();
            tokio::spawn(async move {
                let mut budget = limit.unwrap_or(usize::MAX);
                // The line, cut to what `limitBytes` leaves.
                let cut = |bytes: Vec<u8>, budget: &mut usize| {
                    let n = bytes.len().min(*budget);
                    *budget -= n;
                    Bytes::from(bytes).slice(..n)
                };
                for line in head {
                    if tx.send(cut(line, &mut budget)).await.is_err() || budget == 0 {
                        return;
                    }
                }
                let mut seen = 0;
                loop {
                    let line = tokio::select! {
                        l = rest.next() => l,
                        _ = tx.closed() => return,
                    };
                    let Some(line) = line else { return };
                    seen += 1;
                    if !from_start && seen <= skip {
                        continue;
                    }
                    if tx.send(cut(format(&line), &mut budget)).await.is_err() || budget == 0 {
                        return;
                    }
                }
            });
            Response::new(body)
        };
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        Ok(r)
    }
}

/// Where a pod's logs are read from: its running pod, or, for a pod that ended before the agent
/// restarted, its files (the instance numbers from its last status).
enum Source {
    Running(wasmpod::PodHandle),
    Ended {
        /// The container's restart count in the pod's last status.
        restarts: i32,
        ns: String,
        name: String,
        uid: String,
    },
}

impl Source {
    fn logs(
        &self,
        api: &Api,
        container: &str,
        options: LogOptions,
    ) -> Result<wasmpod::Logs, wasmpod::Error> {
        match self {
            Source::Running(handle) => handle.logs(container, options),
            Source::Ended {
                restarts,
                ns,
                name,
                uid,
            } => {
                let restarts = *restarts;
                let instance = if options.previous {
                    restarts - 1
                } else {
                    restarts
                };
                if instance < 0 {
                    return Err(wasmpod::Error::NoLogs(format!(
                        "previous terminated container \"{container}\" in pod \"{name}\" not found"
                    )));
                }
                api.kubelet
                    .node()
                    .past_logs(ns, name, uid, container, instance)
            }
        }
    }
}
