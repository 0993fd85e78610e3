//! The Kubernetes API the agent serves: routing, the request's parts, and answers.
//!
//! A file per concern: [`discovery`] (version, groups, OpenAPI), [`objects`] (get, list, watch,
//! create, update, patch and delete of any stored resource), [`pods`] (what the API server and
//! kubelet add for pods: admission, graceful deletion, updates), [`logs`], [`exec`], [`node`]
//! (the Node object), [`resources`] (each resource's strategy: checks, defaults, columns),
//! [`table`] (kubectl's tables), [`select`] (label and field selectors), [`patch`] (merge and
//! strategic merge patches), [`protobuf`] (the bodies kubectl sends as protobuf).

mod access;
mod attach;
mod discovery;
mod exec;
mod logs;
mod metrics;
mod node;
mod objects;
mod patch;
mod portforward;
mod protobuf;
pub(crate) mod resources;
mod select;
mod serviceaccounts;
pub(crate) mod source;
mod spdy;
mod stream;
pub(crate) mod table;
mod watch;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;

use crate::body::Body;
use crate::bounds::MAX_OBJECT;
use crate::kubelet::Kubelet;
use crate::metrics::Metrics;
use crate::status::ApiError;
use crate::store::Store;
use resources::Resource;

/// The API: the store, the kubelet that runs the store's pods, the token every request needs.
pub(crate) struct Api {
    pub(crate) store: Arc<Store>,
    pub(crate) kubelet: Arc<Kubelet>,
    token: String,
    /// Pods from the API may have `hostPath` volumes.
    pub(crate) allow_host_path: bool,
    /// What the node's containers used, sampled.
    pub(crate) metrics: Arc<Metrics>,
    /// The `exec` and `attach` sessions of each pod.
    sessions: stream::Sessions,
    /// What signs and checks service-account tokens.
    tokens: Arc<crate::tokens::Tokens>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api").finish_non_exhaustive()
    }
}

/// A request's query parameters (the last of each name wins).
#[derive(Debug, Default)]
pub(crate) struct Query(HashMap<String, String>);

impl Query {
    fn parse(query: Option<&str>) -> Query {
        let mut map = HashMap::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            map.insert(decode(k), decode(v));
        }
        Query(map)
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    pub(crate) fn flag(&self, name: &str) -> bool {
        matches!(self.get(name), Some("true" | "1"))
    }

    /// A whole number parameter; a bad one is a 400 naming it.
    pub(crate) fn number(&self, name: &str) -> Result<Option<i64>, ApiError> {
        self.get(name)
            .map(|v| {
                v.parse().map_err(|_| {
                    ApiError::bad_request(format!("{name}: invalid value {v:?}: not an integer"))
                })
            })
            .transpose()
    }
}

/// Repeated parameters (`command=a&command=b` of exec), in order.
pub(crate) fn repeated(query: Option<&str>, name: &str) -> Vec<String> {
    query
        .unwrap_or("")
        .split('&')
        .filter_map(|p| p.split_once('='))
        .filter(|(k, _)| decode(k) == name)
        .map(|(_, v)| decode(v))
        .collect()
}

/// Percent-decoding, `+` as space.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where a request goes.
#[derive(Debug)]
enum Route {
    Version,
    CoreVersions,
    Groups,
    Resources(&'static str),
    OpenApiIndex,
    OpenApi(String),
    /// `metrics.k8s.io/v1beta1`, the path after the version.
    Metrics(Vec<String>),
    /// A kubelet endpoint: through the node proxy of the node named, or on the agent itself.
    Kubelet {
        node: Option<String>,
        endpoint: metrics::Endpoint,
    },
    Collection {
        resource: &'static Resource,
        namespace: Option<String>,
    },
    Item {
        resource: &'static Resource,
        namespace: Option<String>,
        name: String,
        sub: Option<String>,
    },
}

fn route(path: &str) -> Result<Route, ApiError> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    if let Some(endpoint) = metrics::Endpoint::at(&segments) {
        return Ok(Route::Kubelet {
            node: None,
            endpoint,
        });
    }
    let (group, rest) = match segments.as_slice() {
        ["version"] => return Ok(Route::Version),
        ["api"] => return Ok(Route::CoreVersions),
        ["apis"] => return Ok(Route::Groups),
        ["openapi", "v3"] => return Ok(Route::OpenApiIndex),
        ["openapi", "v3", rest @ ..] => return Ok(Route::OpenApi(rest.join("/"))),
        ["apis", metrics::GROUP, metrics::VERSION, rest @ ..] => {
            return Ok(Route::Metrics(
                rest.iter().map(|s| (*s).to_owned()).collect(),
            ));
        }
        ["api", "v1", "nodes", node, "proxy", rest @ ..] => {
            return match metrics::Endpoint::at(rest) {
                Some(endpoint) => Ok(Route::Kubelet {
                    node: Some((*node).to_owned()),
                    endpoint,
                }),
                None => Err(ApiError::no_route()),
            };
        }
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, "v1", rest @ ..] => {
            match discovery::GROUPS[1..].iter().find(|g| *g == group) {
                Some(known) => (*known, rest),
                None => return Err(ApiError::no_route()),
            }
        }
        _ => return Err(ApiError::no_route()),
    };
    let find = |name: &str| resources::find(group, name).ok_or_else(ApiError::no_route);
    let item = |resource, namespace: Option<&str>, name: &str, sub: Option<&str>| Route::Item {
        resource,
        namespace: namespace.map(str::to_owned),
        name: name.to_owned(),
        sub: sub.map(str::to_owned),
    };
    Ok(match rest {
        [] => Route::Resources(group),
        [r] => Route::Collection {
            resource: find(r)?,
            namespace: None,
        },
        // `namespaces/{ns}/{resource}`, or a namespace's subresource (`namespaces/{name}/status`).
        ["namespaces", ns, r] => match resources::find(group, r) {
            Some(resource) if resource.namespaced => Route::Collection {
                resource,
                namespace: Some((*ns).to_owned()),
            },
            _ => item(find("namespaces")?, None, ns, Some(r)),
        },
        [r, name] | [r, name, _] if find(r)?.namespaced => return Err(ApiError::no_route()),
        [r, name] => item(find(r)?, None, name, None),
        [r, name, sub] => item(find(r)?, None, name, Some(sub)),
        ["namespaces", ns, r, name] => item(find(r)?, Some(ns), name, None),
        ["namespaces", ns, r, name, sub] => item(find(r)?, Some(ns), name, Some(sub)),
        _ => return Err(ApiError::no_route()),
    })
}

