#!/usr/bin/env bash
# Installs the peers the benches compare wasmpod with, for `cargo bench` runs (not CI's): the
# wasmtime CLI of the wasmtime wasmpod embeds (`wasmtime run`, `wasmtime serve`) and `wrk`, the
# HTTP load generator; and builds the `wasmpod` users install (a release build of the CLI alone:
# the benches' own build has other dependency features and code layout), kept where `cargo
# bench` does not overwrite it. Then run the command it prints last.
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
CARGO_TARGET_DIR="$target" cargo build --release --locked -p wasmpod-cli \
    --manifest-path "$(dirname "$0")/../Cargo.toml"
mkdir -p "$target/shipped"
cp "$target/release/wasmpod" "$target/shipped/wasmpod"
echo "WASMPOD=$target/shipped/wasmpod WASMTIME=$HOME/.cargo/bin/wasmtime cargo bench -p wasmpod-cli"
