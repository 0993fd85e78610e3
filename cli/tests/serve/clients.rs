//! Pods and programs as API clients: service-account tokens and the `kube-api-access` volume,
//! projected tokens, the `kubernetes` Service, and the official Python, JavaScript and Rust
//! clients.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmpod_tests::{PodYaml, fill};

use super::support::{Agent, LIMIT};

/// Service-account tokens: `kubectl create token` (the TokenRequest API) gives a token the agent
/// takes for its service account, which may read its namespace but for Secrets and nothing
/// else; a pod exported from a cluster with its `kube-api-access-*` volume runs as it is and
/// finds there a token bound to it, the agent's CA and its namespace; a bound token dies with
/// its pod.
#[test]
fn service_account_tokens_and_kube_api_access() {
    let (_tmp, agent) = Agent::start();
    let token = agent.ok(&["create", "token", "default", "--duration=10m"]);
    let token = token.trim();
    let with = |token: &str, args: &[&str]| {
        let mut all = vec!["--token", token];
        all.extend(args);
        agent.kubectl(&all)
    };
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
    let read = with(token, &["get", "pods"]);
    assert!(read.status.success(), "{}", stderr(&read));
    for (args, refused) in [
        (
            &["get", "secrets"][..],
            r#"cannot list resource "secrets" in API group "" in the namespace "default""#,
        ),
        (
            &["run", "x", "--image=x.wasm"][..],
            r#"cannot create resource "pods""#,
        ),
        (
            &["get", "pods", "-n", "kube-system"][..],
            r#"in the namespace "kube-system""#,
        ),
        (
            &["get", "nodes"][..],
            r#"cannot list resource "nodes" in API group "" at the cluster scope"#,
        ),
    ] {
        let out = with(token, args);
        assert!(
            !out.status.success() && stderr(&out).contains(refused),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains(r#"User "system:serviceaccount:default:default""#));
    }
    // For another audience: not a token for the API.
    let vault = agent.ok(&["create", "token", "default", "--audience=vault"]);
    assert!(stderr(&with(vault.trim(), &["get", "pods"])).contains("Unauthorized"));
    let short = agent.fails(&["create", "token", "default", "--duration=1m"]);
    assert!(
        short.contains("may not specify a duration less than 10 minutes"),
        "{short}"
    );
    let missing = agent.fails(&["create", "token", "nobody"]);
    assert!(
        missing.contains(r#"serviceaccounts "nobody" not found"#),
        "{missing}"
    );

    // The volume every pod of a cluster has, as `kubectl get pod -o yaml` shows it.
    let dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    agent.create(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{ name: reader }}
spec:
  serviceAccountName: default
  containers:
  - name: c
    image: "{{p1}}"
    args: [cat, {dir}/token, cat, {dir}/namespace, cat, {dir}/ca.crt, sleep, "600000"]
    volumeMounts: [ {{ name: kube-api-access-x1y2z, mountPath: {dir}, readOnly: true }} ]
  volumes:
  - name: kube-api-access-x1y2z
    projected:
      defaultMode: 420
      sources:
      - serviceAccountToken: {{ expirationSeconds: 3607, path: token }}
      - configMap: {{ name: kube-root-ca.crt, items: [ {{ key: ca.crt, path: ca.crt }} ] }}
      - downwardAPI: {{ items: [ {{ path: namespace, fieldRef: {{ apiVersion: v1, fieldPath: metadata.namespace }} }} ] }}
"#
    ));
    let log = agent.until(&["logs", "reader"], LIMIT, |l| {
        l.contains("END CERTIFICATE")
    });
    let mut lines = log.lines();
    let pod_token = lines.next().unwrap().to_owned();
    assert_eq!(lines.next(), Some("default"), "{log}");
    assert_eq!(lines.next(), Some("-----BEGIN CERTIFICATE-----"), "{log}");
    let read = with(&pod_token, &["get", "pod", "reader", "-o", "name"]);
    assert_eq!(
        String::from_utf8_lossy(&read.stdout).trim(),
        "pod/reader",
        "{}",
        stderr(&read)
    );
    let bound = agent.ok(&[
        "create",
        "token",
        "default",
        "--bound-object-kind=Pod",
        "--bound-object-name=reader",
    ]);
    assert!(with(bound.trim(), &["get", "pods"]).status.success());
    agent.ok(&["delete", "pod", "reader", "--grace-period=0", "--force"]);
    agent.until(&["get", "pods", "-o", "name"], LIMIT, |t| {
        t.trim().is_empty()
    });
    // Bound to the pod: gone with it. The unbound token lives on.
    for gone in [pod_token.as_str(), bound.trim()] {
        assert!(stderr(&with(gone, &["get", "pods"])).contains("Unauthorized"));
    }
    assert!(with(token, &["get", "pods"]).status.success());
    // A deleted service account's tokens die with it, and stay dead when the account is made
    // again (by the service account controller, for `default`): the token names the uid.
    let uid = |name: &str| agent.ok(&["get", "sa", name, "-o", "jsonpath={.metadata.uid}"]);
    let before = uid("default");
    agent.ok(&["delete", "serviceaccount", "default"]);
    assert!(stderr(&with(token, &["get", "pods"])).contains("Unauthorized"));
    let after = agent.until(&["get", "sa", "-o", "name"], LIMIT, |t| {
        t.contains("serviceaccount/default")
    });
    assert!(!after.is_empty());
    assert_ne!(uid("default"), before);
    assert!(stderr(&with(token, &["get", "pods"])).contains("Unauthorized"));
    agent.ok(&["create", "sa", "builder"]);
    let builder = agent.ok(&["create", "token", "builder"]);
    assert!(with(builder.trim(), &["get", "pods"]).status.success());
    agent.ok(&["delete", "sa", "builder"]);
    agent.ok(&["create", "sa", "builder"]);
    assert!(stderr(&with(builder.trim(), &["get", "pods"])).contains("Unauthorized"));
    let fresh = agent.ok(&["create", "token", "default"]);
    assert!(with(fresh.trim(), &["get", "pods"]).status.success());
}

/// A projected token for another audience is for that audience alone, for the time asked: the
/// API refuses it. A pod naming a service account that does not exist is refused; one whose
/// account is deleted while it runs is not lost at the agent's restart.
#[test]
fn projected_tokens_mean_only_what_they_say() {
    use base64::Engine as _;
    let (tmp, agent) = Agent::start();
    let refused = agent.fails(&[
        "run",
        "nobody",
        "--image=x.wasm",
        "--overrides",
        r#"{"spec": {"serviceAccountName": "ghost"}}"#,
    ]);
    assert!(
        refused.contains("error looking up service account default/ghost")
            && refused.contains(r#"serviceaccount "ghost" not found"#),
        "{refused}"
    );
    agent.create(
        r#"apiVersion: v1
kind: Pod
metadata: { name: vault-client }
spec:
  containers:
  - name: c
    image: "{p1}"
    args: [cat, /vault/token, cat, /api/token, sleep, "600000"]
    volumeMounts: [ { name: vault, mountPath: /vault }, { name: api, mountPath: /api } ]
  volumes:
  - name: vault
    projected:
      sources: [ { serviceAccountToken: { audience: vault, expirationSeconds: 600, path: token } } ]
  - name: api
    projected:
      sources: [ { serviceAccountToken: { path: token } } ]
"#,
    );
    let log = agent.until(&["logs", "vault-client"], LIMIT, |l| l.lines().count() >= 2);
    let tokens: Vec<&str> = log.lines().collect();
    let claims = |token: &str| -> Value {
        let body = token.split('.').nth(1).unwrap();
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(body)
            .unwrap();
        serde_json::from_slice(&json).unwrap()
    };
    let (vault, api) = (claims(tokens[0]), claims(tokens[1]));
    assert_eq!(vault["aud"], serde_json::json!(["vault"]), "{vault}");
    assert_eq!(
        vault["exp"].as_i64().unwrap() - vault["iat"].as_i64().unwrap(),
        600
    );
    assert_eq!(
        api["aud"],
        serde_json::json!(["https://kubernetes.default.svc.cluster.local"])
    );
    assert_eq!(
        api["exp"].as_i64().unwrap() - api["iat"].as_i64().unwrap(),
        3600
    );
    assert_ne!(vault["kubernetes.io"]["serviceaccount"]["uid"], "");
    let as_vault = agent.kubectl(&["--token", tokens[0], "get", "pods"]);
    assert!(
        String::from_utf8_lossy(&as_vault.stderr).contains("Unauthorized"),
        "{as_vault:?}"
    );
    let as_api = agent.kubectl(&["--token", tokens[1], "get", "pods"]);
    assert!(as_api.status.success(), "{as_api:?}");

    // A pod whose account is deleted while it runs still runs again after the agent restarts
    // (its token, for an account that is gone, is refused by the API).
    agent.ok(&["create", "sa", "worker"]);
    agent.create(
        r#"apiVersion: v1
kind: Pod
metadata: { name: worker }
spec:
  serviceAccountName: worker
  containers:
  - { name: c, image: "{p1}", args: [cat, /t/token, sleep, "600000"], volumeMounts: [ { name: t, mountPath: /t } ] }
  volumes:
  - { name: t, projected: { sources: [ { serviceAccountToken: { path: token } } ] } }
"#,
    );
    agent.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/worker",
        "--timeout=30s",
    ]);
    agent.ok(&["delete", "sa", "worker"]);
    agent.kill();
    let agent = Agent::start_in(tmp.path(), &[]);
    // Its container runs again, counting the instance the kill lost.
    let state = "jsonpath={.status.containerStatuses[0].restartCount} \
                 {.status.containerStatuses[0].ready}";
    agent.until(&["get", "pod", "worker", "-o", state], LIMIT, |t| {
        t == "1 true"
    });
    let token = agent.until(&["logs", "worker"], LIMIT, |l| !l.trim().is_empty());
    let out = agent.kubectl(&["--token", token.trim(), "get", "pods"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Unauthorized"),
        "{out:?}"
    );
}

/// Pods reach the node's API as a cluster's pods do: the `kubernetes` Service's address and
/// port in their environment, a connection from the pod network to 10.96.0.1:443 reaching the
/// agent, whose certificate names that address and `kubernetes.default.svc` under the CA a
/// pod's `kube-api-access` volume holds — what in-cluster configuration needs.
/// The pod the client tests drive: `server` answers HTTP on 8080, `shell` is there to exec in,
/// `echo` (with `stdin: true`) to attach to.
fn client_pod(agent: &Agent) {
    agent.create(
        &PodYaml::new("web")
            .container(
                r#"{ name: server, image: "{p2}", args: [http-server, "0.0.0.0:8080", "200"] }"#,
            )
            .container(r#"{ name: shell, image: "{p1}", args: [sleep, "600000"] }"#)
            .container(
                r#"{ name: echo, image: "{p1}", args: [print, started, stdin], stdin: true }"#,
            )
            .build(),
    );
    agent.ok(&["wait", "--for=condition=Ready", "pod/web", "--timeout=30s"]);
}

/// The script `name` of `tests/clients/`.
fn client_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/clients")
        .join(name)
}

/// Runs a client program (`command`, bounded to two minutes) against the agent, with `env`:
/// the JSON object it printed of what each call gave.
fn run_client(
    agent: &Agent,
    command: &[&std::ffi::OsStr],
    env: &[(&str, &std::ffi::OsStr)],
) -> Value {
    let out = Command::new("timeout")
        .arg("120")
        .args(command)
        .env("KUBECONFIG", &agent.kubeconfig)
        .env("HOME", &agent.dir)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        agent.log()
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The Python interpreter of the venv with the official client (`tools/test-deps.sh` makes it).
fn python() -> PathBuf {
    let venv = std::env::var_os("WASMPOD_TEST_VENV").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/wasmpod-test-venv"),
        PathBuf::from,
    );
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: tools/test-deps.sh makes the venv with the Kubernetes client",
        python.display()
    );
    python
}

