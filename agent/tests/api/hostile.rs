//! The agent's API against hostile clients: deep objects, body bombs, token-less connections,
//! unread watches, and what only the node may set. Without these bounds the agent crashes,
//! grows by gigabytes, or stops answering those with the token.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{ANSWER, CONFIG_MAPS, Node, config_map};

/// A small YAML object of `kind` whose aliases expand to 10^12 values.
fn alias_bomb(kind: &str) -> String {
    let mut bomb = format!(
        "apiVersion: v1\nkind: {kind}\nmetadata: {{name: bomb}}\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    );
    for i in 1..12 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        bomb += &format!("a{i}: &a{i} [{refs}]\n");
    }
    bomb
}

/// Objects nested ever deeper by patches are refused at the depth bound, with a `Status`; the
/// agent keeps serving, and what it acknowledged reads back after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_objects_are_refused_and_nothing_recurses_on_them() {
    let mut node = Node::start().await;
    let c = node.client.clone();
    assert_eq!(c.post(CONFIG_MAPS, &config_map("deep")).await.code, 201);
    let path = format!("{CONFIG_MAPS}/deep");
    // Each JSON patch adds a value 40 levels deep under the last one's, its path growing: taken
    // to thousands of levels, anything recursing on the object overflows the agent's stack.
    let mut refused = None;
    let mut pointer = String::from("/extra");
    for round in 0..200 {
        let mut value = json!("leaf");
        for _ in 0..40 {
            value = json!({ "n": value });
        }
        let op = json!([{"op": "add", "path": pointer, "value": value}]);
        let answer = c.patch(&path, "application/json-patch+json", &op).await;
        if answer.code != 200 {
            refused = Some((round, answer));
            break;
        }
        pointer += &"/n".repeat(40);
    }
    let (round, answer) = refused.expect("deeper and deeper objects were all taken");
    assert!(round <= 2, "refused only at round {round}");
    assert!((400..500).contains(&answer.code), "{}", answer.body);
    assert_eq!(answer.body["kind"], "Status", "{}", answer.body);
    assert!(
        answer.body["message"].as_str().unwrap().contains("levels"),
        "{}",
        answer.body
    );
    // JSON patches that copy an object into itself again and again (a level deeper each
    // time): refused at the bound.
    let copies: Vec<Value> = (0..100)
        .map(|_| json!({"op": "copy", "from": "/data", "path": "/data/d"}))
        .collect();
    let answer = c.patch(&path, "application/json-patch+json", &copies).await;
    assert_eq!(answer.code, 422, "{}", answer.body);
    assert_eq!(c.get(&path).await.code, 200);
    node.restart().await;
    let answer = node.client.get(&path).await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    assert_eq!(answer.body["data"]["a"], "b");
}

