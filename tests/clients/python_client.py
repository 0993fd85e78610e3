"""The official Kubernetes Python client against `wasmpod serve` (KUBECONFIG names it).

Run by cli/tests/serve/clients.rs in the venv tools/test-deps.sh makes; prints one JSON object of what
each call gave, for the test to check. The pod `web` runs `http-server` on 8080 and a `shell`
container (the test guest) to exec in, and `echo` (stdin: true) to attach to.
"""

import json
import time

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.stream import portforward, stream

config.load_kube_config()
v1 = client.CoreV1Api()
seen = {}

# exec with stdin: text frames in, the end of stdin as v5's close of channel 0.
resp = stream(
    v1.connect_get_namespaced_pod_exec,
    "web",
    "default",
    container="shell",
    command=["agnhost", "stdin"],
    stdin=True,
    stdout=True,
    stderr=True,
    tty=False,
    _preload_content=False,
)
resp.write_stdin("first\nsecond\n")
resp.close_channel(0)
resp.run_forever(timeout=30)
seen["exec_stdout"] = resp.read_stdout()
seen["exec_returncode"] = resp.returncode
seen["exec_protocol"] = resp.subprotocol

# exec without stdin, preloaded: what the command wrote.
seen["exec_once"] = stream(
    v1.connect_get_namespaced_pod_exec,
    "web",
    "default",
    container="shell",
    command=["agnhost", "print", "once"],
    stdin=False,
    stdout=True,
    stderr=True,
    tty=False,
)

# attach with stdin: the container's output from its start, then its answer; the session is
# read until the answer comes back (an attach does not end by itself).
att = stream(
    v1.connect_get_namespaced_pod_attach,
    "web",
    "default",
    container="echo",
    stdin=True,
    stdout=True,
    stderr=True,
    tty=False,
    _preload_content=False,
)
att.write_stdin("from python\n")
attached = ""
deadline = time.time() + 30
while "read: from python\n" not in attached and att.is_open() and time.time() < deadline:
    att.update(timeout=1)
    if att.peek_stdout():
        attached += att.read_stdout()
att.close()
seen["attach_stdout"] = attached

# port-forward over the WebSocket channel protocol: one port served, one refused.
pf = portforward(v1.connect_get_namespaced_pod_portforward, "web", "default", ports="8080,9999")
sock = pf.socket(8080)
sock.settimeout(30)
sock.sendall(b"GET /python HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n")
answer = b""
while b"\r\n\r\n" not in answer:
    chunk = sock.recv(4096)
    if not chunk:
        break
    answer += chunk
seen["forward"] = answer.decode(errors="replace").split("\r\n")[0]
deadline = time.time() + 30
while pf.error(9999) is None and time.time() < deadline:
    time.sleep(0.05)
seen["refused"] = pf.error(9999)
sock.close()
pf.close()

# logs: the last line with its timestamp, and a followed log's first line
tail = v1.read_namespaced_pod_log("web", "default", container="server", tail_lines=1, timestamps=True)
seen["log_tail"] = tail
followed = v1.read_namespaced_pod_log(
    "web", "default", container="server", follow=True, _preload_content=False
)
seen["log_follow_first"] = followed.readline().decode()
followed.release_conn()

# the dynamic client, through discovery
from kubernetes.dynamic import DynamicClient

dynamic = DynamicClient(client.ApiClient())
config_maps = dynamic.resources.get(api_version="v1", kind="ConfigMap")
config_maps.create(body={"metadata": {"name": "from-python"}, "data": {"a": "b"}}, namespace="default")
seen["dynamic_get"] = config_maps.get(name="from-python", namespace="default").data.a
seen["dynamic_list"] = sorted(i.metadata.name for i in config_maps.get(namespace="default").items)

# an error as a Status
try:
    v1.read_namespaced_pod("nowhere", "default")
except ApiException as e:
    seen["missing"] = {"status": e.status, "reason": json.loads(e.body)["reason"]}

print(json.dumps(seen))