/// A JSON answer.
pub(crate) fn json(code: StatusCode, value: &impl serde::Serialize) -> Response<Body> {
    let mut r = Response::new(Body::full(serde_json::to_vec(value).unwrap_or_default()));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn error(e: &ApiError) -> Response<Body> {
    json(e.code, &e.to_json())
}

/// What a request asks for beyond its route.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) method: Method,
    pub(crate) query: Query,
    /// The raw query, for repeated parameters.
    pub(crate) raw_query: Option<String>,
    /// The answer should be a `meta.k8s.io/v1 Table`.
    pub(crate) table: bool,
    pub(crate) content_type: String,
}

impl Api {
    pub(crate) fn new(
        store: Arc<Store>,
        kubelet: Arc<Kubelet>,
        token: String,
        allow_host_path: bool,
        metrics: Arc<Metrics>,
        tokens: Arc<crate::tokens::Tokens>,
    ) -> Api {
        Api {
            store,
            kubelet,
            token,
            allow_host_path,
            metrics,
            sessions: Default::default(),
            tokens,
        }
    }

    /// Answers one request. Every failure is a `Status`; nothing a request holds can disturb a
    /// pod that runs.
    pub(crate) async fn handle(self: &Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        let Some(who) = self.authenticate(&req) else {
            return error(&ApiError::unauthorized());
        };
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let answer = self.answer(&who, req).await;
        match answer {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(%method, path, code = e.code.as_u16(), "{}", e.message);
                error(&e)
            }
        }
    }

    async fn answer(
        self: &Arc<Self>,
        who: &access::Identity,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, ApiError> {
        let route = route(req.uri().path())?;
        let accept = req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let call = Call {
            method: req.method().clone(),
            query: Query::parse(req.uri().query()),
            raw_query: req.uri().query().map(str::to_owned),
            table: accept.contains("as=Table"),
            content_type: req
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_owned(),
        };
        Self::authorize(who, req.uri().path(), &route, &call)?;
        let get = call.method == Method::GET;
        match route {
            Route::Version if get => Ok(json(StatusCode::OK, &discovery::version())),
            Route::CoreVersions if get => Ok(json(StatusCode::OK, &discovery::core_versions())),
            Route::Groups if get => Ok(json(StatusCode::OK, &discovery::groups())),
            Route::Resources(group) if get => {
                Ok(json(StatusCode::OK, &discovery::resources(group)))
            }
            Route::OpenApiIndex if get => Ok(json(StatusCode::OK, &discovery::openapi_index())),
            Route::OpenApi(path) if get => discovery::openapi_document(&path)
                .map(|doc| json(StatusCode::OK, &doc))
                .ok_or_else(ApiError::no_route),
            Route::Metrics(rest) if get => {
                let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
                self.metrics_api(&rest, &call)
            }
            Route::Kubelet { node, endpoint } if get => match node {
                Some(node) if node != self.kubelet.node_name() => {
                    Err(ApiError::not_found("nodes", &node))
                }
                _ => Ok(self.kubelet_endpoint(endpoint)),
            },
            Route::Collection {
                resource,
                namespace,
            } => {
                if let Some(ns) = &namespace {
                    self.namespace_exists(ns)?;
                }
                match call.method {
                    Method::GET => self.list_or_watch(resource, namespace.as_deref(), &call),
                    Method::POST => {
                        let ns = namespace.as_deref();
                        let body = read_object(req, &call, resource).await?;
                        self.create(resource, ns, body, &call).await
                    }
                    _ => Err(ApiError::method_not_allowed(format!(
                        "the server does not allow this method on the requested resource ({} {})",
                        call.method, resource.name
                    ))),
                }
            }
            Route::Item {
                resource,
                namespace,
                name,
                sub,
            } => {
                let ns = namespace.as_deref();
                match (sub.as_deref(), &call.method) {
                    (Some("log"), &Method::GET) if resource.is("pods") => {
                        self.logs(ns.unwrap_or_default(), &name, &call).await
                    }
                    (Some("exec"), &Method::GET | &Method::POST) if resource.is("pods") => {
                        self.exec(ns.unwrap_or_default(), &name, &call, req).await
                    }
                    (Some("attach"), &Method::GET | &Method::POST) if resource.is("pods") => {
                        self.attach(ns.unwrap_or_default(), &name, &call, req).await
                    }
                    (Some("token"), &Method::POST) if resource.is("serviceaccounts") => {
                        let body = read_body(req).await?;
                        let request = if call.content_type == "application/vnd.kubernetes.protobuf"
                        {
                            protobuf::decode(&body, "TokenRequest")?
                        } else {
                            parse_json(&body)?
                        };
                        self.token_request(ns.unwrap_or_default(), &name, &request)
                    }
                    (Some("portforward"), &Method::GET | &Method::POST) if resource.is("pods") => {
                        let ns = ns.unwrap_or_default();
                        self.portforward(ns, &name, &call, req).await
                    }
                    (None | Some("status"), &Method::GET) => self.get(resource, ns, &name, &call),
                    (None, &Method::DELETE) => {
                        let body = read_optional_json(req).await?;
                        self.delete(resource, ns, &name, body, &call).await
                    }
                    (None, &Method::PATCH) => {
                        let body = read_body(req).await?;
                        self.patch(resource, ns, &name, &body, &call).await
                    }
                    (None, &Method::PUT) => {
                        let body = read_object(req, &call, resource).await?;
                        self.replace(resource, ns, &name, body).await
                    }
                    _ => Err(ApiError::method_not_allowed(format!(
                        "the server does not allow this method on the requested resource ({} {}{})",
                        call.method,
                        resource.name,
                        sub.map(|s| format!("/{s}")).unwrap_or_default()
                    ))),
                }
            }
            _ => Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            )),
        }
    }

    /// `NotFound` for a namespace that does not exist.
    fn namespace_exists(&self, ns: &str) -> Result<(), ApiError> {
        match self.store.get("namespaces", "", ns) {
            Some(_) => Ok(()),
            None => Err(ApiError::not_found("namespaces", ns)),
        }
    }
}

