//! The agent's API, on a real agent in this process reached over loopback TLS by a raw client:
//! what clients see of routing, objects, patches, watches and errors ([`requests`]), and of
//! hostile requests ([`hostile`]).

mod hostile;
mod requests;
mod support;