/// A YAML alias bomb, whatever way it is sent; copy patches that double an object; bodies that
/// are not objects. Each is answered at once with a `Status`, the process stays small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_bombs_are_refused_at_once() {
    let node = Node::start().await;
    let c = node.client.clone();
    let bomb = alias_bomb("ConfigMap");
    let before = wasmpod_tests::rss_bytes();
    assert_eq!(c.post(CONFIG_MAPS, &config_map("target")).await.code, 201);
    let target = format!("{CONFIG_MAPS}/target");
    let cases = [
        ("POST", CONFIG_MAPS.to_owned(), "application/yaml"),
        (
            "PATCH",
            format!("{CONFIG_MAPS}/bomb"),
            "application/apply-patch+yaml",
        ),
        ("PATCH", target.clone(), "application/merge-patch+json"),
        (
            "PATCH",
            target.clone(),
            "application/strategic-merge-patch+json",
        ),
        ("PATCH", target.clone(), "application/apply-patch+yaml"),
    ];
    for (method, path, content_type) in cases {
        let start = Instant::now();
        let answer = c.send(method, &path, content_type, bomb.as_bytes()).await;
        assert!(
            (400..500).contains(&answer.code),
            "{method} {path} {content_type}: {} {}",
            answer.code,
            answer.body
        );
        assert_eq!(answer.body["kind"], "Status");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{content_type}: {:?}",
            start.elapsed()
        );
    }
    // A few dozen copies each doubling the object.
    let big = json!({"data": {"v": "x".repeat(64 << 10)}});
    let answer = c.patch(&target, "application/merge-patch+json", &big).await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    // Each copies the whole object into itself.
    let doubling: Vec<Value> = (0..40)
        .map(|i| json!({"op": "copy", "from": "", "path": format!("/copy{i}")}))
        .collect();
    let answer = c
        .patch(&target, "application/json-patch+json", &doubling)
        .await;
    assert_eq!(answer.code, 422, "{}", answer.body["message"]);
    // Server-side apply of bodies that are not objects.
    for body in ["[1]", "\"x\"", "{\"metadata\": []}", "7", ""] {
        let answer = c
            .send(
                "PATCH",
                &format!("{CONFIG_MAPS}/fresh"),
                "application/apply-patch+yaml",
                body.as_bytes(),
            )
            .await;
        assert_eq!(answer.code, 400, "{body}: {}", answer.body);
        assert_eq!(answer.body["kind"], "Status", "{body}");
    }
    let grown = wasmpod_tests::rss_bytes().saturating_sub(before);
    assert!(grown < 256 << 20, "the agent grew by {} MiB", grown >> 20);
    assert_eq!(c.get(&target).await.code, 200);
}

/// An alias bomb in the manifests directory is refused at once; the valid manifest beside it
/// runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bomb_among_static_manifests_does_not_keep_the_others_out() {
    let manifests = tempfile::tempdir().unwrap();
    let bomb = alias_bomb("Pod");
    std::fs::write(manifests.path().join("bomb.yaml"), bomb).unwrap();
    std::fs::write(
        manifests.path().join("web.yaml"),
        wasmpod_tests::fill(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - {name: c, image: \"{p1}\", args: [sleep, \"60000\"]}\n",
        ),
    )
    .unwrap();
    let dir = manifests.path().to_owned();
    let node = Node::start_with(move |o| o.manifests(dir.clone())).await;
    let start = Instant::now();
    loop {
        let answer = node.client.get("/api/v1/namespaces/default/pods").await;
        let names: Vec<&str> = answer.body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.pointer("/metadata/name")?.as_str())
            .collect();
        if names.iter().any(|n| n.starts_with("web-")) {
            assert!(!names.iter().any(|n| n.starts_with("bomb")), "{names:?}");
            break;
        }
        assert!(
            start.elapsed() < ANSWER,
            "the valid manifest never ran: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// This process's soft limit on open descriptors (a node raises it to the hard limit).
fn descriptors() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

/// 1,100 connections without the token that keep asking (and reconnect when closed), and 400
/// more that never send a request: those with the token are served all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_without_the_token_do_not_starve_those_with_it() {
    let node = Node::start().await;
    assert!(descriptors() > 4000, "the test needs 4,000 descriptors");
    let c = node.client.clone();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut attackers = Vec::new();
    for _ in 0..1100 {
        let (c, stop) = (c.clone(), stop.clone());
        attackers.push(tokio::spawn(async move {
            let head = c.head("GET", "/api/v1/pods", "application/json", 0, false);
            let head = head.replace("Connection: close\r\n", "");
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok(mut tls) = c.connect().await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                // Ask, read the 401, ask again on the same connection while it stays open.
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if tls.write_all(head.as_bytes()).await.is_err() {
                        break;
                    }
                    let mut buf = [0u8; 4096];
                    match tokio::time::timeout(Duration::from_secs(2), tls.read(&mut buf)).await {
                        Ok(Ok(n)) if n > 0 => {}
                        _ => break,
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }));
    }
    // Connected all at once, each given 2 s for its handshake.
    let connecting: Vec<_> = (0..400)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(
                async move { tokio::time::timeout(Duration::from_secs(2), c.connect()).await },
            )
        })
        .collect();
    let mut idle = Vec::new();
    for attempt in connecting {
        if let Ok(Ok(Ok(tls))) = attempt.await {
            idle.push(tls);
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    for i in 0..10 {
        let start = Instant::now();
        // A connection not yet authenticated may lose its slot to newer ones (oldest first);
        // client-go then sends the GET again, and so does this client.
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            c.get_as_client_go("/api/v1/namespaces"),
        )
        .await
        .unwrap_or_else(|_| panic!("request {i} with the token was not served"));
        assert_eq!(answer.code, 200);
        assert!(start.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A token-less request is answered 401 and its connection closed.
    let mut tls = c.connect().await.unwrap();
    let head = c
        .head("GET", "/api/v1/pods", "application/json", 0, false)
        .replace("Connection: close\r\n", "");
    tls.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut answer))
        .await
        .expect("the connection is closed after a 401")
        .ok();
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 401"));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for a in attackers {
        a.abort();
    }
}

