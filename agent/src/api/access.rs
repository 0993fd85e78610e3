//! Who a request comes from and what they may do.
//!
//! Two kinds of bearer token are taken: the agent's own (the kubeconfig's: an administrator of
//! the node, as `cluster-admin` is of a cluster), and service-account tokens the agent issued
//! (a pod's projected token, or `kubectl create token`). A service account may read — `get`,
//! `list`, `watch` — what its namespace holds but Secrets, and the discovery documents: the
//! `view` role in its namespace, the node's fixed policy in place of RBAC. Anything else is
//! `403 Forbidden` in the API server's words. A token is taken only for the API's own audience;
//! it is refused once its service account is deleted (or made again: the token names the
//! account's uid), and a token bound to a pod once that pod is gone.

use http::{Method, Request, header};
use hyper::body::Incoming;

use super::{Api, Call, Route};
use crate::status::ApiError;
use crate::tokens::{API_AUDIENCE, Claims};

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Identity {
    /// The holder of the agent's token.
    Admin,
    /// A service account, by a token the agent issued.
    Account(Claims),
}

impl Api {
    /// Who `req` comes from, if its bearer token is one the agent takes.
    pub(crate) fn authenticate(&self, req: &Request<Incoming>) -> Option<Identity> {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))?;
        // Constant time in the token's content.
        let want = self.token.as_bytes();
        if given.len() == want.len()
            && given.iter().zip(want).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
        {
            return Some(Identity::Admin);
        }
        let given = std::str::from_utf8(given).ok()?;
        let now = jiff::Timestamp::now().as_second();
        let claims = self.tokens.verify(given, API_AUDIENCE, now)?;
        // A deleted service account's tokens die with it, and stay dead when an account of the
        // same name is made again (another uid).
        let account = self
            .store
            .get("serviceaccounts", &claims.namespace, &claims.account)?;
        if account.uid() != claims.account_uid {
            return None;
        }
        if let Some((name, uid)) = &claims.pod {
            let pod = self.store.get("pods", &claims.namespace, name)?;
            if pod.uid() != uid {
                return None;
            }
        }
        Some(Identity::Account(claims))
    }

    /// Whether `who` may make the request for `path`, routed to `route`.
    pub(super) fn authorize(
        who: &Identity,
        path: &str,
        route: &Route,
        call: &Call,
    ) -> Result<(), ApiError> {
        let Identity::Account(claims) = who else {
            return Ok(());
        };
        let read = call.method == Method::GET;
        let (resource, namespace, name, sub) = match route {
            Route::Version
            | Route::CoreVersions
            | Route::Groups
            | Route::Resources(_)
            | Route::OpenApiIndex
            | Route::OpenApi(_)
                if read =>
            {
                return Ok(());
            }
            // The metrics group's discovery document, not its figures.
            Route::Metrics(rest) if read && rest.is_empty() => return Ok(()),
            Route::Collection {
                resource,
                namespace,
            } => (Some(*resource), namespace.as_deref(), None, None),
            Route::Item {
                resource,
                namespace,
                name,
                sub,
            } => (
                Some(*resource),
                namespace.as_deref(),
                Some(name.as_str()),
                sub.as_deref(),
            ),
            _ => (None, None, None, None),
        };
        let allowed = read
            && resource.is_some_and(|r| r.namespaced && !r.is("secrets"))
            && namespace == Some(claims.namespace.as_str())
            && matches!(sub, None | Some("status" | "log"));
        if allowed {
            return Ok(());
        }
        let verb = match (&call.method, name, sub) {
            (&Method::GET, None, _) if call.query.flag("watch") => "watch",
            (&Method::GET, None, _) => "list",
            (&Method::GET, Some(_), _) => "get",
            (&Method::POST, _, _) => "create",
            (&Method::PUT, _, _) => "update",
            (&Method::PATCH, _, _) => "patch",
            (&Method::DELETE, _, _) => "delete",
            _ => "access",
        };
        let user = format!(
            "system:serviceaccount:{}:{}",
            claims.namespace, claims.account
        );
        let Some(resource) = resource else {
            let verb = call.method.as_str().to_lowercase();
            return Err(ApiError::forbidden(
                "",
                "",
                format!("forbidden: User {user:?} cannot {verb} path {path:?}"),
            ));
        };
        let what = match sub {
            Some(sub) => format!("{}/{sub}", resource.name),
            None => resource.name.to_owned(),
        };
        let group = resource.group;
        let scope = match namespace {
            Some(ns) => format!(" in the namespace {ns:?}"),
            None => " at the cluster scope".to_owned(),
        };
        let message = format!(
            "{what} is forbidden: User {user:?} cannot {verb} resource {what:?} in API group \
             {group:?}{scope}"
        );
        Err(ApiError::forbidden(
            resource.name,
            name.unwrap_or(""),
            message,
        ))
    }
}
