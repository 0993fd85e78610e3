//! `projected` volumes: their sources' files together, and the `kube-api-access-*` volume the
//! API server injects, told apart by its shape.

use k8s_openapi::api::core::v1 as k8s;

use super::{Keys, add_file, check_mode, downward_api, projected};
use crate::spec::config::{ConfigStore, Kind};
use crate::spec::errors::{FieldError, FieldPath};
use crate::spec::model::FileData;

/// Whether the volume `name` is the `kube-api-access-*` volume the API server's ServiceAccount
/// admission injects into a pod: exactly its token (3607 s, the API's audience), the
/// `kube-root-ca.crt` ConfigMap's `ca.crt`, and the namespace.
pub(super) fn injected_api_access(name: &str, volume: &k8s::ProjectedVolumeSource) -> bool {
    let suffix = name.strip_prefix("kube-api-access-").unwrap_or_default();
    let [token, ca, namespace] = volume.sources.as_deref().unwrap_or_default() else {
        return false;
    };
    let token = token.service_account_token.as_ref().is_some_and(|t| {
        t.path == "token" && t.audience.is_none() && t.expiration_seconds == Some(3607)
    });
    let ca = ca.config_map.as_ref().is_some_and(|c| {
        c.name == "kube-root-ca.crt"
            && matches!(c.items.as_deref(), Some([item]) if item.key == "ca.crt" && item.path == "ca.crt")
    });
    let namespace = namespace.downward_api.as_ref().is_some_and(|d| {
        matches!(d.items.as_deref(), Some([item]) if item.path == "namespace"
            && item.field_ref.as_ref().is_some_and(|f| f.field_path == "metadata.namespace"))
    });
    !suffix.is_empty() && token && ca && namespace
}

/// The files of a `projected` volume: its sources' files together. A service account token is
/// the `token` of the Secret of type `kubernetes.io/service-account-token` for the pod's
/// service account (the node agent, `wasmpod serve`, gives every pod one it issued; `wasmpod run`
/// issues none). For the API server's injected volume (`injected`), a token or CA the pod was
/// not given is left out and named there rather than refused.
pub(super) fn projected_volume(
    at: &FieldPath,
    volume: &k8s::ProjectedVolumeSource,
    account: &str,
    store: &ConfigStore,
    mut injected: Option<&mut Vec<String>>,
    errors: &mut Vec<FieldError>,
) -> Vec<(String, FileData)> {
    check_mode(&at.child("defaultMode"), volume.default_mode, errors);
    let mut files = Vec::new();
    for (i, source) in volume.sources.iter().flatten().enumerate() {
        let sat = at.child("sources").index(i);
        let kinds = [
            source.config_map.is_some(),
            source.secret.is_some(),
            source.downward_api.is_some(),
            source.service_account_token.is_some(),
            source.cluster_trust_bundle.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            errors.push(FieldError::invalid(
                sat,
                "must specify exactly one of configMap, secret, downwardAPI, \
                 serviceAccountToken and clusterTrustBundle",
            ));
            continue;
        }
        if let Some(cm) = &source.config_map
            && let Some(left_out) = injected.as_deref_mut()
            && store.get(Kind::ConfigMap, &cm.name).is_none()
        {
            left_out.push(format!("ca.crt (no ConfigMap {:?} was given)", cm.name));
        } else if let Some(cm) = &source.config_map {
            projected(
                &sat.child("configMap"),
                Keys {
                    kind: Kind::ConfigMap,
                    name: &cm.name,
                    items: cm.items.as_deref(),
                    optional: cm.optional,
                },
                store,
                &mut files,
                errors,
            );
        } else if let Some(secret) = &source.secret {
            projected(
                &sat.child("secret"),
                Keys {
                    kind: Kind::Secret,
                    name: &secret.name,
                    items: secret.items.as_deref(),
                    optional: secret.optional,
                },
                store,
                &mut files,
                errors,
            );
        } else if let Some(d) = &source.downward_api {
            downward_api(
                &sat.child("downwardAPI"),
                d.items.as_deref().unwrap_or_default(),
                &mut files,
                errors,
            );
        } else if let Some(token) = &source.service_account_token {
            let tat = sat.child("serviceAccountToken");
            if let Some(s) = token.expiration_seconds
                && !(600..=u32::MAX as i64).contains(&s)
            {
                errors.push(FieldError::invalid(
                    tat.child("expirationSeconds"),
                    format!("Invalid value: {s}: may not specify a duration less than 10 minutes"),
                ));
            }
            let expiration = token.expiration_seconds.unwrap_or(3600);
            let audience = token.audience.as_deref().unwrap_or("");
            match store.token(account, audience, expiration) {
                Some(data) => add_file(
                    &mut files,
                    &token.path,
                    FileData::Bytes(data.to_vec()),
                    &tat.child("path"),
                    errors,
                ),
                None if let Some(left_out) = injected.as_deref_mut() => left_out.push(format!(
                    "token (no token for service account {account:?}: wasmpod run issues none)"
                )),
                None => errors.push(FieldError::not_found(
                    tat,
                    format!(
                        "not found: no token for service account {account:?}: wasmpod run \
                         issues no tokens (the node agent, wasmpod serve, does); give a Secret \
                         of type kubernetes.io/service-account-token annotated \
                         kubernetes.io/service-account.name: {account}, or leave the token \
                         volume out"
                    ),
                )),
            }
        } else {
            errors.push(FieldError::not_supported(
                sat.child("clusterTrustBundle"),
                "not supported by wasmpod: the node has no ClusterTrustBundles; project the \
                 certificates from a ConfigMap",
            ));
        }
    }
    files
}
