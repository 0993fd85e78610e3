//! The sidecar: a plain WASI command that rewrites `/shared/motd` every few seconds, for the
//! handler to serve. It runs for as long as the pod does and stops at TERM.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "/shared".into());
    for n in 1u64.. {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let motd = format!("message #{n}, written at unix time {now}\n");
        // Write then rename, so the handler never reads a half-written file.
        std::fs::write(format!("{dir}/motd.tmp"), &motd).expect("write the message");
        std::fs::rename(format!("{dir}/motd.tmp"), format!("{dir}/motd")).expect("publish it");
        std::thread::sleep(Duration::from_secs(5));
    }
}
