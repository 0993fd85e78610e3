//! Container environment: values, the downward API (`valueFrom.fieldRef`), and Kubernetes'
//! `$(VAR)` expansion in values, `command` and `args`.

use super::config::{ConfigStore, Kind};
use super::errors::{FieldError, FieldPath};
use k8s_openapi::api::core::v1 as k8s;

use std::collections::{BTreeMap, HashMap};

/// Where one environment variable's value comes from once the pod runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EnvValue {
    /// A literal `value` (expanded against the variables before it), or data resolved at
    /// validation (`configMapKeyRef`, `secretKeyRef`, `envFrom`, not expanded).
    Literal { value: String, expand: bool },
    /// A field of the pod, known when the container starts.
    Field(FieldRef),
}

/// The pod fields the downward API offers to `env[].valueFrom.fieldRef.fieldPath`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FieldRef {
    Name,
    Namespace,
    Uid,
    Label(String),
    Annotation(String),
    NodeName,
    PodIp,
    /// The node's address (`status.hostIP`).
    HostIp,
    ServiceAccountName,
}

impl FieldRef {
    /// Parses a `fieldPath`; the error names what is supported.
    pub(crate) fn parse(path: &str) -> Result<FieldRef, String> {
        let key = |prefix: &str| {
            path.strip_prefix(prefix)?
                .strip_suffix("']")
                .map(str::to_owned)
        };
        Ok(match path {
            "metadata.name" => FieldRef::Name,
            "metadata.namespace" => FieldRef::Namespace,
            "metadata.uid" => FieldRef::Uid,
            "spec.nodeName" => FieldRef::NodeName,
            "spec.serviceAccountName" => FieldRef::ServiceAccountName,
            "status.podIP" | "status.podIPs" => FieldRef::PodIp,
            "status.hostIP" | "status.hostIPs" => FieldRef::HostIp,
            _ => {
                if let Some(k) = key("metadata.labels['") {
                    FieldRef::Label(k)
                } else if let Some(k) = key("metadata.annotations['") {
                    FieldRef::Annotation(k)
                } else {
                    return Err(format!(
                        "unsupported value {path:?}: wasmpod supports metadata.name, \
                         metadata.namespace, metadata.uid, metadata.labels['KEY'], \
                         metadata.annotations['KEY'], spec.nodeName, spec.serviceAccountName, \
                         status.podIP, status.podIPs, status.hostIP, status.hostIPs"
                    ));
                }
            }
        })
    }
}

/// What the downward API reads, for one running pod.
pub(crate) struct PodInfo<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub uid: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub annotations: &'a BTreeMap<String, String>,
    pub node_name: &'a str,
    pub service_account: &'a str,
    pub pod_ip: String,
    pub host_ip: String,
}

impl PodInfo<'_> {
    fn field(&self, f: &FieldRef) -> String {
        match f {
            FieldRef::Name => self.name.into(),
            FieldRef::Namespace => self.namespace.into(),
            FieldRef::Uid => self.uid.into(),
            FieldRef::Label(k) => self.labels.get(k).cloned().unwrap_or_default(),
            FieldRef::Annotation(k) => self.annotations.get(k).cloned().unwrap_or_default(),
            FieldRef::NodeName => self.node_name.into(),
            FieldRef::ServiceAccountName => self.service_account.into(),
            FieldRef::PodIp => self.pod_ip.clone(),
            FieldRef::HostIp => self.host_ip.clone(),
        }
    }
}

/// The container's environment and argv as the kubelet makes them: variables in order, each
/// literal expanded against those before it, then `$(VAR)` in argv against them all.
pub(crate) fn resolve(
    env: &[(String, EnvValue)],
    argv: &[String],
    pod: &PodInfo<'_>,
) -> (Vec<(String, String)>, Vec<String>) {
    let mut values: HashMap<&str, String> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for (name, value) in env {
        let value = match value {
            EnvValue::Literal {
                value,
                expand: true,
            } => expand_vars(value, |v| values.get(v).cloned()),
            EnvValue::Literal { value, .. } => value.clone(),
            EnvValue::Field(f) => pod.field(f),
        };
        if values.insert(name, value).is_none() {
            order.push(name);
        }
    }
    let argv = argv
        .iter()
        .map(|a| expand_vars(a, |v| values.get(v).cloned()))
        .collect();
    let env = order
        .into_iter()
        .map(|n| (n.to_owned(), values[n].clone()))
        .collect();
    (env, argv)
}

/// The longest value of one variable or argument after `$(VAR)` expansion (Linux's own limit on
/// one argument or variable, `MAX_ARG_STRLEN`).
pub(crate) const MAX_EXPANDED: u64 = 128 * 1024;
/// The most bytes of environment and arguments of one container, expanded.
pub(crate) const MAX_EXPANDED_TOTAL: u64 = 1024 * 1024;

