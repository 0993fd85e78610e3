//! `wasmpod serve` driven by the real `kubectl` and the official clients, as a user drives it:
//! each test starts an agent on loopback with its own state dir, and asserts on what kubectl
//! prints and how it exits. One test binary, a file per subject.

mod clients;
mod device;
mod kubectl;
mod source;
mod streams;
mod support;
