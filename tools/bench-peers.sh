#!/usr/bin/env bash
# Installs the peers the benches compare wasmpod with, for `cargo bench` runs (not CI's): the
# wasmtime CLI of the wasmtime wasmpod embeds (`wasmtime run`, `wasmtime serve`) and `wrk`, the
# HTTP load generator; and builds the `wasmpod` and the shim users install (release builds of
# each crate alone: the benches' own builds have other dependency features and code layout),
# kept where `cargo bench` does not overwrite them. Then run the command it prints last.
set -euo pipefail
target="${CARGO_TARGET_DIR:-$HOME/.cache/wasmpod-ci-target}"
version=$(cargo metadata --format-version 1 --manifest-path "$(dirname "$0")/../Cargo.toml" \
    | python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "wasmtime"))')
if ! "$HOME/.cargo/bin/wasmtime" --version 2>/dev/null | grep -q "$version"; then
    cargo install --locked wasmtime-cli --version "$version"
fi
command -v wrk >/dev/null || {
    sudo=(); [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    "${sudo[@]}" apt-get install -y wrk
}
"$HOME/.cargo/bin/wasmtime" --version
mkdir -p "$target/shipped"
# One crate a build: built together, their dependencies' features would be unified.
for crate in wasmpod-cli:wasmpod wasmpod-shim:containerd-shim-wasmpod-v1; do
    CARGO_TARGET_DIR="$target" cargo build --release --locked -p "${crate%%:*}" \
        --manifest-path "$(dirname "$0")/../Cargo.toml"
    cp "$target/release/${crate#*:}" "$target/shipped/"
done
echo "WASMPOD=$target/shipped/wasmpod WASMPOD_SHIM=$target/shipped/containerd-shim-wasmpod-v1" \
    "WASMTIME=$HOME/.cargo/bin/wasmtime cargo bench -p wasmpod-cli -p wasmpod-shim"
