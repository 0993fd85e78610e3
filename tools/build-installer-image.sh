#!/usr/bin/env bash
# Builds the installer's image for deploy/kubernetes/installer.yaml without Docker: the shim
# (`containerd-shim-wasmpod-v1`, which is also the installer) linked statically for amd64 and
# arm64, each as one layer of an OCI image, the two under one index, pushed with skopeo and read
# back.
#
#   tools/build-installer-image.sh REGISTRY/REPO:TAG [--insecure]
#
# Needs Debian's gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, protobuf-compiler, skopeo and
# python3 (tools/test-deps.sh installs all but the first two). Two release builds of the shim:
# about half an hour on 2 cores, which is why CI does not run it.
set -euo pipefail

target_ref=${1:?usage: $0 REGISTRY/REPO:TAG [--insecure]}
tls=()
if [[ ${2:-} == --insecure ]]; then tls=(--dest-tls-verify=false); fi
cd "$(dirname "$0")/.."

rustup target add x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu >/dev/null
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
# glibc, linked in: the image has nothing else (the shim resolves no names through NSS).
export RUSTFLAGS="-C target-feature=+crt-static"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for arch in amd64 arm64; do
  case $arch in
    amd64) triple=x86_64-unknown-linux-gnu strip=strip ;;
    arm64) triple=aarch64-unknown-linux-gnu strip=aarch64-linux-gnu-strip ;;
  esac
  cargo build --release -p wasmpod-shim --target "$triple"
  mkdir -p "$work/$arch"
  cp "target/$triple/release/containerd-shim-wasmpod-v1" "$work/$arch/"
  # The release profile keeps line tables for backtraces: 260 MB a binary; the image needs none.
  "$strip" "$work/$arch/containerd-shim-wasmpod-v1"
  file "$work/$arch/containerd-shim-wasmpod-v1" | grep -Eq "statically linked|static-pie linked" \
    || { echo "$triple: the shim is not statically linked" >&2; exit 1; }
done

python3 - "$work" <<'EOF'
import hashlib, io, json, os, sys, tarfile
work = sys.argv[1]
layout = os.path.join(work, "oci")
blobs = os.path.join(layout, "blobs", "sha256")
os.makedirs(blobs)

def blob(data):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs, digest), "wb") as f:
        f.write(data)
    return {"digest": "sha256:" + digest, "size": len(data)}

manifests = []
for arch in ("amd64", "arm64"):
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        path = os.path.join(work, arch, "containerd-shim-wasmpod-v1")
        info = tar.gettarinfo(path, arcname="containerd-shim-wasmpod-v1")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        info.mode = 0o755
        with open(path, "rb") as f:
            tar.addfile(info, f)
    layer = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": arch, "os": "linux",
        "config": {"Entrypoint": ["/containerd-shim-wasmpod-v1"], "Cmd": ["install", "--host-root=/host"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }).encode()
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **blob(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **blob(layer)}],
    }).encode()
    manifests.append({"mediaType": "application/vnd.oci.image.manifest.v1+json", **blob(manifest),
                      "platform": {"architecture": arch, "os": "linux"}})
index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                    "manifests": manifests}).encode()
inner = blob(index)
with open(os.path.join(layout, "index.json"), "w") as f:
    json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json",
               **inner, "annotations": {"org.opencontainers.image.ref.name": "installer"}}]}, f)
with open(os.path.join(layout, "oci-layout"), "w") as f:
    json.dump({"imageLayoutVersion": "1.0.0"}, f)
EOF

skopeo copy --all "${tls[@]}" "oci:$work/oci:installer" "docker://$target_ref"
read_back=(--raw)
if [[ ${#tls[@]} -gt 0 ]]; then read_back+=(--tls-verify=false); fi
skopeo inspect "${read_back[@]}" "docker://$target_ref" \
  | python3 -c 'import json,sys; i=json.load(sys.stdin); print("pushed:", [m["platform"]["architecture"] for m in i["manifests"]])'
