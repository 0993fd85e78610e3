//! Builds the guests in `../programs` for wasm32-wasip1 and wasm32-wasip2 with a nested cargo
//! and exposes each one's path as a constant (`AGNHOST_P1`, `AGNHOST_P2`, ...).

use std::path::PathBuf;
use std::process::Command;

/// (binary, targets it is built for). Guests that use a preview1-only import are p1 only.
const GUESTS: &[(&str, &[&str])] = &[
    ("agnhost", &["wasm32-wasip1", "wasm32-wasip2"]),
    ("agnhost_term", &["wasm32-wasip1"]),
    ("imports_missing", &["wasm32-wasip1"]),
    ("probed", &["wasm32-wasip2"]),
    ("http_handler", &["wasm32-wasip2"]),
    ("p3_cli", &["wasm32-wasip2"]),
    ("p3_handler", &["wasm32-wasip2"]),
];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let programs = manifest_dir.join("../programs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let target_dir = out.join("target");
    println!("cargo:rerun-if-changed={}", programs.display());

    let mut consts = String::new();
    for target in ["wasm32-wasip1", "wasm32-wasip2"] {
        let bins: Vec<&str> = GUESTS
            .iter()
            .filter(|(_, t)| t.contains(&target))
            .map(|(b, _)| *b)
            .collect();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.arg("build")
            .arg("--release")
            .arg("--target")
            .arg(target);
        for bin in &bins {
            cmd.arg("--bin").arg(bin);
        }
        cmd.arg("--manifest-path").arg(programs.join("Cargo.toml"));
        cmd.env("CARGO_TARGET_DIR", &target_dir);
        for var in [
            "CARGO_ENCODED_RUSTFLAGS",
            "RUSTFLAGS",
            "CARGO_BUILD_TARGET",
            "RUSTC_WORKSPACE_WRAPPER",
            "CARGO_PROFILE_RELEASE_DEBUG",
        ] {
            cmd.env_remove(var);
        }
        let status = cmd.status().expect("cannot run cargo for the test guests");
        assert!(
            status.success(),
            "building the test guests for {target} failed; is the target installed? (rustup target add {target})"
        );
        let suffix = if target == "wasm32-wasip1" {
            "P1"
        } else {
            "P2"
        };
        for bin in bins {
            let path = target_dir
                .join(target)
                .join("release")
                .join(format!("{bin}.wasm"));
            assert!(path.exists(), "{} was not built", path.display());
            consts.push_str(&format!(
                "/// `{bin}` built for {target}.\npub const {}_{suffix}: &str = {:?};\n",
                bin.to_uppercase(),
                path.display().to_string()
            ));
        }
    }
    std::fs::write(out.join("artifacts.rs"), consts).unwrap();
}
