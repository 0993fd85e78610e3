//! The node's PriorityClasses, and a pod's priority resolved from them at creation.

use k8s_openapi::api::scheduling::v1::PriorityClass;

use super::Error;
use crate::spec::PodSpec;

/// A pod's priority and whether it may preempt.
#[derive(Debug, Clone, Copy)]
pub(super) struct Priority {
    pub(super) value: i32,
    pub(super) preempts: bool,
}

/// The node's PriorityClasses by name, and the priority of a pod that names none.
pub(super) struct Priorities {
    classes: std::collections::HashMap<String, Priority>,
    default: Priority,
}

impl Priorities {
    pub(super) fn new(list: &[PriorityClass]) -> Result<Priorities, Error> {
        let mut classes = std::collections::HashMap::new();
        let mut default: Option<(&str, Priority)> = None;
        for class in list {
            let name = class.metadata.name.as_deref().unwrap_or_default();
            let fail = |message: String| Error::PriorityClass {
                name: name.to_owned(),
                message,
            };
            let priority = Priority {
                value: class.value,
                preempts: class.preemption_policy.as_deref() != Some("Never"),
            };
            if class.global_default == Some(true) {
                if let Some((other, _)) = default {
                    return Err(fail(format!(
                        "globalDefault: only one PriorityClass can be the global default; \
                         {other} already is"
                    )));
                }
                default = Some((name, priority));
            }
            if classes.insert(name.to_owned(), priority).is_some() {
                return Err(fail("given twice".into()));
            }
        }
        // Without a global default, a pod without a class has priority 0.
        let zero = Priority {
            value: 0,
            preempts: true,
        };
        Ok(Priorities {
            classes,
            default: default.map_or(zero, |(_, p)| p),
        })
    }

    /// The pod's priority from its class. As the API server's priority admission does, a
    /// `spec.priority` or `spec.preemptionPolicy` written in the pod must be what the class gives.
    pub(super) fn of(&self, spec: &PodSpec) -> Result<Priority, Error> {
        let priority = match &spec.scheduling().priority_class {
            None => self.default,
            Some(name) => self
                .classes
                .get(name)
                .copied()
                .ok_or_else(|| Error::UnknownPriorityClass(name.clone()))?,
        };
        if let Some(given) = spec.priority
            && given != priority.value
        {
            return Err(Error::PriorityMismatch(format!(
                "spec.priority: the integer value of priority ({given}) must not be provided in \
                 pod spec; priority admission controller computed {} from the given \
                 PriorityClass name",
                priority.value
            )));
        }
        let policy = if priority.preempts {
            "PreemptLowerPriority"
        } else {
            "Never"
        };
        if let Some(given) = spec.scheduling().preemption_policy.as_deref()
            && given != policy
        {
            return Err(Error::PriorityMismatch(format!(
                "spec.preemptionPolicy: the value of preemptionPolicy ({given}) must not be \
                 provided in pod spec; priority admission controller computed {policy} from the \
                 given PriorityClass name"
            )));
        }
        Ok(priority)
    }
}
