#!/usr/bin/env bash
# The README's second command: installs what the tests need (tools/test-deps.sh), then runs
# every test of the workspace. Arguments go to `cargo test` (`tools/test.sh --no-fail-fast`).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/test-deps.sh
cargo test --workspace "$@"
