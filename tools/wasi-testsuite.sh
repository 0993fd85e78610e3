#!/usr/bin/env bash
# The official WASI testsuite (WebAssembly/wasi-testsuite, its prebuilt tests) against wasmpod:
# each test a one-container pod through `wasmpod run` (tools/wasi-testsuite/wasmpod.py, the
# runtime adapter). Not part of CI: it fetches the testsuite from GitHub.
#
#   tools/wasi-testsuite.sh [TESTSUITE_DIR]   # a checkout of its prod/testsuite-base branch;
#                                             # cloned into a temporary dir when not given
#
# Builds the release CLI (WASMPOD names another binary). Prints the runner's report; needs
# Python 3.12 or later (PYTHON names one).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/wasmpod-ci-target}"
if [ -z "${WASMPOD:-}" ]; then
    cargo build -q --release -p wasmpod-cli --manifest-path "$repo/Cargo.toml"
    export WASMPOD="$CARGO_TARGET_DIR/release/wasmpod"
fi
# Each test's pod, its state and logs (a test the runner kills leaves its own behind).
WASMPOD_TESTSUITE_WORK=$(mktemp -d)
export WASMPOD_TESTSUITE_WORK
trap 'rm -rf "$WASMPOD_TESTSUITE_WORK"' EXIT
suite="${1:-}"
if [ -z "$suite" ]; then
    suite=$(mktemp -d)
    trap 'rm -rf "$WASMPOD_TESTSUITE_WORK" "$suite"' EXIT
    git clone -q --depth 1 --branch prod/testsuite-base \
        https://github.com/WebAssembly/wasi-testsuite "$suite"
fi
cd "$suite"
# The runner needs Python 3.12 or later (PYTHON names one) and its requirements, in a venv.
"${PYTHON:-python3}" -m venv "$suite/.venv"
"$suite/.venv/bin/pip" install -q -r test-runner/requirements/prod.txt
"$suite/.venv/bin/python" run-tests --disable-colors -r "$repo/tools/wasi-testsuite/wasmpod.py"