/// The official Python client (`kubernetes` 37.0.2), as a user's script drives the agent: exec
/// with stdin sent as text frames and closed with v5's close of channel 0, exec without stdin,
/// attach with stdin, port-forward over the WebSocket channel protocol (a port served, a port refused on its error
/// channel), logs (tail with timestamps, follow), the dynamic client through discovery, and a
/// missing pod as a Status.
#[test]
fn the_python_client_execs_and_forwards_ports() {
    let (_tmp, agent) = Agent::start();
    client_pod(&agent);
    let script = client_script("python_client.py");
    let seen = run_client(&agent, &[python().as_os_str(), script.as_os_str()], &[]);
    assert_eq!(seen["exec_protocol"], "v5.channel.k8s.io", "{seen:#}");
    assert_eq!(
        seen["exec_stdout"], "read: first\nread: second\nstdin ended after 2 lines\n",
        "{seen:#}"
    );
    assert_eq!(seen["exec_returncode"], 0, "{seen:#}");
    assert_eq!(seen["exec_once"], "once\n", "{seen:#}");
    // Attach: the container's output from its start, then its answer to the session's stdin.
    assert_eq!(
        seen["attach_stdout"], "started\nread: from python\n",
        "{seen:#}"
    );
    assert_eq!(seen["forward"], "HTTP/1.1 200 X", "{seen:#}");
    let refused = seen["refused"].as_str().unwrap_or_default();
    assert!(
        refused.starts_with("error forwarding port 9999 to pod web, uid ")
            && refused.contains("refused"),
        "{seen:#}"
    );
    assert_eq!(seen["missing"]["status"], 404, "{seen:#}");
    assert_eq!(seen["missing"]["reason"], "NotFound", "{seen:#}");
    // Logs: the last line (the request through the port) after its RFC 3339 time; a followed
    // log from its start. The dynamic client finds ConfigMaps through discovery.
    let tail = seen["log_tail"].as_str().unwrap_or_default();
    let (time, line) = tail.split_once(' ').unwrap_or_default();
    assert!(time.ends_with('Z') && time.contains('T'), "{seen:#}");
    assert!(line.starts_with("request GET /python"), "{seen:#}");
    assert_eq!(
        seen["log_follow_first"], "listening 0.0.0.0:8080\n",
        "{seen:#}"
    );
    assert_eq!(seen["dynamic_get"], "b", "{seen:#}");
    assert_eq!(
        seen["dynamic_list"],
        serde_json::json!(["from-python", "kube-root-ca.crt"]),
        "{seen:#}"
    );
    // The server saw the request that came through the forwarded port.
    assert!(
        agent
            .ok(&["logs", "web", "-c", "server"])
            .contains("request GET /python HTTP/1.1"),
        "{}",
        agent.ok(&["logs", "web", "-c", "server"])
    );
}

