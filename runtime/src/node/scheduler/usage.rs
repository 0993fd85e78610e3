//! Resources in use (or reserved) on the node, as admission adds and takes them.

use crate::spec::Requests;

/// Resources in use (or reserved).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Usage {
    pub(super) memory: u64,
    pub(super) cpu_milli: u64,
    pub(super) pods: u64,
    pub(super) containers: u64,
}

impl Usage {
    pub(super) fn plus(self, r: Requests) -> Usage {
        Usage {
            memory: self.memory.saturating_add(r.memory),
            cpu_milli: self.cpu_milli.saturating_add(r.cpu_milli),
            pods: self.pods + 1,
            containers: self.containers.saturating_add(r.containers),
        }
    }

    pub(super) fn add(self, other: Usage) -> Usage {
        Usage {
            memory: self.memory.saturating_add(other.memory),
            cpu_milli: self.cpu_milli.saturating_add(other.cpu_milli),
            pods: self.pods + other.pods,
            containers: self.containers.saturating_add(other.containers),
        }
    }

    pub(super) fn minus(self, r: Requests) -> Usage {
        Usage {
            memory: self.memory.saturating_sub(r.memory),
            cpu_milli: self.cpu_milli.saturating_sub(r.cpu_milli),
            pods: self.pods.saturating_sub(1),
            containers: self.containers.saturating_sub(r.containers),
        }
    }
}
