//! The scriptable guest as a preview2 component of the `wasmpod:pod/container` world: it imports
//! `termination` (so it keeps its grace period) and exports `probes` and `hooks`.
//! Besides the agnhost words, `wait-term-pollable` blocks on `termination.subscribe()`.

wit_bindgen::generate!({
    path: "../../wit",
    world: "wasmpod:pod/container",
    generate_all,
});

use exports::wasmpod::pod::{hooks, probes};
use wasmpod::pod::termination;
use wasmpod_test_programs::handlers;

struct Guest;

impl probes::Guest for Guest {
    fn liveness() -> Result<(), String> {
        handlers::probe("liveness")
    }
    fn readiness() -> Result<(), String> {
        handlers::probe("readiness")
    }
    fn startup() -> Result<(), String> {
        handlers::probe("startup")
    }
}

impl hooks::Guest for Guest {
    fn post_start() -> Result<(), String> {
        handlers::hook("post-start", "POST_START_MS")
    }
    fn pre_stop() -> Result<(), String> {
        handlers::hook("pre-stop", "PRE_STOP_MS")
    }
}

export!(Guest);

fn main() {
    if std::env::args().nth(1).as_deref() == Some("wait-term-pollable") {
        termination::subscribe().block();
        println!("got TERM through the pollable");
        std::process::exit(0);
    }
    wasmpod_test_programs::main(Some(termination::requested));
}