/// The official JavaScript client (`@kubernetes/client-node` 1.4.0; 2.0 needs Node 22, whose
/// zstd its HTTP client takes) under Node: a typed list, a watch from the list's
/// resourceVersion, exec with stdin (binary frames, closed by v5), attach with stdin,
/// port-forward over the
/// WebSocket channel protocol, and a missing pod as a Status.
#[test]
fn the_javascript_client_lists_watches_execs_and_forwards() {
    let node_dir = std::env::var_os("WASMPOD_TEST_NODE").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/wasmpod-test-node"),
        PathBuf::from,
    );
    let client = node_dir.join("node_modules/@kubernetes/client-node/dist/index.js");
    assert!(
        client.exists(),
        "{} is missing: tools/test-deps.sh installs the JavaScript client",
        client.display()
    );
    let (_tmp, agent) = Agent::start();
    client_pod(&agent);
    let script = client_script("js_client.mjs");
    let seen = run_client(
        &agent,
        &["node".as_ref(), script.as_os_str()],
        &[("WASMPOD_K8S_JS", client.as_os_str())],
    );
    assert_eq!(seen["pods"], serde_json::json!(["web"]), "{seen:#}");
    assert_eq!(seen["watch"], "ADDED from-js", "{seen:#}");
    assert_eq!(seen["exec_status"], "Success", "{seen:#}");
    assert_eq!(
        seen["exec_stdout"], "read: first\nread: second\nstdin ended after 2 lines\n",
        "{seen:#}"
    );
    assert_eq!(
        seen["attach_stdout"], "started\nread: from javascript\n",
        "{seen:#}"
    );
    assert_eq!(seen["forward"], "HTTP/1.1 200 X", "{seen:#}");
    assert_eq!(seen["missing"]["code"], 404, "{seen:#}");
    assert_eq!(seen["missing"]["reason"], "NotFound", "{seen:#}");
    assert!(
        agent
            .ok(&["logs", "web", "-c", "server"])
            .contains("request GET /javascript HTTP/1.1")
    );
}

