"""A runtime adapter of the official WASI testsuite (WebAssembly/wasi-testsuite) for wasmpod.

The test runner loads this file as a module (`run-tests -r tools/wasi-testsuite/wasmpod.py`; see
`tools/wasi-testsuite.sh`) and asks it for the command that runs one test. Each test runs as a
one-container pod through `wasmpod run`: the test's file as the image, the program's name as the
container's `command` (argv[0], as `wasmtime run` makes it), its args and env, its directory
mounted at `/` as a hostPath volume, and `stdin: true` so the runner can write to it. The pod has
the host's network (`hostNetwork: true`; `run.py` runs `wasmpod run --allow-host-network`), as a
program under `wasmtime run` has: the runner's servers and clients on 127.0.0.1 are the test's. A
test of the `wasi:http/service` world is an HTTP handler container serving its `containerPort`
on the host, where the runner sends its requests.

The runner compares the program's raw stdout and stderr and its exit code, so the command is
`run.py` beside this file, around `wasmpod run`: it passes stdin through, takes the `[test] ` prefix
off each line of output as it comes (a flushed prompt with no newline yet included), and exits with
the container's exit code from the pod's final status (`wasmpod run` itself exits 1 for any failed
pod).

`WASMPOD` names the binary (default `wasmpod` on the PATH); each test's pod gets a directory of
its own in `WASMPOD_TESTSUITE_WORK` (default the temporary dir).
"""

import json
import os
import re
import shutil
import shlex
import socket
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

WASMPOD = shlex.split(os.getenv("WASMPOD", "wasmpod"))
CONTAINER = "test"


def get_name() -> str:
    return "wasmpod"


def get_version() -> str:
    out = subprocess.run(WASMPOD + ["--version"], encoding="UTF-8", capture_output=True, check=True)
    return out.stdout.split()[1]


def get_wasi_versions() -> List[str]:
    return ["wasm32-wasip1", "wasm32-wasip3"]


def get_wasi_worlds() -> List[str]:
    return ["wasi:cli/command", "wasi:http/service"]


def compute_argv(test_path: str,
                 args_env_root: Tuple[List[str], Dict[str, str], Optional[str]],
                 proposals: List[str],
                 wasi_world: str,
                 wasi_version: str) -> List[str]:
    args, env, root = args_env_root
    name = os.path.basename(test_path)
    container = {
        "name": CONTAINER,
        "image": os.path.abspath(test_path),
        "command": [name],
        "args": list(args),
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "stdin": True,
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63] or "test"},
        # The runner and the test talk over the host's loopback (its HTTP server for the
        # `http-client-*` tests, its client for `sockets-echo` and the HTTP services), as
        # they do under `wasmtime run`: the pod has the host's network.
        "spec": {"restartPolicy": "Never", "hostNetwork": True, "containers": [container]},
    }
    port = None
    if wasi_world == "wasi:http/service":
        # An HTTP handler: served on its containerPort, on the host's network.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        container["ports"] = [{"containerPort": port}]
    work = tempfile.mkdtemp(prefix="wasmpod-testsuite-", dir=os.getenv("WASMPOD_TESTSUITE_WORK"))
    if root:
        # A copy of the test's directory, its own: what a test leaves there (the runner's
        # cleanup skips symlinks, such as `filesystem-hard-links`' `parent.cleanup`) does not
        # reach the tests after it.
        copy = os.path.join(work, "root")
        shutil.copytree(root, copy, symlinks=True)
        container["volumeMounts"] = [{"name": "root", "mountPath": "/"}]
        pod["spec"]["volumes"] = [{"name": "root", "hostPath": {"path": copy}}]
    pod_file = os.path.join(work, "pod.json")
    with open(pod_file, "w", encoding="UTF-8") as f:
        json.dump(pod, f)
    run = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run.py")
    return [sys.executable, run, pod_file] + ([str(port)] if port else [])
