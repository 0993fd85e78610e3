"""Runs one WASI testsuite pod (the file `wasmpod.py` wrote) with `wasmpod run`, as the runner
expects a runtime to: stdin passed through, the output without wasmpod's `[test] ` prefixes, and
the container's exit code as this process's. The pod's directory (its file, state and logs) is
removed after.

    run.py POD_FILE [PORT]

With PORT (an HTTP handler's published port), it says where the service is on stderr's first
line, as `wasmtime serve` does, once the port accepts connections, and a SIGINT to it stops the
pod as one to `wasmpod run` does.
"""

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional

WASMPOD = shlex.split(os.getenv("WASMPOD", "wasmpod"))
CONTAINER = "test"


def _copy_unprefixed(src, dst) -> None:
    """Copies `src` to `dst` as it comes, taking `[test] ` off the start of each line."""
    prefix = f"[{CONTAINER}] ".encode()
    start = b""  # the start of a line, until it is known whether it has the prefix
    at_start = True
    while chunk := os.read(src.fileno(), 65536):
        out = b""
        while chunk:
            if at_start:
                start += chunk
                chunk = b""
                if len(start) < len(prefix) and b"\n" not in start and prefix.startswith(start):
                    break
                chunk = start[len(prefix):] if start.startswith(prefix) else start
                start = b""
                at_start = False
            line_end = chunk.find(b"\n")
            if line_end < 0:
                out += chunk
                break
            out += chunk[:line_end + 1]
            chunk = chunk[line_end + 1:]
            at_start = True
        dst.write(out)
        dst.flush()
    dst.write(start)
    dst.flush()


def _announce(port: int, proc: subprocess.Popen) -> None:
    """Says `Serving HTTP on http://127.0.0.1:PORT/` on stderr once PORT accepts connections."""
    while proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            time.sleep(0.02)
            continue
        sys.stderr.write(f"Serving HTTP on http://127.0.0.1:{port}/\n")
        sys.stderr.flush()
        return


def main(pod_file: str, port: Optional[int]) -> int:
    status_file = pod_file + ".status"
    state = os.path.join(os.path.dirname(pod_file), "state")
    proc = subprocess.Popen(
        WASMPOD + ["run", "--allow-host-network", "--state-dir", state, "--status", status_file,
                   pod_file],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    copies = [threading.Thread(target=_copy_unprefixed, args=(proc.stdout, sys.stdout.buffer)),
              threading.Thread(target=_copy_unprefixed, args=(proc.stderr, sys.stderr.buffer))]
    if port:
        signal.signal(signal.SIGINT, lambda *_: proc.send_signal(signal.SIGINT))
        copies.insert(0, threading.Thread(target=_announce, args=(port, proc)))
    for copy in copies:
        copy.start()
    code = proc.wait()
    for copy in copies:
        copy.join()
    try:
        with open(status_file, encoding="UTF-8") as f:
            status = json.load(f)
        return status["containerStatuses"][0]["state"]["terminated"]["exitCode"]
    except (OSError, KeyError, IndexError, ValueError):
        return code
    finally:
        shutil.rmtree(os.path.dirname(pod_file), ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None))
