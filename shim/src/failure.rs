//! A task request's failure, and the ttrpc status containerd reads from it.

use containerd_shim::protos::ttrpc;

/// Why a request failed, as containerd reads it (its gRPC code).
#[derive(Debug)]
pub(crate) enum Failure {
    NotFound(String),
    AlreadyExists(String),
    Precondition(String),
    Invalid(String),
    Other(anyhow::Error),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Other(e)
    }
}

impl From<Failure> for ttrpc::Error {
    fn from(f: Failure) -> Self {
        let (code, message) = match f {
            Failure::NotFound(m) => (ttrpc::Code::NOT_FOUND, m),
            Failure::AlreadyExists(m) => (ttrpc::Code::ALREADY_EXISTS, m),
            Failure::Precondition(m) => (ttrpc::Code::FAILED_PRECONDITION, m),
            Failure::Invalid(m) => (ttrpc::Code::INVALID_ARGUMENT, m),
            Failure::Other(e) => (ttrpc::Code::UNKNOWN, format!("{e:#}")),
        };
        ttrpc::Error::RpcStatus(ttrpc::get_status(code, message))
    }
}
