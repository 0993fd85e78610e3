//! How a container instance ended: its exit code and the Kubernetes reason for it, from what
//! its entry point returned or why it could not start.

use wasmtime_wasi::I32Exit;

use super::{EXIT_KILLED, EXIT_START_ERROR, EXIT_TRAP, trap};
use crate::host::Killed;

/// How a container instance ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exit {
    pub(crate) code: i32,
    pub(crate) oom: bool,
    /// The instance could not be made (no guest code ran): the kubelet's `StartError`.
    pub(crate) start_failed: bool,
    /// The instance was lost with the node's previous process (its end was not seen).
    pub(crate) lost: bool,
    pub(crate) message: Option<String>,
}

impl Exit {
    pub(crate) fn code(code: i32) -> Exit {
        Exit {
            code,
            oom: false,
            start_failed: false,
            lost: false,
            message: None,
        }
    }

    /// A container that could not be started, and why: exit code 128, reason `StartError`.
    pub(crate) fn start_error(message: impl Into<String>) -> Exit {
        Exit {
            start_failed: true,
            message: Some(message.into()),
            ..Exit::code(EXIT_START_ERROR)
        }
    }

    /// An instance that was running when the node's previous process ended: the kubelet's
    /// `ContainerStatusUnknown`, exit code 137.
    pub(crate) fn lost(message: String) -> Exit {
        Exit {
            lost: true,
            message: Some(message),
            ..Exit::code(EXIT_KILLED)
        }
    }

    /// The Kubernetes reason for this exit.
    pub(crate) fn reason(&self) -> &'static str {
        match (self.oom, self.code) {
            _ if self.lost => "ContainerStatusUnknown",
            _ if self.start_failed => "StartError",
            (true, _) => "OOMKilled",
            (false, 0) => "Completed",
            (false, _) => "Error",
        }
    }
}

/// An instantiation that failed: a start function's trap or exit, or the memory limit, end the
/// container as they would in its entry point; anything else (the host could not make the
/// instance: its memory's address space, its stack) is a start error, not the guest's doing.
pub(super) fn not_started(e: wasmtime::Error, oom: bool) -> Exit {
    if oom || e.is::<wasmtime::Trap>() || e.is::<I32Exit>() || e.is::<Killed>() {
        return exit_of(Err(e), oom);
    }
    Exit::start_error(format!("cannot create the container's instance: {e:#}"))
}

pub(super) fn exit_of(result: wasmtime::Result<i32>, oom: bool) -> Exit {
    match result {
        Ok(code) => Exit::code(code),
        Err(e) => {
            if let Some(exit) = e.downcast_ref::<I32Exit>() {
                return Exit::code(exit.0);
            }
            if e.downcast_ref::<Killed>().is_some() {
                return Exit::code(EXIT_KILLED);
            }
            if oom {
                let cause = e.root_cause();
                return Exit {
                    oom: true,
                    message: Some(format!("memory limit reached: {cause}")),
                    ..Exit::code(EXIT_KILLED)
                };
            }
            Exit {
                message: Some(trap::message(&e)),
                ..Exit::code(EXIT_TRAP)
            }
        }
    }
}
