#!/usr/bin/env python3
"""Writes cli/startup.order (and, with --shim, shim/startup.order): the functions of the `wasmpod`
binary (the containerd shim's) that running a pod executes.

A `wasmpod run` executes about 2,000 of the binary's functions (1.7 MiB of code) spread over
its 32 MiB of text; each page fault on the text maps the 64 KiB around it, so a start touched
12.5 MiB of the executable. The release build hands this list to the linker
(`--symbol-ordering-file`, build/startup_order.rs), which puts these functions first and
together: the same start maps 2.7 MiB of it.

The list is of mangled names: a dependency's or the compiler's version changes all of a crate's,
and an edit some of the edited crate's (closures, changed signatures, LLVM's suffixes for
functions shared between codegen units). A name the binary no longer has is skipped by the
linker: a stale list makes the layout worse, never the build wrong. Run this before measuring or
releasing a build; it prints how much of the list the binary it built has.

    tools/startup-order.py            # installs valgrind if missing (apt-get)
    tools/startup-order.py --shim     # needs what the shim's bench needs (tools/test-deps.sh)

How: the release `wasmpod` runs the example pods under valgrind's callgrind, each twice with
a compile cache of its own (the second run is the warm start that matters), then `wasmpod
serve` runs a static pod and one sent by kubectl, and the functions callgrind saw run in the
`wasmpod` object are written in the order of the scenarios: `run`'s first, then what the agent
adds, each scenario's sorted by name. For the shim, the shim's bench is the workload (`ctr run`
of a module and a component, a CRI pod of ten containers, exec) with `$WASMPOD_SHIM` a script
that runs the release shim under callgrind: each of its processes (`start`, the pod's, `delete`)
leaves a profile, and the functions any of them ran are written, those most processes ran first.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIM = "containerd-shim-wasmpod-v1"
# Warm starts of the README's pods: a preview1 module, then an init container and a component.
PODS = ["examples/hello/pod.yaml", "examples/init-and-main/pod.yaml"]


def run(*args, **kw):
    return subprocess.run(args, check=True, **kw)


def executed(profile: Path, binary: Path) -> list[str]:
    """The functions callgrind's profile shows executed in `binary`, in the file's order."""
    objects, names, seen, current = {}, {}, {}, None
    for line in profile.read_text().splitlines():
        if m := re.match(r"^(c?ob)=\((\d+)\)(?: (.*))?$", line):
            kind, key, name = m.groups()
            if name:
                objects[key] = name
            if kind == "ob":
                current = objects[key]
        elif m := re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line):
            kind, key, name = m.groups()
            if name:
                names[key] = name
            if kind == "fn" and current == str(binary.resolve()):
                # callgrind marks a recursive function's deeper calls `'2`, `'3`, ...
                symbol = re.sub(r"'\d+$", "", names[key])
                if not symbol.startswith("0x"):
                    seen.setdefault(symbol, None)
    return list(seen)


def defined(binary: Path) -> set[str]:
    out = run("nm", "--defined-only", str(binary), capture_output=True, text=True).stdout
    return {fields[2] for fields in map(str.split, out.splitlines()) if len(fields) == 3}


def cli_order(target: Path, work: Path, env: dict) -> tuple[Path, dict]:
    """The functions warm `wasmpod run`s of the example pods execute, pod after pod, then
    those the node agent adds."""
    if not all((ROOT / "examples" / p).exists() for p in ["hello/hello.wasm", "init-and-main/main.wasm"]):
        run("examples/build.sh", env=env)
    run("cargo", "build", "--release", "--locked", "-p", "wasmpod-cli", env=env)
    binary = work / "wasmpod"
    shutil.copy(target / "release" / "wasmpod", binary)
    order: dict[str, None] = {}
    for i, pod in enumerate(PODS):
        profile = work / f"callgrind.{i}"
        for _ in range(2):  # the first fills the compile cache for valgrind's CPU
            run("valgrind", "--tool=callgrind", "--demangle=no",
                f"--callgrind-out-file={profile}", str(binary), "run",
                "--state-dir", str(work / "state"), "--cache-dir", str(work / "cache"),
                pod, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        add(order, executed(profile, binary))
    profile = work / "callgrind.serve"
    serve(binary, profile, work)
    add(order, executed(profile, binary))
    return binary, order


def add(order: dict[str, None], symbols: list[str]) -> None:
    """Appends the symbols `order` lacks, sorted: a list made again differs only where the code
    did."""
    for symbol in sorted(set(symbols) - order.keys()):
        order[symbol] = None


def serve(binary: Path, profile: Path, work: Path) -> None:
    """The node agent under callgrind: start, a static pod and one through the API run to
    their end, kubectl reads them and their logs, a deletion, SIGTERM."""
    manifests = work / "manifests"
    manifests.mkdir()
    hello = ROOT / "examples/hello/hello.wasm"
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  restartPolicy: Never\n" \
        f"  containers:\n  - {{{{name: hello, image: \"{hello}\"}}}}\n"
    (manifests / "static.yaml").write_text(pod.format(name="static"))
    out = work / "serve.out"
    agent = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--demangle=no", f"--callgrind-out-file={profile}",
         str(binary), "serve", "--listen", "127.0.0.1:0", "--state-dir", str(work / "agent"),
         "--cache-dir", str(work / "cache"), "--manifests", str(manifests), "--node-name", "order"],
        stdout=out.open("w"), stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while "KUBECONFIG=" not in out.read_text():
            if time.monotonic() > deadline or agent.poll() is not None:
                raise RuntimeError(f"the agent did not start: {out.read_text()}")
            time.sleep(0.5)
        kubeconfig = out.read_text().split("KUBECONFIG=")[1].split()[0]
        env = dict(os.environ, KUBECONFIG=kubeconfig)

        def kubectl(*args, **kw):
            run("kubectl", "--request-timeout=60s", *args, env=env, stdout=subprocess.DEVNULL, **kw)

        kubectl("apply", "-f", "-", input=pod.format(name="api").encode())
        for name in ["api", "static-order"]:
            kubectl("wait", "--for=jsonpath={.status.phase}=Succeeded", f"pod/{name}",
                    "--timeout=300s")
            kubectl("logs", name)
        kubectl("get", "pods,nodes,events", "-o", "wide")
        kubectl("delete", "pod", "api")
    finally:
        agent.terminate()
        agent.wait(timeout=300)


def shim_order(target: Path, work: Path, env: dict) -> tuple[Path, dict]:
    """The functions the shim's processes execute under its bench, the most shared first."""
    run("cargo", "build", "--release", "--locked", "-p", "wasmpod-shim", env=env)
    binary = work / SHIM
    shutil.copy(target / "release" / SHIM, binary)
    profiles = work / "profiles"
    profiles.mkdir()
    wrapper = work / "wrapper"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"exec valgrind --tool=callgrind --demangle=no --trace-children=yes "
        f"--callgrind-out-file={profiles}/callgrind.%p {binary} \"$@\" 2>>{work}/valgrind.log\n"
    )
    wrapper.chmod(0o755)
    run("cargo", "bench", "--locked", "-p", "wasmpod-shim", "--bench", "containerd",
        env=dict(env, WASMPOD_SHIM=str(wrapper)))
    counts: dict[str, int] = {}
    print(f"{len(list(profiles.iterdir()))} shim processes profiled")
    for profile in sorted(profiles.iterdir()):
        for symbol in executed(profile, binary):
            counts[symbol] = counts.get(symbol, 0) + 1
    ranked = sorted(counts, key=lambda symbol: (-counts[symbol], symbol))
    return binary, dict.fromkeys(ranked)


def main() -> int:
    os.chdir(ROOT)
    if sys.argv[1:] not in ([], ["--shim"]):
        sys.exit(f"usage: {sys.argv[0]} [--shim]")
    shim = sys.argv[1:] == ["--shim"]
    if not shutil.which("valgrind"):
        run("apt-get", "install", "-y", "valgrind")
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache/wasmpod-ci-target"))
    env = dict(os.environ, CARGO_TARGET_DIR=str(target))
    out = ROOT / ("shim" if shim else "cli") / "startup.order"
    work = Path(tempfile.mkdtemp())
    try:
        binary, order = (shim_order if shim else cli_order)(target, work, env)
        what = "the shim's processes run under its bench" if shim else \
            "a warm `wasmpod run` of the example pods executes"
        header = (
            f"# The functions {what}, which the release\n"
            "# build's linker puts first and together. Written by tools/startup-order.py.\n"
        )
        out.write_text(header + "".join(f"{s}\n" for s in order))
        have = defined(binary)
        print(f"{out.relative_to(ROOT)}: {len(order)} functions, "
              f"{sum(s in have for s in order)} of them in this build")
    finally:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