/// The length `expand_vars` gives `input`, with `len` the length of each defined variable;
/// saturating, so that it is cheap and exact however large the expansion would be.
pub(crate) fn expanded_len(input: &str, len: impl Fn(&str) -> Option<u64>) -> u64 {
    let mut total = 0u64;
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        total = total.saturating_add(i as u64);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            total = total.saturating_add(1);
            rest = tail;
        } else if let Some(body) = after.strip_prefix('(')
            && let Some(end) = body.find(')')
        {
            let name = &body[..end];
            total = total.saturating_add(len(name).unwrap_or(name.len() as u64 + 3));
            rest = &body[end + 1..];
        } else {
            total = total.saturating_add(1);
            rest = after;
        }
    }
    total.saturating_add(rest.len() as u64)
}

/// Kubernetes' expansion: `$(NAME)` becomes the variable's value when it is defined and stays
/// as written otherwise; `$$` is a literal `$`.
pub(crate) fn expand_vars(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('(')
            && let Some(end) = body.find(')')
        {
            let name = &body[..end];
            match lookup(name) {
                Some(v) => out.push_str(&v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
        if out.len() as u64 > MAX_EXPANDED {
            // Validation bounds every expansion; this holds should a value come from elsewhere.
            break;
        }
    }
    out.push_str(rest);
    let mut end = out.len().min(MAX_EXPANDED as usize);
    while !out.is_char_boundary(end) {
        end -= 1;
    }
    out.truncate(end);
    out
}

/// `envFrom` then `env`, with configMap and secret references resolved.
pub(super) fn convert_env(
    path: &FieldPath,
    c: &k8s::Container,
    store: &ConfigStore,
    errors: &mut Vec<FieldError>,
) -> Vec<(String, EnvValue)> {
    let mut env = Vec::new();
    for (i, from) in c.env_from.iter().flatten().enumerate() {
        let at = path.child("envFrom").index(i);
        let (kind, name, optional) = match (&from.config_map_ref, &from.secret_ref) {
            (Some(r), None) => (Kind::ConfigMap, &r.name, r.optional),
            (None, Some(r)) => (Kind::Secret, &r.name, r.optional),
            _ => {
                errors.push(FieldError::required(
                    at,
                    "must specify one of configMapRef or secretRef",
                ));
                continue;
            }
        };
        let Some(data) = store.get(kind, name) else {
            if optional != Some(true) {
                errors.push(FieldError::not_found(
                    at,
                    format!("not found: no {} {name:?}", kind.name()),
                ));
            }
            continue;
        };
        let prefix = from.prefix.as_deref().unwrap_or_default();
        for (key, value) in data {
            // Kubernetes skips keys that are not valid variable names.
            let name = format!("{prefix}{key}");
            if name.contains('=') || name.chars().next().is_none_or(|c| c.is_ascii_digit()) {
                continue;
            }
            env.push((
                name,
                EnvValue::Literal {
                    value: String::from_utf8_lossy(value).into_owned(),
                    expand: false,
                },
            ));
        }
    }
    for (i, var) in c.env.iter().flatten().enumerate() {
        let at = path.child("env").index(i);
        if var.name.is_empty() || var.name.contains('=') {
            errors.push(FieldError::invalid(
                at.child("name"),
                format!("invalid value {:?}", var.name),
            ));
        }
        let value = match (&var.value, &var.value_from) {
            (Some(_), Some(_)) => {
                errors.push(FieldError::invalid(
                    at,
                    "may not have both value and valueFrom",
                ));
                continue;
            }
            (value, None) => EnvValue::Literal {
                value: value.clone().unwrap_or_default(),
                expand: true,
            },
            (None, Some(from)) => {
                let keyed =
                    |kind: Kind, name: &str, key: &str, optional: Option<bool>, field: &str| {
                        match store.get(kind, name).map(|d| d.get(key)) {
                            Some(Some(v)) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
                            _ if optional == Some(true) => Ok(None),
                            Some(None) => Err(FieldError::not_found(
                                at.child("valueFrom").child(field).child("key"),
                                format!("not found: {} {name:?} has no key {key:?}", kind.name()),
                            )),
                            None => Err(FieldError::not_found(
                                at.child("valueFrom").child(field).child("name"),
                                format!("not found: no {} {name:?}", kind.name()),
                            )),
                        }
                    };
                let found = if let Some(f) = &from.field_ref {
                    match FieldRef::parse(&f.field_path) {
                        Ok(f) => Ok(Some(EnvValue::Field(f))),
                        Err(why) => Err(FieldError::invalid(
                            at.child("valueFrom").child("fieldRef").child("fieldPath"),
                            why,
                        )),
                    }
                } else if let Some(r) = &from.config_map_key_ref {
                    keyed(
                        Kind::ConfigMap,
                        &r.name,
                        &r.key,
                        r.optional,
                        "configMapKeyRef",
                    )
                    .map(|v| {
                        v.map(|value| EnvValue::Literal {
                            value,
                            expand: false,
                        })
                    })
                } else if let Some(r) = &from.secret_key_ref {
                    keyed(Kind::Secret, &r.name, &r.key, r.optional, "secretKeyRef").map(|v| {
                        v.map(|value| EnvValue::Literal {
                            value,
                            expand: false,
                        })
                    })
                } else {
                    Err(FieldError::required(
                        at.child("valueFrom"),
                        "must specify fieldRef, configMapKeyRef or secretKeyRef",
                    ))
                };
                match found {
                    Ok(Some(v)) => v,
                    Ok(None) => continue,
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                }
            }
        };
        env.push((var.name.clone(), value));
    }
    env
}

/// Bounds what `$(VAR)` expansion can make of the environment and argv at start (each value, and
/// all of them together), computed from lengths only: a few lines of YAML can otherwise expand
/// exponentially.
pub(super) fn check_expansion(
    path: &FieldPath,
    env: &[(String, EnvValue)],
    argv: &[String],
    field_len: &dyn Fn(&FieldRef) -> u64,
    errors: &mut Vec<FieldError>,
) {
    let mut lengths: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    let mut total = 0u64;
    let over = |what: FieldPath, len: u64, total: &mut u64, errors: &mut Vec<FieldError>| {
        *total = total.saturating_add(len);
        if len > MAX_EXPANDED {
            errors.push(FieldError::too_large(
                what,
                format!("expands to more than {MAX_EXPANDED} bytes"),
            ));
            true
        } else {
            false
        }
    };
    for (name, value) in env {
        let len = match value {
            EnvValue::Literal {
                value,
                expand: true,
            } => expanded_len(value, |v| lengths.get(v).copied()),
            EnvValue::Literal { value, .. } => value.len() as u64,
            EnvValue::Field(f) => field_len(f),
        };
        if over(path.child("env").key(name), len, &mut total, errors) {
            return;
        }
        lengths.insert(name, len);
    }
    for (i, arg) in argv.iter().enumerate() {
        let len = expanded_len(arg, |v| lengths.get(v).copied());
        if over(path.child("args").index(i), len, &mut total, errors) {
            return;
        }
    }
    if total > MAX_EXPANDED_TOTAL {
        errors.push(FieldError::too_large(
            path.child("env"),
            format!("the environment and arguments expand to more than {MAX_EXPANDED_TOTAL} bytes"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(name: &str) -> Option<String> {
        (name == "A").then(|| "x".to_owned())
    }

    #[test]
    fn expansion_follows_kubernetes() {
        assert_eq!(expand_vars("$(A)-$(A)", lookup), "x-x");
        assert_eq!(expand_vars("$(B) stays", lookup), "$(B) stays");
        assert_eq!(expand_vars("$$(A) escapes", lookup), "$(A) escapes");
        assert_eq!(expand_vars("cost $5 $(A", lookup), "cost $5 $(A");
        assert_eq!(expand_vars("end$", lookup), "end$");
    }

    #[test]
    fn later_variables_see_earlier_ones_and_argv_sees_all() {
        let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
        let none = BTreeMap::new();
        let pod = PodInfo {
            name: "p",
            namespace: "ns",
            uid: "u",
            labels: &labels,
            annotations: &none,
            node_name: "n",
            service_account: "default",
            pod_ip: "10.88.0.2".into(),
            host_ip: "127.0.0.1".into(),
        };
        let lit = |v: &str| EnvValue::Literal {
            value: v.into(),
            expand: true,
        };
        let env = vec![
            ("APP".into(), EnvValue::Field(FieldRef::Label("app".into()))),
            ("URL".into(), lit("http://$(IP):80/$(APP)")),
            ("IP".into(), EnvValue::Field(FieldRef::PodIp)),
        ];
        let (env, argv) = resolve(&env, &["$(URL)".into(), "$(IP)".into()], &pod);
        assert_eq!(env[1], ("URL".into(), "http://$(IP):80/web".into()));
        assert_eq!(argv, ["http://$(IP):80/web", "10.88.0.2"]);
    }

    #[test]
    fn expanded_length_matches_the_expansion_and_saturates() {
        let len = |n: &str| lookup(n).map(|v| v.len() as u64);
        for input in [
            "$(A)-$(A)",
            "$(B) stays",
            "$$(A) escapes",
            "cost $5 $(A",
            "end$",
            "",
        ] {
            assert_eq!(
                expanded_len(input, len),
                expand_vars(input, lookup).len() as u64
            );
        }
        assert_eq!(expanded_len("$(X)$(X)", |_| Some(u64::MAX)), u64::MAX);
    }

    #[test]
    fn field_paths() {
        assert_eq!(
            FieldRef::parse("metadata.labels['a.b/c']"),
            Ok(FieldRef::Label("a.b/c".into()))
        );
        assert_eq!(FieldRef::parse("status.hostIPs"), Ok(FieldRef::HostIp));
        assert!(FieldRef::parse("status.podIPs[0]").is_err());
    }
}