/// A watch whose client reads nothing is ended once what waits for it has passed the bound for
/// a few seconds, rather than holding a copy of every change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_watch_is_ended() {
    let node = Node::start().await;
    let c = node.client.clone();
    let mut watch = c.connect().await.unwrap();
    let head = c.head(
        "GET",
        &format!("{CONFIG_MAPS}?watch=1"),
        "application/json",
        0,
        true,
    );
    watch.write_all(head.as_bytes()).await.unwrap();
    // 40 changes of 1 MiB each: 40 MiB that the watch does not read.
    assert_eq!(c.post(CONFIG_MAPS, &config_map("big")).await.code, 201);
    for i in 0..40 {
        let patch = json!({"data": {"v": format!("{i}{}", "x".repeat(1 << 20))}});
        let answer = c
            .patch(
                &format!("{CONFIG_MAPS}/big"),
                "application/merge-patch+json",
                &patch,
            )
            .await;
        assert_eq!(answer.code, 200);
    }
    // Nothing read for longer than the agent waits for a watch to take its events (5 s).
    tokio::time::sleep(Duration::from_secs(7)).await;
    // What the watch gets is cut short: it ends well before the 40 MiB.
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    let read = async {
        loop {
            match watch.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
    };
    tokio::time::timeout(ANSWER, read)
        .await
        .expect("the unread watch was never ended");
    assert!(got < 24 << 20, "the watch held {} MiB", got >> 20);
}

/// What only the node sets: a pod from the API may not carry the mirror annotation (it would
/// be neither changeable nor deletable), and server-side apply creates nothing in a namespace
/// that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_only_the_node_sets_is_refused() {
    let mut node = Node::start().await;
    let c = node.client.clone();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "sneaky", "annotations": {"kubernetes.io/config.mirror": "x"}},
        "spec": {"containers": [{"name": "c", "image": wasmpod_tests::guests::AGNHOST_P1}]},
    });
    let answer = c.post("/api/v1/namespaces/default/pods", &pod).await;
    assert_eq!(answer.code, 403, "{}", answer.body);
    for ns in ["nowhere", "..", "a%00b", &"n".repeat(300)] {
        let answer = c
            .send(
                "PATCH",
                &format!("/api/v1/namespaces/{ns}/configmaps/x"),
                "application/apply-patch+yaml",
                b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
            )
            .await;
        assert_eq!(answer.code, 404, "{ns}: {}", answer.body);
    }
    // The kubeconfig is written once, not at every start (a full disk must not keep the agent
    // from starting again).
    let kubeconfig = node.agent.as_ref().unwrap().kubeconfig().to_owned();
    let written = std::fs::metadata(&kubeconfig).unwrap().modified().unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    node.restart().await;
    assert_eq!(
        std::fs::metadata(&kubeconfig).unwrap().modified().unwrap(),
        written
    );
}
