#!/usr/bin/env bash
# Installs the peers the benches compare wasmpod with, for `cargo bench` runs (not CI's): the
# wasmtime CLI of the wasmtime wasmpod embeds (`wasmtime run`, `wasmtime serve`) and `wrk`, the
# HTTP load generator. Then `WASMTIME=$HOME/.cargo/bin/wasmtime cargo bench -p wasmpod-cli`.
set -euo pipefail
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
