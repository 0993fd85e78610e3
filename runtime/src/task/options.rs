//! What a task runs with besides its module (argv, environment, directories, limits), and what
//! it reports: how it ended, what it used, why a resize was refused.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::FieldError;
use crate::spec::Serving;

/// What a task runs with besides its module: argv, environment, directories, limits.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct TaskOptions {
    /// The guest's argv, its program name first.
    pub args: Vec<String>,
    /// The guest's environment.
    pub env: Vec<(String, String)>,
    /// Host directories the guest sees.
    pub mounts: Vec<TaskMount>,
    /// The guest's working directory (a guest path).
    pub working_dir: Option<String>,
    /// The most linear memory and table space the guest may hold, in bytes.
    pub memory_limit: Option<u64>,
    /// The CPU the guest may use, as a share of one core (below 1 to take effect).
    pub cpu_share: Option<f64>,
    /// The TCP port an HTTP handler component is served on (8080 when unset).
    pub http_port: Option<u16>,
    /// How an HTTP handler component serves (`wasmpod.dev/http-*` annotations).
    pub(super) serving: Serving,
}

impl TaskOptions {
    /// Options with this argv and nothing else.
    pub fn new<S: Into<String>>(args: impl IntoIterator<Item = S>) -> TaskOptions {
        TaskOptions {
            args: args.into_iter().map(Into::into).collect(),
            ..TaskOptions::default()
        }
    }

    /// Adds environment variables.
    pub fn envs<K: Into<String>, V: Into<String>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.env
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Shows the host directory `host` at `guest`, read-only or not.
    pub fn mount(
        mut self,
        host: impl Into<PathBuf>,
        guest: impl Into<String>,
        read_only: bool,
    ) -> Self {
        self.mounts.push(TaskMount {
            host: host.into(),
            guest: guest.into(),
            read_only,
        });
        self
    }

    /// Sets the working directory.
    pub fn working_dir(mut self, dir: impl Into<String>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// Sets the memory limit in bytes.
    pub fn memory_limit(mut self, bytes: u64) -> Self {
        self.memory_limit = Some(bytes);
        self
    }

    /// Sets the CPU limit as a share of one core.
    pub fn cpu_share(mut self, share: f64) -> Self {
        self.cpu_share = Some(share);
        self
    }

    /// Sets the port an HTTP handler component is served on.
    pub fn http_port(mut self, port: u16) -> Self {
        self.http_port = Some(port);
        self
    }

    /// Takes the pod's `wasmpod.dev/http-*` annotations, as a pod's do in a node
    /// (`http-max-concurrency`, `http-request-timeout`), and [`HTTP_PORT`]: how an HTTP handler
    /// component serves. A bad value is an error that names the annotation.
    pub fn annotations(
        mut self,
        annotations: &BTreeMap<String, String>,
    ) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        self.serving = crate::spec::serving::check(annotations, &mut errors);
        if let Some(value) = annotations.get(HTTP_PORT) {
            match value.trim().parse::<u16>() {
                Ok(port) if port > 0 => self.http_port = Some(port),
                _ => errors.push(FieldError::invalid(
                    format!("metadata.annotations[{HTTP_PORT}]"),
                    format!("invalid value {value:?}: must be a port from 1 to 65535"),
                )),
            }
        }
        if errors.is_empty() {
            Ok(self)
        } else {
            Err(errors)
        }
    }
}

/// The pod annotation that sets the TCP port its HTTP handler components are served on
/// (`"8000"`; 8080 without it).
pub const HTTP_PORT: &str = "wasmpod.dev/http-port";

/// A host directory a task's guest sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskMount {
    /// The directory on the host (opened when the task is made).
    pub host: PathBuf,
    /// Where the guest sees it.
    pub guest: String,
    /// The guest may not change it.
    pub read_only: bool,
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskExit {
    /// The exit code: the guest's, 134 when it trapped, 137 out of memory, 143 stopped by
    /// TERM, 128 when it could not start.
    pub code: i32,
    /// The container ended because it reached its memory limit (`Task::run` only: an exec that
    /// did ends with 137 and says so in its message).
    pub oom: bool,
    /// Why it ended, when that is more than its exit code (a trap, a mount that failed).
    pub message: Option<String>,
}

/// What a task used so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskUsage {
    /// The CPU time its instances ran (entry point, execs, HTTP requests).
    pub cpu: Duration,
    /// Its working set: linear memories, tables and socket buffers, in bytes.
    pub memory: u64,
    /// Its memory limit in bytes (`u64::MAX` without one).
    pub memory_limit: u64,
}

/// Why a task's limits could not be changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ResizeError {
    /// The new memory limit is below what the task holds (memory is never taken back).
    #[error("the memory limit {limit} bytes is below the {used} bytes the container holds")]
    BelowUsage {
        /// The limit asked for.
        limit: u64,
        /// The bytes in use.
        used: u64,
    },
    /// A CPU share that is not a positive number.
    #[error("the CPU limit {0} is not a positive share of a core")]
    Cpu(f64),
}
