#!/usr/bin/env bash
# Installs what the tests need on a Debian machine with Rust (rustup) alone, and does nothing
# for what is already there. `tools/test.sh` and CI (`.ci/run`) run it.
#
# - the wasm targets the test guests and examples are built for, and the lint components;
# - protoc: the CRI client the shim's tests use compiles the CRI's protobuf definitions;
# - containerd with its CRI plugin, Debian's CNI plugins (`ptp`, `host-local`, `loopback`),
#   `ip` and `nsenter`: the shim's tests start a private containerd on loopback;
# - kubectl (preinstalled on the project's machines; Debian's kubernetes-client otherwise):
#   the node agent's tests drive it with kubectl;
# - docker-registry and skopeo: the image tests run a real registry and copy images with skopeo;
# - curl: the agent's tests call its API as a plain HTTP client too;
# - systemd-analyze: the agent's unit file is verified with it.
set -euo pipefail

rustup target add wasm32-wasip1 wasm32-wasip2
rustup component add rustfmt clippy

# command → the Debian package that has it
declare -A needed=(
    [protoc]=protobuf-compiler
    [containerd]=containerd
    [ip]=iproute2
    [nsenter]=util-linux
    [/usr/lib/cni/ptp]=containernetworking-plugins
    [kubectl]=kubernetes-client
    [docker-registry]=docker-registry
    [skopeo]=skopeo
    [curl]=curl
    [systemd-analyze]=systemd
)
missing=()
for what in "${!needed[@]}"; do
    if [[ $what == /* ]]; then [[ -x $what ]] && continue; else command -v "$what" >/dev/null && continue; fi
    missing+=("${needed[$what]}")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=()
[[ $(id -u) -eq 0 ]] || sudo=(sudo)
echo "installing ${missing[*]}" >&2
"${sudo[@]}" apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
