//! The integration tests of wasmpod, one binary (each file links the whole runtime; one binary
//! builds and links once): real guests on the real runtime, asserted on what users see. The CPU
//! limit test is a binary of its own (`cpu.rs`): it measures the whole process's CPU time.

mod admission;
mod attach;
mod config;
mod hardening;
mod http;
mod images;
mod isolation;
mod lifecycle;
mod manifests;
mod network;
mod node;
mod p3;
mod placement;
mod pressure;
mod probes;
mod task;
mod termination;
mod tiers;
mod volumes;
