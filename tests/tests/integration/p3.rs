//! WASI 0.3 (p3) components: a command exporting `wasi:cli/run@0.3` runs on the component
//! model's async ABI with the same pod semantics as any container (output, env, exit codes,
//! TERM and KILL).

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasmpod_tests::{
    PodYaml, TestNode, container, log_lines, remove, running, wait_for, wait_terminated,
};

const LIMIT: Duration = Duration::from_secs(30);

/// Output through 0.3's stdio streams, its env and argv, and its exit codes: 0, 1 for an error
/// from `run`, 134 for a trap.
#[tokio::test]
async fn a_wasi_0_3_command_runs_with_pod_semantics() {
    let node = TestNode::new();
    let yaml = PodYaml::new("p3")
        .never()
        .container(
            r#"{ name: ok, image: "{p3}", env: [ { name: WHO, value: p3 } ],
                 args: [print, hello, eprint, oops, env, WHO, sleep, "50", args] }"#,
        )
        .container(r#"{ name: fails, image: "{p3}", args: [print, before, fail, print, after] }"#)
        .container(r#"{ name: traps, image: "{p3}", args: [trap] }"#)
        .build();
    let (timeline, status) = node.run(&yaml, LIMIT).await;
    assert_eq!(status.phase.as_deref(), Some("Failed"), "{timeline}");
    assert_eq!(timeline.exit_codes("ok"), [0], "{timeline}");
    assert_eq!(timeline.exit_codes("fails"), [1], "{timeline}");
    assert_eq!(timeline.exit_codes("traps"), [134], "{timeline}");
    let pod = node.start(&yaml.replace("name: p3", "name: p3-logs")).await;
    wait_for(&pod, LIMIT, |s| s.phase.as_deref() == Some("Failed")).await;
    assert_eq!(
        log_lines(&pod, "ok"),
        [
            "hello",
            "oops",
            "WHO=p3",
            "print hello eprint oops env WHO sleep 50 args"
        ]
    );
    assert_eq!(log_lines(&pod, "fails"), ["before"]);
    let traps = container(&pod.status(), "traps").clone();
    let message = traps
        .state
        .unwrap()
        .terminated
        .unwrap()
        .message
        .unwrap_or_default();
    assert!(message.contains("unreachable"), "{message}");
}

/// A 0.3 guest that computes forever, or waits on the async clock, stops at TERM's default
/// action (143) right away; deleting with no grace kills it (137).
#[tokio::test]
async fn a_wasi_0_3_command_stops_at_term_and_kill() {
    let node = TestNode::new();
    for (name, args, grace, code) in [
        ("spinning", "[spin]", Some(Duration::from_secs(20)), 143),
        (
            "sleeping",
            r#"[sleep, "60000"]"#,
            Some(Duration::from_secs(20)),
            143,
        ),
        ("killed", "[spin]", Some(Duration::ZERO), 137),
    ] {
        let yaml = PodYaml::new(name)
            .never()
            .container(&format!(
                r#"{{ name: main, image: "{{p3}}", args: {args} }}"#
            ))
            .build();
        let pod = node.start(&yaml).await;
        running(&pod, &["main"]).await;
        let deleted = Instant::now();
        pod.delete(grace);
        let exit = wait_terminated(&pod, "main", LIMIT).await;
        let took = deleted.elapsed();
        assert_eq!(exit.exit_code, code, "{name}: {exit:?}");
        assert!(
            took < Duration::from_secs(5),
            "{name} took {took:?} to stop"
        );
        pod.deleted().await;
    }
}

/// WASI 0.3 sockets are the pod's, as 0.2's are: a 0.3 server listens in the pod's port table,
/// so a `tcpSocket` probe turns the server ready, a sibling 0.3 container reaches it on
/// `localhost` (found through 0.3's name lookup), as does a 0.2 container, and the host through
/// its published port; UDP
/// datagrams go both ways between two sockets with their source addresses.
#[tokio::test]
async fn wasi_0_3_sockets_are_on_the_pod_network() {
    let node = TestNode::new();
    let host_port = wasmpod_tests::free_port();
    let yaml = PodYaml::new("p3-net")
        .never()
        .container(&format!(
            r#"{{ name: server, image: "{{p3}}", args: [tcp-echo, "7000"],
                  ports: [ {{ containerPort: 7000, hostPort: {host_port} }} ],
                  readinessProbe: {{ tcpSocket: {{ port: 7000 }}, periodSeconds: 1 }} }}"#
        ))
        .container(
            r#"{ name: client, image: "{p3}",
                 args: [tcp-send, localhost, "7000", hello, udp-pingpong, lookup, localhost] }"#,
        )
        .container(r#"{ name: p2, image: "{p2}", args: [connect, "127.0.0.1:7000", zero.two] }"#)
        .build();
    let pod = node.start(&yaml).await;
    let client = wait_terminated(&pod, "client", LIMIT).await;
    let lines = log_lines(&pod, "client");
    assert_eq!(client.exit_code, 0, "{lines:?}");
    assert_eq!(
        lines[0],
        "reply: echo: hello",
        "{:?}",
        log_lines(&pod, "server")
    );
    let pong = &lines[1];
    assert!(pong.starts_with("pong: ping from 127.0.0.1:"), "{pong}");
    assert_eq!(lines[2], "127.0.0.1 ::1");
    assert_eq!(log_lines(&pod, "server"), ["listening on 7000"]);
    // A 0.2 client of the same pod reaches the 0.3 server.
    assert_eq!(wait_terminated(&pod, "p2", LIMIT).await.exit_code, 0);
    let reply = log_lines(&pod, "p2");
    assert_eq!(reply, ["reply echo: zero.two from 127.0.0.1:7000"]);
    // Ready through its `tcpSocket` probe (the pod is not: its client has ended).
    wait_for(&pod, LIMIT, |s| container(s, "server").ready).await;
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", host_port))
        .await
        .unwrap();
    conn.write_all(b"from the host").await.unwrap();
    conn.shutdown().await.unwrap();
    let mut reply = String::new();
    let read = conn.read_to_string(&mut reply);
    tokio::time::timeout(LIMIT, read).await.unwrap().unwrap();
    assert_eq!(reply, "echo: from the host");
    remove(&pod).await;
}

/// With the node's egress denied, a 0.3 connect to an address outside the node fails with
/// `access-denied`, and a name only the host could resolve is `name-unresolvable`; a multicast
/// address is no TCP peer (`invalid-argument`).
#[tokio::test]
async fn wasi_0_3_sockets_follow_the_egress_policy() {
    let node = TestNode::with(|o| o.egress(wasmpod::Egress::Deny));
    let yaml = PodYaml::new("p3-egress")
        .never()
        .container(
            r#"{ name: c, image: "{p3}",
                 args: [tcp-send, 192.0.2.1, "80", x, lookup, example.com,
                        tcp-send, 224.0.0.1, "80", x] }"#,
        )
        .build();
    let pod = node.start(&yaml).await;
    let c = wait_terminated(&pod, "c", LIMIT).await;
    let lines = log_lines(&pod, "c");
    assert_eq!(c.exit_code, 0, "{lines:?}");
    assert_eq!(
        lines,
        [
            "error: connect: ErrorCode::AccessDenied",
            "error: ErrorCode::NameUnresolvable",
            "error: connect: ErrorCode::InvalidArgument"
        ]
    );
}
