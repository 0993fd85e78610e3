#!/usr/bin/env bash
# The small-device path end to end: a full wasmpod compiles the example pods' guests ahead of
# time, and runtime-only wasmpods (built without a compiler) run them: the hello pod on the
# minimal build (no features), the HTTP service answering on its published port on one with
# `--features http`. The minimal build refuses a plain .wasm with the command that makes an
# artefact, a registry image's pull and an HTTP handler, each naming the feature it lacks.
#
#   tools/small-device.sh            # for this machine (CI runs this)
#   tools/small-device.sh --arm64    # cross-built for aarch64-unknown-linux-gnu, run under
#                                    # qemu-aarch64 (installs Debian's cross toolchain and
#                                    # qemu-user; a release would run this)
#
# Needs the example guests (examples/build.sh). Debug builds; PROFILE=release for release ones.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/wasmpod-ci-target}"
profile="${PROFILE:-dev}"
dir_of() { if [ "$profile" = dev ]; then echo debug; else echo "$profile"; fi; }

arm64=false
[ "${1:-}" = --arm64 ] && arm64=true

work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

if $arm64; then
    triple=aarch64-unknown-linux-gnu
    if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
        apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y gcc-aarch64-linux-gnu \
            libc6-dev-arm64-cross qemu-user
    fi
    rustup target add "$triple"
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
    # The compiler needs every code generator to compile for another architecture.
    cargo build -q --profile "$profile" -p wasmpod-cli --features cross
    cp "$CARGO_TARGET_DIR/$(dir_of)/wasmpod" "$work/wasmpod-full"
    cargo build -q --profile "$profile" -p wasmpod-cli --no-default-features --features http \
        --target "$triple"
    minimal=("qemu-aarch64" "-L" "/usr/aarch64-linux-gnu" "$CARGO_TARGET_DIR/$triple/$(dir_of)/wasmpod")
    serving=("${minimal[@]}")
else
    triple=$(rustc -vV | sed -n 's/^host: //p')
    cargo build -q --profile "$profile" -p wasmpod-cli
    cp "$CARGO_TARGET_DIR/$(dir_of)/wasmpod" "$work/wasmpod-full"
    cargo build -q --profile "$profile" -p wasmpod-cli --no-default-features
    cp "$CARGO_TARGET_DIR/$(dir_of)/wasmpod" "$work/wasmpod-minimal"
    minimal=("$work/wasmpod-minimal")
    cargo build -q --profile "$profile" -p wasmpod-cli --no-default-features --features http
    cp "$CARGO_TARGET_DIR/$(dir_of)/wasmpod" "$work/wasmpod-http"
    serving=("$work/wasmpod-http")
fi

# Precompiled images, beside copies of the pod files that name them: for a compact node (what a
# small board is; qemu-user's address space is one too).
for example in hello http-service; do
    mkdir -p "$work/$example"
    for wasm in examples/$example/*.wasm; do
        name=$(basename "$wasm" .wasm)
        "$work/wasmpod-full" compile --target "$triple" --compact "$wasm" \
            -o "$work/$example/$name.cwasm"
    done
    sed 's/\.wasm$/.cwasm/' "examples/$example/pod.yaml" >"$work/$example/pod.yaml"
done

minimal+=(run --address-space compact --state-dir "$work/state")
serving+=(run --address-space compact --state-dir "$work/state")
out=$("${minimal[@]}" "$work/hello/pod.yaml")
echo "$out"
grep -qx '\[hello\] Hello, wasmpod! I am "hello".' <<<"$out"

# A plain .wasm: refused, with what to do.
if "${minimal[@]}" examples/hello/pod.yaml 2>"$work/err"; then
    echo "the runtime-only build ran a .wasm" >&2
    exit 1
fi
grep -q "has no compiler" "$work/err"
grep -q "wasmpod compile --target" "$work/err"

# A registry image: the build has no registry client, and its pull fails saying so.
cat >"$work/registry.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata: { name: from-a-registry }
spec:
  containers:
  - { name: app, image: "registry.example/app:1.0" }
YAML
"${minimal[@]}" --events "$work/events" "$work/registry.yaml" 2>/dev/null &
pulling=$!
for _ in $(seq 100); do
    grep -q 'built without registry images' "$work/events" 2>/dev/null && break
    sleep 0.1
done
kill -INT "$pulling"
wait "$pulling" || true
grep -q 'Failed to pull image .*built without registry images (its `registry` feature)' "$work/events"

# An HTTP handler on a build without `wasi:http` (the arm64 form builds only the one with it).
if ! $arm64; then
    if "${minimal[@]}" "$work/http-service/pod.yaml" 2>"$work/err"; then
        echo "the build without wasi:http served" >&2
        exit 1
    fi
    grep -q 'built without `wasi:http` (its `http` feature)' "$work/err"
fi

"${serving[@]}" "$work/http-service/pod.yaml" &
service=$!
body=$(python3 - <<'PY'
import time, urllib.request
for _ in range(600):
    try:
        print(urllib.request.urlopen("http://127.0.0.1:8080/", timeout=5).read().decode(), end="")
        break
    except OSError:
        time.sleep(0.1)
PY
)
kill -INT "$service"
wait "$service"
echo "$body"
grep -qx 'Hello, wasmpod! Served by a fresh instance.' <<<"$body"
echo "small-device path for $triple: ok"
