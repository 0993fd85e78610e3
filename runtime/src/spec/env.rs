//! Container environment: values, the downward API (`valueFrom.fieldRef`), and Kubernetes'
//! `$(VAR)` expansion in values, `command` and `args`.

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
            "status.podIP" | "status.podIPs" => FieldRef::PodIp,
            _ => {
                if let Some(k) = key("metadata.labels['") {
                    FieldRef::Label(k)
                } else if let Some(k) = key("metadata.annotations['") {
                    FieldRef::Annotation(k)
                } else {
                    return Err(format!(
                        "unsupported value {path:?}: wasmpod supports metadata.name, \
                         metadata.namespace, metadata.uid, metadata.labels['KEY'], \
                         metadata.annotations['KEY'], spec.nodeName, status.podIP, status.podIPs"
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
    pub pod_ip: String,
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
            FieldRef::PodIp => self.pod_ip.clone(),
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
    }
    out.push_str(rest);
    out
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
            pod_ip: "10.88.0.2".into(),
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
    fn field_paths() {
        assert_eq!(
            FieldRef::parse("metadata.labels['a.b/c']"),
            Ok(FieldRef::Label("a.b/c".into()))
        );
        assert!(FieldRef::parse("status.hostIP").is_err());
    }
}