/// kube-rs (`kube` 5, what a Rust program reaches for), as a controller drives the agent: a
/// typed list, `kube::runtime::watcher` with a reflector's store following a pod created after
/// it started, exec with stdin, port-forward over the WebSocket channel protocol, and a missing
/// pod as the API's `Status`.
#[test]
fn kube_rs_lists_reflects_execs_and_forwards() {
    use futures_util::TryStreamExt;
    use kube::api::{Api, AttachParams, PostParams};
    use kube::config::{KubeConfigOptions, Kubeconfig};
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use wasmpod::k8s_openapi::api::core::v1::Pod;

    let (_tmp, agent) = Agent::start();
    client_pod(&agent);
    // The bookmark that ends a streaming list's initial events, as the API server sends it;
    // without bookmarks a streaming list is refused.
    let streamed = agent.ok(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/pods?watch=1&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1",
    ]);
    let events: Vec<Value> = streamed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 2, "{streamed}");
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[1]["type"], "BOOKMARK");
    assert_eq!(
        events[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let refused = agent.fails(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/pods?watch=1&sendInitialEvents=true",
    ]);
    assert!(refused.contains("allowWatchBookmarks"), "{refused}");
    let second: Pod = typed(&fill(
        &PodYaml::new("second")
            .container(r#"{ name: c, image: "{p1}", args: [sleep, "600000"] }"#)
            .build(),
    ));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let kubeconfig = Kubeconfig::read_from(&agent.kubeconfig).unwrap();
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let limit = Duration::from_secs(30);

        let listed = pods.list(&Default::default()).await.unwrap();
        let names: Vec<_> = listed
            .items
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["web"]);

        // A reflector's store follows the watcher: the pod created after it started arrives.
        let (store, writer) = reflector::store::<Pod>();
        let follow = reflector(writer, watcher(pods.clone(), watcher::Config::default()))
            .applied_objects()
            .try_for_each(|_| async { Ok(()) });
        let follow = tokio::spawn(follow);
        tokio::time::timeout(limit, store.wait_until_ready())
            .await
            .unwrap()
            .unwrap();
        pods.create(&PostParams::default(), &second).await.unwrap();
        let start = Instant::now();
        while store.state().len() < 2 {
            assert!(
                start.elapsed() < limit,
                "the reflector never saw the second pod"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        follow.abort();

        // A streaming list (`sendInitialEvents` with bookmarks): the watcher's first state ends
        // at the server's `k8s.io/initial-events-end` bookmark, and holds both pods.
        let mut streamed = std::pin::pin!(watcher(
            pods.clone(),
            watcher::Config::default().streaming_lists()
        ));
        let mut initial = Vec::new();
        loop {
            let event = tokio::time::timeout(limit, streamed.try_next())
                .await
                .expect("the streaming list never ended its initial events")
                .unwrap()
                .unwrap();
            match event {
                watcher::Event::InitApply(pod) => initial.push(pod.metadata.name.unwrap()),
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
        initial.sort();
        assert_eq!(initial, ["second", "web"]);

        // exec with stdin: what it read, and its end as a Status.
        let params = AttachParams::default()
            .container("shell")
            .stdin(true)
            .stderr(false);
        let mut attached = pods
            .exec("web", ["agnhost", "stdin"], &params)
            .await
            .unwrap();
        let mut stdin = attached.stdin().unwrap();
        stdin.write_all(b"first\nsecond\n").await.unwrap();
        stdin.shutdown().await.unwrap();
        drop(stdin);
        let mut stdout = String::new();
        let mut out = attached.stdout().unwrap();
        tokio::time::timeout(limit, out.read_to_string(&mut stdout))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            stdout,
            "read: first\nread: second\nstdin ended after 2 lines\n"
        );
        let status = attached.take_status().unwrap().await.unwrap();
        assert_eq!(status.status.as_deref(), Some("Success"), "{status:?}");

        // port-forward
        let mut forward = pods.portforward("web", &[8080]).await.unwrap();
        let mut stream = forward.take_stream(8080).unwrap();
        stream
            .write_all(b"GET /rust HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tokio::time::timeout(limit, stream.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "the forwarded connection ended: {answer:?}");
            answer.extend_from_slice(&buf[..n]);
        }
        assert!(answer.starts_with(b"HTTP/1.1 200 X\r\n"), "{answer:?}");
        drop(stream);
        forward.abort();

        match pods.get("nowhere").await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 404);
                assert_eq!(status.reason, "NotFound");
            }
            other => panic!("a missing pod: {other:?}"),
        }
    });
    assert!(
        agent
            .ok(&["logs", "web", "-c", "server"])
            .contains("request GET /rust HTTP/1.1")
    );
}

