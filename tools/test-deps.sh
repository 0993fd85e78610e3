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
# - systemd-analyze: the agent's unit file is verified with it;
# - systemd-nspawn: the shim's installer is tested on this machine's Debian booted in a container
#   (systemd its PID 1, containerd a systemd service);
# - the official Kubernetes clients the agent's tests drive as a user's program would: Python's
#   in a venv at $WASMPOD_TEST_VENV (default ~/.cache/wasmpod-test-venv), JavaScript's with Node
#   and npm under $WASMPOD_TEST_NODE (default ~/.cache/wasmpod-test-node).
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
    [systemd-nspawn]=systemd-container
    [python3]=python3
    [node]=nodejs
    [npm]=npm
)
missing=()
for what in "${!needed[@]}"; do
    if [[ $what == /* ]]; then [[ -x $what ]] && continue; else command -v "$what" >/dev/null && continue; fi
    missing+=("${needed[$what]}")
done
# Debian's python3 makes venvs only with python3-venv.
command -v python3 >/dev/null && ! python3 -c 'import ensurepip' 2>/dev/null && missing+=(python3-venv)

if [[ ${#missing[@]} -gt 0 ]]; then
    sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    echo "installing ${missing[*]}" >&2
    "${sudo[@]}" apt-get update
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi

# The clients the agent's tests drive, at the versions they were written against.
venv="${WASMPOD_TEST_VENV:-$HOME/.cache/wasmpod-test-venv}"
python_client="kubernetes==37.0.2"
if ! "$venv/bin/python" -c 'import kubernetes, sys; sys.exit(kubernetes.__version__ != "37.0.2")' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "$python_client"
fi
node_dir="${WASMPOD_TEST_NODE:-$HOME/.cache/wasmpod-test-node}"
js_client="@kubernetes/client-node@1.4.0"
if ! grep -qs '"version": "1.4.0"' "$node_dir/node_modules/@kubernetes/client-node/package.json"; then
    mkdir -p "$node_dir"
    npm install --prefix "$node_dir" --no-audit --no-fund --silent "$js_client"
fi
