//! The resources the agent serves, as discovery describes them.

/// One API resource.
#[derive(Debug)]
pub(crate) struct Resource {
    /// The plural name in paths (`pods`).
    pub(crate) name: &'static str,
    pub(crate) singular: &'static str,
    pub(crate) kind: &'static str,
    /// `""` for the core group.
    pub(crate) group: &'static str,
    pub(crate) namespaced: bool,
    pub(crate) short_names: &'static [&'static str],
    pub(crate) verbs: &'static [&'static str],
    /// Subresources (`log`, `exec`, `status`) with their verbs.
    pub(crate) subresources: &'static [(&'static str, &'static [&'static str])],
}

impl Resource {
    /// `v1` or `group/v1`.
    pub(crate) fn api_version(&self) -> &'static str {
        match self.group {
            "" => "v1",
            "scheduling.k8s.io" => "scheduling.k8s.io/v1",
            "node.k8s.io" => "node.k8s.io/v1",
            _ => unreachable!("no other group is served"),
        }
    }

    /// Whether this is the resource named `name`.
    pub(crate) fn is(&self, name: &str) -> bool {
        self.name == name
    }
}

const RW: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

pub(crate) static PODS: Resource = Resource {
    name: "pods",
    singular: "pod",
    kind: "Pod",
    group: "",
    namespaced: true,
    short_names: &["po"],
    verbs: RW,
    subresources: &[
        ("attach", &["create", "get"]),
        ("exec", &["create", "get"]),
        ("log", &["get"]),
        ("portforward", &["create", "get"]),
        ("status", &["get"]),
    ],
};

pub(crate) static CONFIG_MAPS: Resource = Resource {
    name: "configmaps",
    singular: "configmap",
    kind: "ConfigMap",
    group: "",
    namespaced: true,
    short_names: &["cm"],
    verbs: RW,
    subresources: &[],
};

pub(crate) static SECRETS: Resource = Resource {
    name: "secrets",
    singular: "secret",
    kind: "Secret",
    group: "",
    namespaced: true,
    short_names: &[],
    verbs: RW,
    subresources: &[],
};

pub(crate) static EVENTS: Resource = Resource {
    name: "events",
    singular: "event",
    kind: "Event",
    group: "",
    namespaced: true,
    short_names: &["ev"],
    verbs: &["get", "list", "watch"],
    subresources: &[],
};

pub(crate) static SERVICE_ACCOUNTS: Resource = Resource {
    name: "serviceaccounts",
    singular: "serviceaccount",
    kind: "ServiceAccount",
    group: "",
    namespaced: true,
    short_names: &["sa"],
    verbs: RW,
    subresources: &[("token", &["create"])],
};

pub(crate) static NAMESPACES: Resource = Resource {
    name: "namespaces",
    singular: "namespace",
    kind: "Namespace",
    group: "",
    namespaced: false,
    short_names: &["ns"],
    verbs: &["create", "get", "list", "watch"],
    subresources: &[("status", &["get"])],
};

pub(crate) static NODES: Resource = Resource {
    name: "nodes",
    singular: "node",
    kind: "Node",
    group: "",
    namespaced: false,
    short_names: &["no"],
    verbs: &["get", "list"],
    subresources: &[("proxy", &["get"]), ("status", &["get"])],
};

pub(crate) static PRIORITY_CLASSES: Resource = Resource {
    name: "priorityclasses",
    singular: "priorityclass",
    kind: "PriorityClass",
    group: "scheduling.k8s.io",
    namespaced: false,
    short_names: &["pc"],
    verbs: RW,
    subresources: &[],
};

pub(crate) static RUNTIME_CLASSES: Resource = Resource {
    name: "runtimeclasses",
    singular: "runtimeclass",
    kind: "RuntimeClass",
    group: "node.k8s.io",
    namespaced: false,
    short_names: &[],
    verbs: RW,
    subresources: &[],
};

/// Every resource, core group first.
pub(crate) static ALL: &[&Resource] = &[
    &PODS,
    &CONFIG_MAPS,
    &SECRETS,
    &SERVICE_ACCOUNTS,
    &EVENTS,
    &NAMESPACES,
    &NODES,
    &PRIORITY_CLASSES,
    &RUNTIME_CLASSES,
];

/// The resources kept in the store (nodes are made from the running node).
pub(crate) fn stored() -> Vec<&'static str> {
    ALL.iter()
        .filter(|r| !r.is("nodes"))
        .map(|r| r.name)
        .collect()
}

/// The resource of `group` named `name`.
pub(crate) fn find(group: &str, name: &str) -> Option<&'static Resource> {
    ALL.iter()
        .copied()
        .find(|r| r.group == group && r.name == name)
}
