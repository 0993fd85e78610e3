//! Service-account tokens, as the API server issues them through the TokenRequest API: JWTs
//! whose subject is `system:serviceaccount:NAMESPACE:NAME`, with the service account's uid (a
//! token dies with its account: one made again under the same name has another uid),
//! audiences, an expiry, and optionally the pod they are bound to (a bound token dies with its
//! pod). The agent signs them
//! with HMAC-SHA256 under a key of its own (`agent/service-account.key`, 32 random bytes, private
//! to the user) and is their only verifier.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use serde::{Deserialize, Serialize};

use crate::Error;

/// The issuer, and the audience of the API itself (the API server's default for both).
pub(crate) const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
const KEY_FILE: &str = "service-account.key";
/// The longest token accepted for checking: past it a bearer token is not one of ours.
const MAX_TOKEN: usize = 8 * 1024;

/// What a token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claims {
    pub(crate) namespace: String,
    pub(crate) account: String,
    /// The service account's uid when the token was issued.
    pub(crate) account_uid: String,
    pub(crate) audiences: Vec<String>,
    /// Seconds since the epoch.
    pub(crate) issued: i64,
    pub(crate) expires: i64,
    /// The pod it is bound to: name and uid.
    pub(crate) pod: Option<(String, String)>,
}

#[derive(Serialize, Deserialize)]
struct Payload {
    iss: String,
    sub: String,
    aud: Vec<String>,
    iat: i64,
    nbf: i64,
    exp: i64,
    jti: String,
    #[serde(rename = "kubernetes.io")]
    kubernetes: Kubernetes,
}

#[derive(Serialize, Deserialize)]
struct Kubernetes {
    namespace: String,
    serviceaccount: Named,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod: Option<Named>,
}

#[derive(Serialize, Deserialize)]
struct Named {
    name: String,
    #[serde(default)]
    uid: String,
}

/// The agent's signing key.
pub(crate) struct Tokens {
    key: hmac::Key,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens").finish_non_exhaustive()
    }
}

impl Tokens {
    /// The key under `dir`, made the first time.
    pub(crate) fn load_or_make(dir: &Path) -> Result<Tokens, Error> {
        let path = dir.join(KEY_FILE);
        let key = match std::fs::read(&path) {
            Ok(k) if k.len() == 32 => k,
            _ => {
                let mut k = [0u8; 32];
                ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut k).map_err(
                    |_| Error::Credentials {
                        path: path.clone(),
                        message: "no random bytes for the service-account key".into(),
                    },
                )?;
                crate::credentials::write_private(&path, &k)?;
                k.to_vec()
            }
        };
        Ok(Tokens {
            key: hmac::Key::new(hmac::HMAC_SHA256, &key),
        })
    }

    /// A signed token saying `claims`.
    pub(crate) fn issue(&self, claims: &Claims) -> String {
        let payload = Payload {
            iss: API_AUDIENCE.into(),
            sub: format!(
                "system:serviceaccount:{}:{}",
                claims.namespace, claims.account
            ),
            aud: claims.audiences.clone(),
            iat: claims.issued,
            nbf: claims.issued,
            exp: claims.expires,
            jti: uuid::Uuid::new_v4().to_string(),
            kubernetes: Kubernetes {
                namespace: claims.namespace.clone(),
                serviceaccount: Named {
                    name: claims.account.clone(),
                    uid: claims.account_uid.clone(),
                },
                pod: claims.pod.clone().map(|(name, uid)| Named { name, uid }),
            },
        };
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&payload).unwrap_or_default());
        let signed = format!("{header}.{body}");
        let tag = hmac::sign(&self.key, signed.as_bytes());
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// What `token` says, if the agent signed it, it is current at `now`, and `audience` is
    /// one of its audiences.
    pub(crate) fn verify(&self, token: &str, audience: &str, now: i64) -> Option<Claims> {
        if token.len() > MAX_TOKEN {
            return None;
        }
        let (signed, tag) = token.rsplit_once('.')?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        hmac::verify(&self.key, signed.as_bytes(), &tag).ok()?;
        let (_, body) = signed.split_once('.')?;
        let payload: Payload = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(body).ok()?).ok()?;
        let fresh = payload.nbf <= now.saturating_add(60) && now < payload.exp;
        let meant = payload.iss == API_AUDIENCE && payload.aud.iter().any(|a| a == audience);
        let subject = format!(
            "system:serviceaccount:{}:{}",
            payload.kubernetes.namespace, payload.kubernetes.serviceaccount.name
        );
        (fresh && meant && payload.sub == subject).then(|| Claims {
            namespace: payload.kubernetes.namespace,
            account: payload.kubernetes.serviceaccount.name,
            account_uid: payload.kubernetes.serviceaccount.uid,
            audiences: payload.aud,
            issued: payload.iat,
            expires: payload.exp,
            pod: payload.kubernetes.pod.map(|p| (p.name, p.uid)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> Claims {
        Claims {
            namespace: "tools".into(),
            account: "default".into(),
            account_uid: "sa-1".into(),
            audiences: vec![API_AUDIENCE.into()],
            issued: 1_000,
            expires: 5_000,
            pod: Some(("shell".into(), "u-1".into())),
        }
    }

    #[test]
    fn tokens_verify_only_as_issued_and_while_current() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = Tokens::load_or_make(dir.path()).unwrap();
        let token = tokens.issue(&claims());
        assert_eq!(tokens.verify(&token, API_AUDIENCE, 2_000), Some(claims()));
        // Expired, not yet valid, another audience.
        assert_eq!(tokens.verify(&token, API_AUDIENCE, 5_000), None);
        assert_eq!(tokens.verify(&token, API_AUDIENCE, 900), None);
        assert_eq!(tokens.verify(&token, "vault", 2_000), None);
        // A payload changed under the same signature.
        let (head, rest) = token.split_once('.').unwrap();
        let (_, tag) = rest.rsplit_once('.').unwrap();
        let mut forged = claims();
        forged.namespace = "kube-system".into();
        let other = tokens.issue(&forged);
        let (_, other_rest) = other.split_once('.').unwrap();
        let (other_body, _) = other_rest.rsplit_once('.').unwrap();
        let spliced = format!("{head}.{other_body}.{tag}");
        assert_eq!(tokens.verify(&spliced, API_AUDIENCE, 2_000), None);
        // Another agent's key, and the same key read back.
        let elsewhere = Tokens::load_or_make(tempfile::tempdir().unwrap().path()).unwrap();
        assert_eq!(elsewhere.verify(&token, API_AUDIENCE, 2_000), None);
        let again = Tokens::load_or_make(dir.path()).unwrap();
        assert!(again.verify(&token, API_AUDIENCE, 2_000).is_some());
        assert_eq!(tokens.verify("not.a.token", API_AUDIENCE, 2_000), None);
        assert_eq!(
            tokens.verify(&"x".repeat(MAX_TOKEN + 1), API_AUDIENCE, 2_000),
            None
        );
    }
}
