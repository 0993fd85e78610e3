//! `serviceaccounts/{name}/token`: the TokenRequest API (`kubectl create token`). The token is
//! the agent's own ([`crate::tokens`]): for the audiences asked (the API's when none), for the
//! time asked (at least 10 minutes, at most a year; an hour when not said), bound to a pod when
//! the request names one that exists.

use http::{Response, StatusCode};
use serde_json::{Value, json};

use super::{Api, json as answer};
use crate::body::Body;
use wasmpod::FieldErrorKind;

use crate::status::{ApiError, Cause};
use crate::tokens::{API_AUDIENCE, Claims};

const HOUR: i64 = 3600;
const YEAR: i64 = 365 * 24 * HOUR;

impl Api {
    pub(super) fn token_request(
        &self,
        ns: &str,
        account: &str,
        request: &Value,
    ) -> Result<Response<Body>, ApiError> {
        let account_uid = self
            .store
            .get("serviceaccounts", ns, account)
            .ok_or_else(|| ApiError::not_found("serviceaccounts", account))?
            .uid()
            .to_owned();
        let invalid = |field: &str, message: String| {
            ApiError::invalid(
                "TokenRequest",
                account,
                vec![Cause {
                    kind: FieldErrorKind::Invalid,
                    field: field.into(),
                    message,
                }],
            )
        };
        let spec = request.get("spec").cloned().unwrap_or(json!({}));
        let seconds = match spec.get("expirationSeconds") {
            None | Some(Value::Null) => HOUR,
            Some(v) => v
                .as_i64()
                .ok_or_else(|| invalid("spec.expirationSeconds", "must be an integer".into()))?,
        };
        if seconds < 600 {
            return Err(invalid(
                "spec.expirationSeconds",
                format!(
                    "Invalid value: {seconds}: may not specify a duration less than 10 minutes"
                ),
            ));
        }
        if seconds > YEAR {
            return Err(invalid(
                "spec.expirationSeconds",
                format!("Invalid value: {seconds}: may not specify a duration longer than a year"),
            ));
        }
        let mut audiences: Vec<String> = spec
            .get("audiences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect();
        if audiences.len() > 16 {
            return Err(invalid(
                "spec.audiences",
                "Too many: must have at most 16 items".into(),
            ));
        }
        if audiences.is_empty() {
            audiences.push(API_AUDIENCE.into());
        }
        let pod = match spec.get("boundObjectRef") {
            None | Some(Value::Null) => None,
            Some(r) => {
                let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
                let name = r.get("name").and_then(Value::as_str).unwrap_or("");
                if kind != "Pod" {
                    return Err(invalid(
                        "spec.boundObjectRef.kind",
                        format!("Unsupported value: {kind:?}: wasmpod binds tokens to pods"),
                    ));
                }
                let found = self
                    .store
                    .get("pods", ns, name)
                    .ok_or_else(|| ApiError::not_found("pods", name))?;
                let uid = found.uid().to_owned();
                if let Some(asked) = r.get("uid").and_then(Value::as_str)
                    && !asked.is_empty()
                    && asked != uid
                {
                    return Err(ApiError::conflict(
                        "pods",
                        name,
                        &format!(
                            "the uid in the bound object reference ({asked}) does not match the pod's ({uid})"
                        ),
                    ));
                }
                Some((name.to_owned(), uid))
            }
        };
        let now = jiff::Timestamp::now().as_second();
        let claims = Claims {
            namespace: ns.to_owned(),
            account: account.to_owned(),
            account_uid,
            audiences: audiences.clone(),
            issued: now,
            expires: now.saturating_add(seconds),
            pod,
        };
        let token = self.tokens.issue(&claims);
        let expires = jiff::Timestamp::from_second(claims.expires)
            .map(|t| t.to_string())
            .unwrap_or_default();
        let mut spec = spec;
        spec["audiences"] = json!(audiences);
        spec["expirationSeconds"] = json!(seconds);
        Ok(answer(
            StatusCode::CREATED,
            &json!({
                "kind": "TokenRequest",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": account, "namespace": ns, "creationTimestamp": crate::clock::now()},
                "spec": spec,
                "status": {"token": token, "expirationTimestamp": expires},
            }),
        ))
    }
}
