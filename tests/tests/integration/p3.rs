//! WASI 0.3 (p3) components: a command exporting `wasi:cli/run@0.3` runs on the component
//! model's async ABI with the same pod semantics as any container (output, env, exit codes,
//! TERM and KILL).

use std::time::{Duration, Instant};

use wasmpod_tests::{PodYaml, TestNode, container, log_lines, wait_for, wait_terminated};

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
        wait_for(&pod, LIMIT, |s| wasmpod_tests::is_running(s, "main")).await;
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