/// A typed object from YAML text, read as wasmpod reads it.
fn typed<T: wasmpod::k8s_openapi::serde::de::DeserializeOwned>(yaml: &str) -> T {
    let doc = wasmpod::read_documents(yaml.as_bytes()).unwrap().remove(0);
    serde_json::from_value(doc).unwrap()
}

#[test]
fn pods_reach_the_api_as_the_kubernetes_service() {
    let (_tmp, agent) = Agent::start();
    agent.create(
        &PodYaml::new("incluster")
            .container(
                r#"{ name: c, image: "{p2}", args: [env, KUBERNETES_SERVICE_HOST, env, KUBERNETES_SERVICE_PORT, connect, "10.96.0.1:443", "not TLS", sleep, "600000"] }"#,
            )
            .build(),
    );
    let log = agent.until(&["logs", "incluster"], LIMIT, |l| l.contains("reply"));
    assert!(
        log.starts_with("KUBERNETES_SERVICE_HOST=10.96.0.1\nKUBERNETES_SERVICE_PORT=443\n"),
        "{log}"
    );
    // The agent's TLS server answered (an alert for what is not TLS), on its own address.
    let kubeconfig = std::fs::read_to_string(&agent.kubeconfig).unwrap();
    let server = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://"))
        .unwrap();
    assert!(log.contains(&format!("from {server}")), "{log}");

    // What an in-cluster client does over that connection, done here with curl pinned to the
    // agent's address: the certificate is checked for the Service's address and name.
    let ca = agent.dir.join("ca.crt");
    let data = agent.ok(&[
        "config",
        "view",
        "--raw",
        "-o",
        "jsonpath={.clusters[0].cluster.certificate-authority-data}",
    ]);
    let pem = Command::new("base64")
        .arg("-d")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().unwrap().write_all(data.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    std::fs::write(&ca, pem.stdout).unwrap();
    let token = agent.ok(&["create", "token", "default"]);
    for host in ["10.96.0.1", "kubernetes.default.svc"] {
        let out = Command::new("curl")
            .args(["-sS", "--fail", "--cacert"])
            .arg(&ca)
            .arg("--connect-to")
            .arg(format!("{host}:443:{server}"))
            .arg("-H")
            .arg(format!("Authorization: Bearer {}", token.trim()))
            .arg(format!("https://{host}/api/v1/namespaces/default/pods"))
            .output()
            .unwrap();
        let body = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && body.contains("\"incluster\""),
            "{host}: {body}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
