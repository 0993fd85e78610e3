//! What streams between kubectl and the pods: `top` and the kubelet's metrics, `run -i`, `exec`
//! and `attach` with stdin, `port-forward` over WebSocket and SPDY.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use wasmpod_tests::PodYaml;

use super::support::{Agent, LIMIT, row};

/// The `kubectl top` row of `name`: (CPU in millicores, memory in MiB).
fn top_row(table: &str, name: &str) -> (u64, u64) {
    let cells = row(table, name);
    let milli = cells[cells.len() - 2]
        .trim_end_matches('m')
        .parse()
        .unwrap();
    let mib = cells[cells.len() - 1]
        .trim_end_matches("Mi")
        .parse()
        .unwrap();
    (milli, mib)
}

/// `kubectl top` reads `metrics.k8s.io` as metrics-server serves it, and the kubelet's
/// `/metrics/resource` and `/stats/summary` answer through the node proxy and on the agent
/// itself. A spinning container under `limits.cpu: 500m` shows about 500m (its limit holds it
/// there; on a loaded two-core machine it may get less), an idle one about 0, one that
/// allocated 8 MiB about 8 MiB above an idle one's memory.
#[test]
fn kubectl_top_and_the_kubelets_metrics() {
    wasmpod_tests::warm_shared_cache();
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start_in(tmp.path(), &["--metrics-resolution", "1s"]);
    agent.ok(&["create", "namespace", "tools"]);
    let spinner = PodYaml::new("spinner")
        .metadata("labels: {app: spin}")
        .container(
            r#"{ name: spin, image: "{p1}", args: [loop], resources: {limits: {cpu: 500m}} }"#,
        )
        .build();
    let idle = PodYaml::new("idle")
        .container(r#"{ name: idle, image: "{p1}", args: [sleep, "600000"] }"#)
        .container(r#"{ name: hog, image: "{p1}", args: [alloc, "8", sleep, "600000"] }"#)
        .build();
    agent.create(&spinner);
    agent.create(&idle);
    let file = agent.file("tools.yaml", &idle);
    agent.ok(&["create", "-n", "tools", "-f", &file]);
    let pods = agent.until(&["top", "pod", "-A"], LIMIT, |t| t.lines().count() == 4);
    assert!(pods.starts_with("NAMESPACE"), "{pods}");
    // Two windows of the spinner, so its rate covers a second of spinning.
    std::thread::sleep(Duration::from_secs(2));
    let pods = agent.ok(&["top", "pod", "--containers", "-l", "app=spin"]);
    let (spin, _) = top_row(&pods, "spinner");
    assert!(
        (200..=600).contains(&spin),
        "the spinner at {spin}m:\n{pods}"
    );
    let pods = agent.ok(&["top", "pod", "idle", "--containers"]);
    let cells = |c: &str| -> (u64, u64) {
        let line = pods
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(c))
            .unwrap();
        top_row(line, "idle")
    };
    let ((idle_cpu, idle_mem), (hog_cpu, hog_mem)) = (cells("idle"), cells("hog"));
    assert!(idle_cpu <= 5 && hog_cpu <= 5, "{pods}");
    assert!((8..=10).contains(&(hog_mem - idle_mem)), "{pods}");
    let nodes = agent.ok(&["top", "node"]);
    // NAME CPU(cores) CPU(%) MEMORY(bytes) MEMORY(%)
    let node = row(&nodes, "edge-1");
    let node_cpu: u64 = node[1].trim_end_matches('m').parse().unwrap();
    let node_mem: u64 = node[3].trim_end_matches("Mi").parse().unwrap();
    assert!(node_cpu >= spin / 2 && node_mem > hog_mem, "{nodes}");
    let missing = agent.fails(&["top", "pod", "nosuch"]);
    assert!(missing.contains("not found"), "{missing}");

    // The kubelet's resource metrics, read by a Prometheus parser.
    for path in [
        "/api/v1/nodes/edge-1/proxy/metrics/resource",
        "/metrics/resource",
    ] {
        let text = agent.ok(&["get", "--raw", path]);
        let lines = text.lines().map(|l| Ok(l.to_owned()));
        let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
        let sample = |metric: &str, labels: &[(&str, &str)]| -> f64 {
            let found = scrape.samples.iter().find(|s| {
                s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
            });
            match found.map(|s| &s.value) {
                Some(prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v)) => *v,
                other => panic!("{metric} {labels:?}: {other:?} in\n{text}"),
            }
        };
        let spin_cpu = sample(
            "container_cpu_usage_seconds_total",
            &[
                ("container", "spin"),
                ("pod", "spinner"),
                ("namespace", "default"),
            ],
        );
        assert!(spin_cpu > 0.5, "{text}");
        let hog = [
            ("container", "hog"),
            ("pod", "idle"),
            ("namespace", "tools"),
        ];
        let hog_bytes = sample("container_memory_working_set_bytes", &hog);
        assert!(hog_bytes > 8.0 * 1024.0 * 1024.0, "{text}");
        let started = sample("container_start_time_seconds", &hog);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        assert!((now.as_secs_f64() - started) < 600.0, "{text}");
        let pod_cpu = sample("pod_cpu_usage_seconds_total", &[("pod", "spinner")]);
        assert!(pod_cpu >= spin_cpu, "{text}");
        let pod_bytes = sample(
            "pod_memory_working_set_bytes",
            &[("pod", "idle"), ("namespace", "tools")],
        );
        assert!(pod_bytes > hog_bytes, "{text}");
        // The node's is the process's CPU time; a pod's counts the time its polls took, which
        // on a busy machine includes time the OS gave the thread to others.
        assert!(
            sample("node_cpu_usage_seconds_total", &[]) >= pod_cpu / 2.0,
            "{text}"
        );
        assert!(
            sample("node_memory_working_set_bytes", &[]) > pod_bytes,
            "{text}"
        );
        assert_eq!(sample("scrape_error", &[]), 0.0, "{text}");
        let types: Vec<_> = scrape.docs.keys().collect();
        assert_eq!(types.len(), 8, "{types:?}");
    }

    // The Summary API.
    let summary: Value = serde_json::from_str(&agent.ok(&[
        "get",
        "--raw",
        "/api/v1/nodes/edge-1/proxy/stats/summary",
    ]))
    .unwrap();
    assert_eq!(summary["node"]["nodeName"], "edge-1");
    assert!(
        summary["node"]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    let pods = summary["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 3, "{summary}");
    let spinner = pods
        .iter()
        .find(|p| p["podRef"]["name"] == "spinner")
        .unwrap();
    let spin = &spinner["containers"][0];
    assert_eq!(spin["name"], "spin");
    let cores = spin["cpu"]["usageNanoCores"].as_u64().unwrap();
    assert!((200_000_000..=600_000_000).contains(&cores), "{spin}");
    assert!(
        spin["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() > 500_000_000,
        "{spin}"
    );
    assert!(
        spin["startTime"].is_string() && spinner["startTime"].is_string(),
        "{spinner}"
    );
    agent.fails(&[
        "get",
        "--raw",
        "/api/v1/nodes/elsewhere/proxy/stats/summary",
    ]);
    // Only with the token.
    let refused = agent.fails(&["--token", "wrong", "get", "--raw", "/metrics/resource"]);
    assert!(refused.contains("Unauthorized"), "{refused}");
}

/// `kubectl run -i --rm` pipes its input to the new pod's stdin (`stdinOnce`: the input's end
/// is the container's), shows all it printed, deletes the pod and exits with the container's
/// code; `kubectl exec -i` gives the command its own stdin; `kubectl attach -i` shows the
/// container's output from its start and writes to a stdin that stays open for the next
/// attacher.
#[test]
fn run_exec_and_attach_with_stdin() {
    let (_tmp, agent) = Agent::start();
    agent.provide_agnhost();
    let run = |name: &str, extra: &[&str], input: &[u8]| {
        let mut args = vec![
            "run",
            name,
            "-i",
            "--rm",
            "--restart=Never",
            "--image=agnhost.wasm",
            "--",
            "print",
            "hello",
            "stdin",
        ];
        args.extend(extra);
        agent.kubectl_with_input(&args, input)
    };
    let out = run("interactive", &[], b"first\nsecond\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello\nread: first\nread: second\nstdin ended after 2 lines\npod \"interactive\" deleted\n"
    );
    let out = run("failing", &["exit", "3"], b"x\n");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("stdin ended after 1 lines"));
    assert_eq!(agent.ok(&["get", "pods", "-o", "name"]).trim(), "");

    agent.create(
        &PodYaml::new("shell")
            .container(r#"{ name: c, image: "{p1}", args: [print, started, stdin], stdin: true }"#)
            .container(r#"{ name: plain, image: "{p1}", args: [sleep, "600000"] }"#)
            .build(),
    );
    agent.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/shell",
        "--timeout=30s",
    ]);
    let out = agent.kubectl_with_input(
        &[
            "exec", "-i", "shell", "-c", "plain", "--", "agnhost", "stdin",
        ],
        b"to exec\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "read: to exec\nstdin ended after 1 lines\n"
    );
    // Attach sessions do not end by themselves: each is read until what it wrote came back
    // (bounded: a session that never echoes ends at the timeout and fails below).
    for (input, seen) in [("one\n", "read: one"), ("two\n", "read: two")] {
        let mut child = Command::new("timeout")
            .args(["30", "kubectl", "attach", "-i", "shell", "-c", "c"])
            .env("KUBECONFIG", &agent.kubeconfig)
            .env("HOME", &agent.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let mut lines = Vec::new();
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            if line == seen {
                break;
            }
            lines.push(line);
        }
        // TERM, which `timeout` passes on to kubectl and then dies of itself.
        let term = Command::new("kill").arg(child.id().to_string()).status();
        assert!(term.unwrap().success());
        let ended = child.wait_with_output().unwrap();
        assert!(
            ended.status.code().is_none(),
            "the session ended ({}) before {seen:?} came back: {lines:?}; kubectl said: {}\nthe agent's log:\n{}",
            ended.status,
            String::from_utf8_lossy(&ended.stderr),
            agent.log()
        );
        // From the instance's start: what it printed before this session too.
        assert_eq!(
            lines.first().map(String::as_str),
            Some("started"),
            "{lines:?}"
        );
    }
    let log = agent.ok(&["logs", "shell", "-c", "c"]);
    assert_eq!(log, "started\nread: one\nread: two\n");
    // Nothing is written to a container without stdin: true.
    let refused = String::from_utf8_lossy(
        &agent
            .kubectl_with_input(&["attach", "-i", "shell", "-c", "plain"], b"x\n")
            .stderr,
    )
    .into_owned();
    assert!(refused.contains("does not have stdin: true"), "{refused}");
}

/// An attach the API refuses (not a WebSocket: 400) takes nothing from the container: a
/// `stdinOnce` container's stdin stays open for the session that comes next.
#[test]
fn a_refused_attach_leaves_a_stdin_once_container_its_stdin() {
    let (_tmp, agent) = Agent::start();
    agent.provide_agnhost();
    agent.create(
        r#"apiVersion: v1
kind: Pod
metadata: { name: once }
spec:
  restartPolicy: Never
  containers:
  - { name: c, image: "{p1}", args: [print, started, stdin], stdin: true, stdinOnce: true }
"#,
    );
    agent.ok(&["wait", "--for=condition=Ready", "pod/once", "--timeout=30s"]);
    // A GET without the upgrade (no body for the refusal to race with).
    let refused = agent.kubectl(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/pods/once/attach?container=c&stdin=true&stdout=true",
    ]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("WebSocket"),
        "{said}"
    );
    // The next session writes to the stdin and ends it (stdinOnce): the container reads both.
    let out = agent.kubectl_with_input(&["attach", "-i", "once", "-c", "c"], b"one\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = agent.until(
        &["logs", "once", "-c", "c"],
        Duration::from_secs(30),
        |log| log.contains("stdin ended"),
    );
    assert_eq!(log, "started\nread: one\nstdin ended after 1 lines\n");
}

/// `kubectl port-forward` of `ports` (`0:PORT`: kubectl picks the local port), with `env`; the
/// process and the local ports, in the order asked.
fn port_forward(
    agent: &Agent,
    pod: &str,
    ports: &[&str],
    env: &[(&str, &str)],
) -> (Child, Vec<u16>) {
    let mut child = Command::new("kubectl")
        .args(["port-forward", "--address", "127.0.0.1", pod])
        .args(ports)
        .env("KUBECONFIG", &agent.kubeconfig)
        .env("HOME", &agent.dir)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let local = ports
        .iter()
        .map(|_| {
            // "Forwarding from 127.0.0.1:41234 -> 7000"
            let line = lines
                .next()
                .expect("kubectl port-forward printed nothing")
                .unwrap();
            let from = line.split_whitespace().nth(2).unwrap();
            from.rsplit(':').next().unwrap().parse().unwrap()
        })
        .collect();
    std::thread::spawn(move || lines.for_each(drop));
    (child, local)
}

/// Sends `text` to `port` on loopback, half-closes, and reads the answer to its end.
fn echo(port: u16, text: &[u8]) -> Vec<u8> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.write_all(text).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    answer
}