async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    let limited = http_body_util::Limited::new(req.into_body(), MAX_OBJECT);
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::too_large(format!(
            "the request body is larger than {MAX_OBJECT} bytes"
        ))),
        Err(e) => Err(ApiError::bad_request(format!(
            "cannot read the request body: {e}"
        ))),
    }
}

/// The body as JSON: sent as JSON, YAML (as the API server takes `application/yaml`), or
/// Kubernetes protobuf for the kinds kubectl's generators send that way.
async fn read_object(
    req: Request<Incoming>,
    call: &Call,
    resource: &Resource,
) -> Result<Value, ApiError> {
    let body = read_body(req).await?;
    if call.content_type == "application/vnd.kubernetes.protobuf" {
        return protobuf::decode(&body, resource.kind);
    }
    parse_json(&body)
}

/// A body of one object, sent as JSON or YAML (server-side apply sends YAML, and so may any
/// client), read by the bounded reader every document of wasmpod goes through.
pub(crate) fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    let refused = |e: wasmpod::FieldError| {
        let message = format!("the body is not a valid object: {e}");
        match e.kind {
            wasmpod::FieldErrorKind::TooLarge => ApiError::too_large(message),
            _ => ApiError::bad_request(message),
        }
    };
    let mut docs =
        wasmpod::read_documents(body).map_err(|mut e| refused(e.errors.swap_remove(0)))?;
    if docs.len() != 1 {
        return Err(ApiError::bad_request(format!(
            "the body holds {} documents, not one object",
            docs.len()
        )));
    }
    let object = docs.swap_remove(0);
    if !object.is_object() {
        return Err(ApiError::bad_request(
            "the body is not an object: expected a JSON or YAML mapping",
        ));
    }
    Ok(object)
}

async fn read_optional_json(req: Request<Incoming>) -> Result<Option<Value>, ApiError> {
    let body = read_body(req).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    parse_json(&body).map(Some)
}

#[cfg(test)]
mod tests;
