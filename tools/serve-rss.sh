#!/usr/bin/env bash
# The resident memory of `wasmpod serve` idle and with N sleeping pods (static manifests), for
# comparing builds (a full one against a runtime-only one, say):
#
#   tools/serve-rss.sh WASMPOD IMAGE [N]
#
# IMAGE is the sleeping pods' image (a `.wasm`, or a `.cwasm` for a runtime-only build; it must
# take `sleep MS` as arguments, as the test guest `agnhost` does). Prints VmRSS in KiB: idle, with
# the N pods Running, and per pod.
set -euo pipefail
wasmpod=$(realpath "$1")
image=$(realpath "$2")
n="${3:-100}"
work=$(mktemp -d)
trap 'kill "$agent" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir "$work/manifests"
dir=$(dirname "$image")
"$wasmpod" serve --listen 127.0.0.1:0 --state-dir "$work/state" --cache-dir "$work/cache" \
    --manifests "$work/manifests" --precompiled-dir "$dir" --node-name rss >"$work/out" 2>"$work/err" &
agent=$!
for _ in $(seq 100); do grep -q KUBECONFIG "$work/out" 2>/dev/null && break; sleep 0.1; done
export KUBECONFIG=$(sed -n 's/^KUBECONFIG=//p' "$work/out")
sleep 2
rss() { awk '/^VmRSS/ {print $2}' "/proc/$agent/status"; }
idle=$(rss)
for i in $(seq "$n"); do
    cat >"$work/manifests/p$i.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: { name: sleeper-$i }
spec:
  containers:
  - { name: main, image: "$image", args: [sleep, "600000"] }
EOF
done
for _ in $(seq 600); do
    running=$(kubectl get pods --no-headers 2>/dev/null | grep -c Running || true)
    [ "$running" -ge "$n" ] && break
    sleep 0.5
done
[ "$running" -ge "$n" ] || { echo "only $running of $n pods ran" >&2; cat "$work/err" >&2; exit 1; }
sleep 2
full=$(rss)
echo "idle ${idle} KiB; with $n sleeping pods ${full} KiB; $(( (full - idle) / n )) KiB a pod"