/// `kubectl port-forward` reaches what listens in the pod: a component's `wasi:sockets` echo
/// server and an HTTP handler container, one connection after another and several at once,
/// over the WebSocket tunnel kubectl speaks first and over SPDY when told to fall back; a port
/// nothing listens on is reported as kubectl reports the kubelet's refusal.
#[test]
fn port_forward_reaches_the_pods_listeners() {
    let (_tmp, agent) = Agent::start();
    agent.create(
        &PodYaml::new("listeners")
            .container(r#"{ name: echo, image: "{p2}", args: [echo-server, "0.0.0.0:7000"] }"#)
            .container(r#"{ name: web, image: "{http}", ports: [{containerPort: 8080}] }"#)
            .build(),
    );
    agent.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/listeners",
        "--timeout=30s",
    ]);
    let (mut kubectl, local) = port_forward(&agent, "pod/listeners", &["0:7000", "0:8080"], &[]);
    let (echo_port, web_port) = (local[0], local[1]);
    assert_eq!(echo(echo_port, b"first"), b"first");
    assert_eq!(echo(echo_port, b"second"), b"second");
    // 3 MB each way, through frames of 32 KiB.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    assert!(echo(echo_port, &big) == big, "the echo of 3 MB differs");
    // Two at once: the echo server answers them in turn, the handler together.
    let together: Vec<_> = [(echo_port, "one"), (echo_port, "two")]
        .into_iter()
        .map(|(port, text)| std::thread::spawn(move || (text, echo(port, text.as_bytes()))))
        .chain((0..2).map(|_| {
            std::thread::spawn(move || {
                let answer = echo(
                    web_port,
                    b"GET / HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n",
                );
                ("http", answer)
            })
        }))
        .collect();
    for t in together {
        let (text, answer) = t.join().unwrap();
        let answer = String::from_utf8_lossy(&answer);
        match text {
            "http" => assert!(answer.starts_with("HTTP/1.1 200"), "{answer}"),
            text => assert_eq!(answer, text),
        }
    }
    kubectl.kill().unwrap();
    kubectl.wait().unwrap();

    // The SPDY upgrade kubectl falls back to.
    let (mut kubectl, local) = port_forward(
        &agent,
        "pod/listeners",
        &["0:7000"],
        &[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")],
    );
    assert_eq!(echo(local[0], b"over spdy"), b"over spdy");
    kubectl.kill().unwrap();
    kubectl.wait().unwrap();

    // A port nothing listens on: the connection closes, kubectl says why and gives up.
    let (kubectl, local) = port_forward(&agent, "pod/listeners", &["0:7999"], &[]);
    assert_eq!(echo(local[0], b"anyone?"), b"");
    let out = kubectl.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error forwarding port 7999 to pod listeners")
            && stderr.contains("connection refused"),
        "{stderr}"
    );
}
