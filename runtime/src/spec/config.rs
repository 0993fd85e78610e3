//! ConfigMaps and Secrets given alongside a pod (in its YAML file or `--config` files): the data
//! `configMap`/`secret` volumes project as files and `configMapKeyRef`, `secretKeyRef` and
//! `envFrom` read.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as k8s;
use serde_json::Value;

use super::{FieldError, check_subdomain};

/// Which kind of object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    ConfigMap,
    Secret,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmap",
            Kind::Secret => "secret",
        }
    }
}

/// The ConfigMaps and Secrets known to a pod, by name.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConfigStore {
    objects: BTreeMap<(&'static str, String), BTreeMap<String, Vec<u8>>>,
    /// Secrets of type `kubernetes.io/service-account-token` by what each is for: the service
    /// account (its `kubernetes.io/service-account.name` annotation) and, when the Secret says,
    /// the one audience and lifetime of a projection ([`TOKEN_AUDIENCE`], [`TOKEN_EXPIRATION`];
    /// the node agent's tokens say both) — and the Secret's name.
    tokens: BTreeMap<TokenFor, String>,
}

/// The annotation of a service-account token Secret naming the one audience of its token.
pub const TOKEN_AUDIENCE: &str = "wasmpod.dev/token-audience";
/// The annotation of a service-account token Secret naming its token's `expirationSeconds`.
pub const TOKEN_EXPIRATION: &str = "wasmpod.dev/token-expiration-seconds";

/// What a token Secret is for: a service account, and the audience and lifetime of a projection
/// (`None`: any).
type TokenFor = (String, Option<(String, i64)>);

impl ConfigStore {
    /// The data of the object, if it was given.
    pub(crate) fn get(&self, kind: Kind, name: &str) -> Option<&BTreeMap<String, Vec<u8>>> {
        self.objects.get(&(kind.name(), name.to_owned()))
    }

    /// The `token` of the service account token Secret for service account `account` and a
    /// projection's `audience` (empty: the API's) and `expiration`: the Secret made for that
    /// projection, or else one made for any.
    pub(crate) fn token(&self, account: &str, audience: &str, expiration: i64) -> Option<&[u8]> {
        let secret = self
            .tokens
            .get(&(account.to_owned(), Some((audience.to_owned(), expiration))))
            .or_else(|| self.tokens.get(&(account.to_owned(), None)))?;
        self.get(Kind::Secret, secret)?
            .get("token")
            .map(Vec::as_slice)
    }

    /// Adds a `v1` ConfigMap or Secret document; `at` names it in errors.
    pub(crate) fn add(&mut self, doc: Value, at: &str, errors: &mut Vec<FieldError>) {
        let kind = match doc.get("kind").and_then(Value::as_str) {
            Some("ConfigMap") => Kind::ConfigMap,
            Some("Secret") => Kind::Secret,
            _ => unreachable!("add is called for ConfigMap and Secret documents"),
        };
        let mut account = None;
        let (name, data) = match kind {
            Kind::ConfigMap => match serde_path_to_error::deserialize::<_, k8s::ConfigMap>(doc) {
                Ok(cm) => {
                    let mut data: BTreeMap<String, Vec<u8>> = cm
                        .data
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| (k, v.into_bytes()))
                        .collect();
                    data.extend(cm.binary_data.into_iter().flatten().map(|(k, v)| (k, v.0)));
                    (cm.metadata.name, data)
                }
                Err(e) => {
                    errors.push(FieldError::invalid(
                        format!("{at}: {}", e.path()),
                        e.into_inner().to_string(),
                    ));
                    return;
                }
            },
            Kind::Secret => match serde_path_to_error::deserialize::<_, k8s::Secret>(doc) {
                Ok(secret) => {
                    let mut data: BTreeMap<String, Vec<u8>> = secret
                        .data
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| (k, v.0))
                        .collect();
                    if secret.type_.as_deref() == Some("kubernetes.io/service-account-token") {
                        let annotation =
                            |key: &str| secret.metadata.annotations.as_ref()?.get(key).cloned();
                        let projection = annotation(TOKEN_AUDIENCE)
                            .zip(annotation(TOKEN_EXPIRATION).and_then(|e| e.parse::<i64>().ok()));
                        account = annotation("kubernetes.io/service-account.name")
                            .map(|account| (account, projection));
                    }
                    data.extend(
                        secret
                            .string_data
                            .into_iter()
                            .flatten()
                            .map(|(k, v)| (k, v.into_bytes())),
                    );
                    (secret.metadata.name, data)
                }
                Err(e) => {
                    errors.push(FieldError::invalid(
                        format!("{at}: {}", e.path()),
                        e.into_inner().to_string(),
                    ));
                    return;
                }
            },
        };
        let Some(name) = name.filter(|n| check_subdomain(n).is_ok()) else {
            errors.push(FieldError::required(
                format!("{at}: metadata.name"),
                "required value: a DNS-1123 subdomain",
            ));
            return;
        };
        for key in data.keys() {
            if !valid_key(key) {
                errors.push(FieldError::invalid(
                    format!("{at}: data[{key:?}]"),
                    "invalid key: must be letters, digits, '-', '_' or '.'",
                ));
            }
        }
        if let Some(account) = account {
            self.tokens.insert(account, name.clone());
        }
        if self
            .objects
            .insert((kind.name(), name.clone()), data)
            .is_some()
        {
            errors.push(FieldError::duplicate(
                format!("{at}: metadata.name"),
                format!("duplicate {} {name:?}", kind.name()),
            ));
        }
    }
}

/// A ConfigMap or Secret key: what Kubernetes accepts (it becomes a file name).
fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}
