#!/usr/bin/env bash
# The shim and the runtime on arm64, on an x86_64 machine: cross-built with Debian's aarch64
# toolchain and run under qemu-user. Runs the shim's own tests (its task service driving real
# guests, the installer's config edits, the process transitions) and then the installer's
# command line as an arm64 binary. Not part of tools/test.sh: a second build of wasmtime and
# Cranelift for aarch64 takes ~12 minutes on 2 cores (the tests then take 2 s under emulation).
# Installs what it needs (apt-get: gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, qemu-user,
# protobuf-compiler).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user protobuf-compiler)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    sudo=""
    [[ $(id -u) -eq 0 ]] || sudo=sudo
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
fi
rustup target add aarch64-unknown-linux-gnu >/dev/null
triple=aarch64-unknown-linux-gnu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
# The shim's unit tests (the binary's own); its integration tests start the host's containerd,
# which cannot start an arm64 shim here.
cargo test -p wasmpod-shim --target "$triple" --bins "$@"
cargo build -p wasmpod-shim --target "$triple"
shim="${CARGO_TARGET_DIR:-target}/$triple/debug/containerd-shim-wasmpod-v1"
file "$shim" | grep -q "ARM aarch64"
qemu-aarch64 -L /usr/aarch64-linux-gnu "$shim" --version
qemu-aarch64 -L /usr/aarch64-linux-gnu "$shim" install --help >/dev/null
echo "arm64: the shim's tests passed under qemu-aarch64"
