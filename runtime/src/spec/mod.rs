//! Pod specifications: Kubernetes Pod YAML parsed into the real Kubernetes types, then validated
//! into wasmpod's own model, which holds only what wasmpod honours.
//!
//! [`load`] reads documents (bounded by [`yaml`]) and checks their shape ([`shape`]); [`pod`]
//! converts a Pod into the [`model`], with a file per part of it: [`containers`], [`env`],
//! [`ports`], [`volumes`], [`handlers`] (probes and hooks), [`resources`], [`names`]. Every problem is a
//! [`FieldError`] at its field path.

mod affinity;
mod config;
mod containers;
mod dns;
mod env;
mod errors;
mod file_mounts;
mod handlers;
mod image;
mod load;
mod model;
mod names;
mod placement;
mod pod;
mod ports;
mod priority;
mod quantity;
mod resources;
mod security;
pub(crate) mod serving;
mod shape;
mod volumes;
mod yaml;

pub(crate) use affinity::terms_match;
pub use config::{TOKEN_AUDIENCE, TOKEN_EXPIRATION};
pub(crate) use containers::TERMINATION_MESSAGE_MAX;
pub(crate) use dns::{Dns, ResolverOptions};
pub(crate) use env::{PodInfo, resolve as resolve_env};
pub use errors::{FieldError, FieldErrorKind, InvalidPod};
pub(crate) use image::{PullPolicy, shown};
pub use load::PodFiles;
pub use model::PodSpec;
pub use model::Role;
pub(crate) use model::{
    ContainerSpec, Handler, HostCreate, HttpGet, ImagePull, Mount, Probe, Requests, RestartPolicy,
    StdinMode, TerminationMessage, VolumeSource,
};
pub use names::check_metadata_map;
pub(crate) use names::{MAX_DURATION, check_label, check_subdomain};
pub(crate) use placement::{Placement, PodTerm};
pub use priority::read_priority_classes;
pub(crate) use serving::Serving;
pub(crate) use volumes::check_relative_path;
pub use yaml::read_documents;

#[cfg(test)]
mod tests;
