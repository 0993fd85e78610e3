//! The tree of a Pod's honoured fields, from the pod down to a container's and a volume's.

use super::Shape;
use Shape::{Ignored, List, Object, Quantities, Scalar, StringMap};

const NAME_VALUE: Shape = Object(&[("name", Scalar), ("value", Scalar)]);
const KEY_REF: Shape = Object(&[("name", Scalar), ("key", Scalar), ("optional", Scalar)]);
const ENV_VAR: Shape = Object(&[
    ("name", Scalar),
    ("value", Scalar),
    (
        "valueFrom",
        Object(&[
            (
                "fieldRef",
                Object(&[("fieldPath", Scalar), ("apiVersion", Scalar)]),
            ),
            ("configMapKeyRef", KEY_REF),
            ("secretKeyRef", KEY_REF),
        ]),
    ),
]);
const ENV_FROM: Shape = Object(&[
    ("prefix", Scalar),
    (
        "configMapRef",
        Object(&[("name", Scalar), ("optional", Scalar)]),
    ),
    (
        "secretRef",
        Object(&[("name", Scalar), ("optional", Scalar)]),
    ),
]);
const REQUIREMENT: Shape = Object(&[
    ("key", Scalar),
    ("operator", Scalar),
    ("values", List(&Scalar)),
]);
const NODE_SELECTOR_TERM: Shape = Object(&[
    ("matchExpressions", List(&REQUIREMENT)),
    ("matchFields", List(&REQUIREMENT)),
]);
const LABEL_SELECTOR: Shape = Object(&[
    ("matchLabels", StringMap),
    ("matchExpressions", List(&REQUIREMENT)),
]);
const POD_AFFINITY_TERM: Shape = Object(&[
    ("labelSelector", LABEL_SELECTOR),
    ("namespaceSelector", LABEL_SELECTOR),
    ("namespaces", List(&Scalar)),
    ("topologyKey", Scalar),
    ("matchLabelKeys", List(&Scalar)),
    ("mismatchLabelKeys", List(&Scalar)),
]);
const POD_AFFINITY: Shape = Object(&[
    (
        "requiredDuringSchedulingIgnoredDuringExecution",
        List(&POD_AFFINITY_TERM),
    ),
    (
        "preferredDuringSchedulingIgnoredDuringExecution",
        List(&Object(&[
            ("weight", Scalar),
            ("podAffinityTerm", POD_AFFINITY_TERM),
        ])),
    ),
]);
const SPREAD: Shape = Object(&[
    ("maxSkew", Scalar),
    ("topologyKey", Scalar),
    ("whenUnsatisfiable", Scalar),
    ("labelSelector", LABEL_SELECTOR),
    ("minDomains", Scalar),
    ("nodeAffinityPolicy", Scalar),
    ("nodeTaintsPolicy", Scalar),
    ("matchLabelKeys", List(&Scalar)),
]);
const ITEMS: Shape = List(&Object(&[
    ("key", Scalar),
    ("path", Scalar),
    ("mode", Scalar),
]));
const DOWNWARD_ITEMS: Shape = List(&Object(&[
    ("path", Scalar),
    ("mode", Scalar),
    (
        "fieldRef",
        Object(&[("fieldPath", Scalar), ("apiVersion", Scalar)]),
    ),
    (
        "resourceFieldRef",
        Object(&[
            ("containerName", Scalar),
            ("resource", Scalar),
            ("divisor", Scalar),
        ]),
    ),
]));
const VOLUME_MOUNT: Shape = Object(&[
    ("name", Scalar),
    ("mountPath", Scalar),
    ("readOnly", Scalar),
    ("subPath", Scalar),
]);
const EXEC: Shape = Object(&[("command", List(&Scalar))]);
const HTTP_GET: Shape = Object(&[
    ("path", Scalar),
    ("port", Scalar),
    ("host", Scalar),
    ("scheme", Scalar),
    ("httpHeaders", List(&NAME_VALUE)),
]);
const TCP_SOCKET: Shape = Object(&[("port", Scalar), ("host", Scalar)]);
const PORT: Shape = Object(&[
    ("name", Scalar),
    ("containerPort", Scalar),
    ("hostPort", Scalar),
    ("hostIP", Scalar),
    ("protocol", Scalar),
]);
const PROBE: Shape = Object(&[
    ("exec", EXEC),
    ("httpGet", HTTP_GET),
    ("tcpSocket", TCP_SOCKET),
    ("grpc", Object(&[("port", Scalar), ("service", Scalar)])),
    ("initialDelaySeconds", Scalar),
    ("periodSeconds", Scalar),
    ("timeoutSeconds", Scalar),
    ("successThreshold", Scalar),
    ("failureThreshold", Scalar),
    ("terminationGracePeriodSeconds", Scalar),
]);
const HANDLER: Shape = Object(&[
    ("exec", EXEC),
    ("httpGet", HTTP_GET),
    ("sleep", Object(&[("seconds", Scalar)])),
]);
/// Checked by `security.rs`: what the sandbox satisfies is accepted, the rest refused with why.
const SECCOMP: Shape = Object(&[("type", Scalar), ("localhostProfile", Scalar)]);
const CONTAINER_SECURITY: Shape = Object(&[
    ("runAsNonRoot", Scalar),
    ("runAsUser", Scalar),
    ("runAsGroup", Scalar),
    ("readOnlyRootFilesystem", Scalar),
    ("allowPrivilegeEscalation", Scalar),
    ("privileged", Scalar),
    ("procMount", Scalar),
    (
        "capabilities",
        Object(&[("add", List(&Scalar)), ("drop", List(&Scalar))]),
    ),
    ("seccompProfile", SECCOMP),
]);
const CONTAINER: Shape = Object(&[
    ("terminationMessagePath", Scalar),
    ("terminationMessagePolicy", Scalar),
    ("name", Scalar),
    ("image", Scalar),
    ("imagePullPolicy", Scalar),
    ("securityContext", CONTAINER_SECURITY),
    ("stdin", Scalar),
    ("stdinOnce", Scalar),
    ("tty", Scalar),
    ("command", List(&Scalar)),
    ("args", List(&Scalar)),
    ("env", List(&ENV_VAR)),
    ("envFrom", List(&ENV_FROM)),
    ("volumeMounts", List(&VOLUME_MOUNT)),
    ("restartPolicy", Scalar),
    ("workingDir", Scalar),
    ("ports", List(&PORT)),
    ("startupProbe", PROBE),
    ("livenessProbe", PROBE),
    ("readinessProbe", PROBE),
    (
        "lifecycle",
        Object(&[("postStart", HANDLER), ("preStop", HANDLER)]),
    ),
    (
        "resources",
        Object(&[("limits", Quantities), ("requests", Quantities)]),
    ),
]);
const VOLUME: Shape = Object(&[
    ("name", Scalar),
    (
        "emptyDir",
        Object(&[("medium", Scalar), ("sizeLimit", Scalar)]),
    ),
    (
        "configMap",
        Object(&[
            ("name", Scalar),
            ("items", ITEMS),
            ("optional", Scalar),
            ("defaultMode", Scalar),
        ]),
    ),
    (
        "secret",
        Object(&[
            ("secretName", Scalar),
            ("items", ITEMS),
            ("optional", Scalar),
            ("defaultMode", Scalar),
        ]),
    ),
    (
        "downwardAPI",
        Object(&[("items", DOWNWARD_ITEMS), ("defaultMode", Scalar)]),
    ),
    (
        "projected",
        Object(&[
            ("defaultMode", Scalar),
            (
                "sources",
                List(&Object(&[
                    (
                        "configMap",
                        Object(&[("name", Scalar), ("items", ITEMS), ("optional", Scalar)]),
                    ),
                    (
                        "secret",
                        Object(&[("name", Scalar), ("items", ITEMS), ("optional", Scalar)]),
                    ),
                    ("downwardAPI", Object(&[("items", DOWNWARD_ITEMS)])),
                    (
                        "serviceAccountToken",
                        Object(&[
                            ("path", Scalar),
                            ("audience", Scalar),
                            ("expirationSeconds", Scalar),
                        ]),
                    ),
                ])),
            ),
        ]),
    ),
    ("hostPath", Object(&[("path", Scalar), ("type", Scalar)])),
]);
pub(super) const POD: Shape = Object(&[
    ("apiVersion", Scalar),
    ("kind", Scalar),
    (
        "metadata",
        Object(&[
            ("name", Scalar),
            ("namespace", Scalar),
            ("uid", Scalar),
            ("labels", StringMap),
            ("annotations", StringMap),
            // Set by the API server (or by it, then by controllers); accepted on input as the API
            // server accepts it, and not used: a pod exported with `kubectl get -o yaml` or made
            // by `kubectl run --dry-run=client -o yaml` runs as it is.
            ("creationTimestamp", Ignored),
            ("generateName", Ignored),
            ("resourceVersion", Ignored),
            ("generation", Ignored),
            ("managedFields", Ignored),
            ("ownerReferences", Ignored),
            ("finalizers", Ignored),
            ("selfLink", Ignored),
            ("deletionTimestamp", Ignored),
            ("deletionGracePeriodSeconds", Ignored),
        ]),
    ),
    // The API server ignores a pod's status on creation.
    ("status", Ignored),
    (
        "spec",
        Object(&[
            ("containers", List(&CONTAINER)),
            ("initContainers", List(&CONTAINER)),
            ("restartPolicy", Scalar),
            ("hostname", Scalar),
            ("volumes", List(&VOLUME)),
            ("terminationGracePeriodSeconds", Scalar),
            ("activeDeadlineSeconds", Scalar),
            ("priorityClassName", Scalar),
            ("dnsPolicy", Scalar),
            (
                "dnsConfig",
                Object(&[
                    ("nameservers", List(&Scalar)),
                    ("searches", List(&Scalar)),
                    ("options", List(&NAME_VALUE)),
                ]),
            ),
            (
                "hostAliases",
                List(&Object(&[("ip", Scalar), ("hostnames", List(&Scalar))])),
            ),
            ("schedulerName", Scalar),
            ("runtimeClassName", Scalar),
            ("nodeSelector", StringMap),
            (
                "affinity",
                Object(&[
                    (
                        "nodeAffinity",
                        Object(&[
                            (
                                "requiredDuringSchedulingIgnoredDuringExecution",
                                Object(&[("nodeSelectorTerms", List(&NODE_SELECTOR_TERM))]),
                            ),
                            (
                                "preferredDuringSchedulingIgnoredDuringExecution",
                                List(&Object(&[
                                    ("weight", Scalar),
                                    ("preference", NODE_SELECTOR_TERM),
                                ])),
                            ),
                        ]),
                    ),
                    ("podAffinity", POD_AFFINITY),
                    ("podAntiAffinity", POD_AFFINITY),
                ]),
            ),
            ("topologySpreadConstraints", List(&SPREAD)),
            ("os", Object(&[("name", Scalar)])),
            (
                "resources",
                Object(&[("limits", Quantities), ("requests", Quantities)]),
            ),
            ("overhead", Quantities),
            ("nodeName", Scalar),
            ("priority", Scalar),
            ("preemptionPolicy", Scalar),
            ("serviceAccountName", Scalar),
            ("serviceAccount", Scalar),
            ("automountServiceAccountToken", Scalar),
            (
                "tolerations",
                List(&Object(&[
                    ("key", Scalar),
                    ("operator", Scalar),
                    ("value", Scalar),
                    ("effect", Scalar),
                    ("tolerationSeconds", Scalar),
                ])),
            ),
            ("enableServiceLinks", Scalar),
            ("imagePullSecrets", List(&Object(&[("name", Scalar)]))),
            ("hostNetwork", Scalar),
            ("hostPID", Scalar),
            ("hostIPC", Scalar),
            ("shareProcessNamespace", Scalar),
            ("hostUsers", Scalar),
            (
                "securityContext",
                Object(&[
                    ("runAsNonRoot", Scalar),
                    ("runAsUser", Scalar),
                    ("runAsGroup", Scalar),
                    ("fsGroup", Scalar),
                    ("supplementalGroups", List(&Scalar)),
                    ("seccompProfile", SECCOMP),
                    ("sysctls", List(&NAME_VALUE)),
                ]),
            ),
            (
                "readinessGates",
                List(&Object(&[("conditionType", Scalar)])),
            ),
        ]),
    ),
]);
