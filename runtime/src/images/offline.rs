//! A node built without the `registry` feature: it has no registry client, so every pull fails
//! with the reason (the container waits in `ErrImagePull`, as for an unreachable registry).
//! Images already in the store (put there by a build that pulls) still run under
//! `IfNotPresent` and `Never`.

use oci_spec::distribution::Reference;
use serde_json::Value;

use super::signature::VerifyKey;
use super::{Artifact, Counters, Fetched, PullError};

/// Why nothing is pulled.
const NO_REGISTRY: &str = "this wasmpod is built without registry images (its `registry` \
    feature): name a .wasm or .cwasm file as the image instead";

pub(crate) struct Puller;

impl Puller {
    pub(crate) fn new(
        _insecure: &[String],
        _precompiled: &[String],
        _auth_file: Option<&std::path::Path>,
    ) -> Puller {
        Puller
    }

    /// No registry is trusted with machine code.
    pub(crate) fn trusts(&self, _reference: &Reference) -> bool {
        false
    }

    pub(crate) async fn resolve(
        &self,
        _reference: &Reference,
        _secrets: &[Value],
    ) -> Result<String, String> {
        Err(NO_REGISTRY.into())
    }

    pub(crate) async fn fetch(
        &self,
        _reference: &Reference,
        _secrets: &[Value],
        _command: Option<&str>,
        _counters: &Counters,
        _key: Option<&VerifyKey>,
    ) -> Result<Fetched, PullError> {
        Err(PullError::Failed(NO_REGISTRY.into()))
    }

    pub(crate) async fn artifact(
        &self,
        _reference: &Reference,
        _key: Option<&VerifyKey>,
        _limit: u64,
        _unless: Option<&str>,
    ) -> Result<Option<Artifact>, PullError> {
        Err(PullError::Failed(NO_REGISTRY.into()))
    }
}
