#!/usr/bin/env bash
# Builds the example guests and puts each .wasm next to its pod.yaml.
# Needs the wasm targets: rustup target add wasm32-wasip1 wasm32-wasip2
set -euo pipefail
cd "$(dirname "$0")"
target_dir="${EXAMPLES_TARGET_DIR:-$PWD/target}"
build() { # build EXAMPLE TARGET BIN
    cargo build --quiet --release --manifest-path "$1/guest/Cargo.toml" --target "$2" --bin "$3" --target-dir "$target_dir"
    cp "$target_dir/$2/release/$3.wasm" "$1/$3.wasm"
}
build hello wasm32-wasip1 hello
build init-and-main wasm32-wasip1 init
build init-and-main wasm32-wasip2 main
build http-service wasm32-wasip2 handler
build http-service wasm32-wasip2 refresher
echo "built: $(ls ./*/*.wasm | tr '\n' ' ')"
