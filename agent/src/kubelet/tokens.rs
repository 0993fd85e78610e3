//! The service-account tokens the kubelet gives a pod: one per projection, issued by the agent,
//! rewritten before they expire.

use super::*;
use crate::tokens::Claims;

impl Kubelet {
    /// The tokens the pod's `serviceAccountToken` projections show, as Secrets of type
    /// `kubernetes.io/service-account-token` for its service account, one per projection's
    /// audience and lifetime (annotated with both, as `wasmpod::TOKEN_AUDIENCE` and
    /// `TOKEN_EXPIRATION` say): issued by the agent, bound to the pod (they die with it), each
    /// for exactly its projection's audience (the API's when none) and `expirationSeconds`
    /// (an hour when not said), as the kubelet asks one TokenRequest per projection. Only the
    /// `kube-api-access` default (the API's audience, 3607 s) is extended to a year, as the API
    /// server extends it; the others are rewritten before they expire ([`Self::refresh_tokens`]).
    /// None for a pod without such a projection.
    pub(super) fn account_tokens(&self, pod: &Value) -> Vec<Value> {
        let ns = str_at(pod, "/metadata/namespace");
        let account = account_of(pod.get("spec"));
        let mut seen = Vec::new();
        let mut secrets = Vec::new();
        for p in token_projections(pod) {
            let key = (p.audience.clone(), p.expiration);
            if seen.contains(&key) || seen.len() >= 16 {
                continue;
            }
            let token = self.issue_token(pod, &p, jiff::Timestamp::now().as_second());
            let mut annotations = serde_json::Map::new();
            annotations.insert("kubernetes.io/service-account.name".into(), json!(account));
            annotations.insert(wasmpod::TOKEN_AUDIENCE.into(), json!(p.audience));
            annotations.insert(
                wasmpod::TOKEN_EXPIRATION.into(),
                json!(p.expiration.to_string()),
            );
            secrets.push(json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": format!("{account}-token-wasmpod-{}", seen.len()),
                    "namespace": ns,
                    "annotations": annotations,
                },
                "type": "kubernetes.io/service-account-token",
                "stringData": {"token": token},
            }));
            seen.push(key);
        }
        secrets
    }

    /// A token for projection `p` of `pod`, issued at `now`. A pod whose service account is gone
    /// (deleted while it ran; admission refuses a pod without one) still gets a token, with no
    /// account uid: the API refuses it, and the pod is not kept from resuming for want of it.
    fn issue_token(&self, pod: &Value, p: &Projection, now: i64) -> String {
        let ns = str_at(pod, "/metadata/namespace");
        let account = account_of(pod.get("spec"));
        let account_uid = self
            .store
            .get("serviceaccounts", ns, account)
            .map(|a| a.uid().to_owned())
            .unwrap_or_default();
        let audience = if p.audience.is_empty() {
            crate::tokens::API_AUDIENCE
        } else {
            &p.audience
        };
        let uid = str_at(pod, "/metadata/uid");
        self.tokens.issue(&Claims {
            namespace: ns.to_owned(),
            account: account.to_owned(),
            account_uid,
            audiences: vec![audience.to_owned()],
            issued: now,
            expires: now.saturating_add(p.lifetime()),
            pod: (!uid.is_empty())
                .then(|| (str_at(pod, "/metadata/name").to_owned(), uid.to_owned())),
        })
    }

    /// Rewrites the pod's projected tokens that are not extended when 80 % of their lifetime
    /// has passed (at most a day), as the kubelet's token manager does, until the pod is gone.
    pub(super) async fn refresh_tokens(self: Arc<Self>, handle: PodHandle, pod: Value) {
        let due: Vec<Projection> = token_projections(&pod)
            .into_iter()
            .filter(|p| !p.extended())
            .collect();
        let Some(every) = due.iter().map(Projection::refresh_after).min() else {
            return;
        };
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = handle.deleted() => return,
            }
            let now = jiff::Timestamp::now().as_second();
            for p in &due {
                let token = self.issue_token(&pod, p, now);
                if let Err(e) = handle.rewrite_file(&p.volume, &p.path, token.as_bytes()) {
                    tracing::warn!(pod = %handle.name(), "cannot rewrite a projected token: {e}");
                }
            }
        }
    }
}

/// The service account a pod of this `spec` runs as.
pub(crate) fn account_of(spec: Option<&Value>) -> &str {
    ["serviceAccountName", "serviceAccount"]
        .iter()
        .find_map(|k| spec?.get(*k)?.as_str().filter(|a| !a.is_empty()))
        .unwrap_or("default")
}

/// A `serviceAccountToken` source of a projected volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Projection {
    volume: String,
    path: String,
    /// Empty: the API's.
    audience: String,
    expiration: i64,
}

/// The `expirationSeconds` of the token every pod of a cluster has (`kube-api-access-*`),
/// which the API server extends to a year.
const KUBE_API_ACCESS: i64 = 3607;
const YEAR: i64 = 365 * 24 * 3600;

impl Projection {
    /// The API's own token of `kube-api-access`, extended as the API server extends it.
    pub(super) fn extended(&self) -> bool {
        (self.audience.is_empty() || self.audience == crate::tokens::API_AUDIENCE)
            && self.expiration == KUBE_API_ACCESS
    }

    /// How long its token is valid.
    fn lifetime(&self) -> i64 {
        if self.extended() {
            YEAR
        } else {
            self.expiration
        }
    }

    /// When to rewrite it: after 80 % of its lifetime, and at least daily.
    fn refresh_after(&self) -> Duration {
        let seconds = (self.expiration.max(600) as u64) * 4 / 5;
        Duration::from_secs(seconds.min(24 * 3600))
    }
}

/// The pod's `serviceAccountToken` projections.
pub(super) fn token_projections(pod: &Value) -> Vec<Projection> {
    let mut out = Vec::new();
    for volume in pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = volume.get("name").and_then(Value::as_str).unwrap_or("");
        for token in volume
            .pointer("/projected/sources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|source| source.get("serviceAccountToken"))
        {
            out.push(Projection {
                volume: name.to_owned(),
                path: token
                    .get("path")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                audience: token
                    .get("audience")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                expiration: token
                    .get("expirationSeconds")
                    .and_then(Value::as_i64)
                    .unwrap_or(3600),
            });
        }
    }
    out
}
