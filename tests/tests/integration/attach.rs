//! A container's stdin (`stdin: true`, `stdinOnce`): what attachers write reaches the guest,
//! its end reaches it as end of file, and `exec` commands read a stdin of their own
//! (`PodHandle::attach_stdin`, `PodHandle::exec_with_stdin`: `kubectl attach -i`, `kubectl
//! run -i`, `kubectl exec -i`).

use std::time::Duration;

use wasmpod::LogOptions;
use wasmpod_tests::{PodYaml, TestNode, is_running, remove, running, wait_for};

const LIMIT: Duration = Duration::from_secs(20);

/// The container's current log, read to its end.
async fn log(pod: &wasmpod::PodHandle, container: &str) -> Vec<String> {
    let mut logs = pod.logs(container, LogOptions::default().follow()).unwrap();
    let mut lines = Vec::new();
    while let Some(l) = logs.next().await {
        lines.push(l.line);
    }
    lines
}

/// A prompt the guest flushes before it reads stdin (no newline yet) reaches watchers and the log
/// at once, as a partial record the rest of the line continues: an attacher sees the question
/// before answering it. For preview1 modules (`fd_write`), components (`blocking-flush`) and
/// WASI 0.3 components (a stream's write).
#[tokio::test]
async fn a_flushed_prompt_is_seen_before_the_guest_reads_its_answer() {
    let node = TestNode::new();
    for image in ["{p1}", "{p2}", "{p3}"] {
        let yaml = PodYaml::new("prompt")
            .never()
            .container(&format!(
                r#"{{ name: c, image: "{image}", args: [prompt, "name? ", stdin], stdin: true }}"#
            ))
            .build();
        let pod = node.start(&yaml).await;
        running(&pod, &["c"]).await;
        let mut logs = pod.logs("c", LogOptions::default().follow()).unwrap();
        // Nothing is written to stdin until the prompt is seen: a prompt held back until its
        // line ends would hang here.
        let prompt = tokio::time::timeout(LIMIT, logs.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((prompt.line.as_str(), prompt.partial), ("name? ", true));
        let stdin = pod.attach_stdin("c").await.unwrap();
        stdin.write_all(b"bob\n").await.unwrap();
        drop(stdin);
        let answer = tokio::time::timeout(LIMIT, logs.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((answer.line.as_str(), answer.partial), ("read: bob", false));
        pod.delete(None);
        // The log file keeps the prompt as a `P` record, the rest of its line as `F`.
        let file = wasmpod_tests::read(&pod.log_file("c", 0));
        let records: Vec<_> = file.lines().map(|l| l.split_once(' ').unwrap().1).collect();
        assert_eq!(records, ["stdout P name? ", "stdout F read: bob"], "{file}");
        pod.deleted().await;
    }
}

#[tokio::test]
async fn stdin_once_ends_when_the_first_attacher_leaves() {
    let node = TestNode::new();
    let yaml = PodYaml::new("interactive")
        .never()
        .container(r#"{ name: c, image: "{p1}", args: [stdin], stdin: true, stdinOnce: true }"#)
        .build();
    let pod = node.start(&yaml).await;
    running(&pod, &["c"]).await;
    let stdin = pod.attach_stdin("c").await.unwrap();
    assert!(stdin.once());
    stdin.write_all(b"one\ntwo\n").await.unwrap();
    drop(stdin);
    let status = tokio::time::timeout(LIMIT, pod.wait()).await.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    assert_eq!(
        log(&pod, "c").await,
        ["read: one", "read: two", "stdin ended after 2 lines"]
    );
    // The instance is gone: nothing attaches to it any more.
    assert_eq!(
        pod.attach_stdin("c").await.unwrap_err(),
        wasmpod::ContainerError::NotRunning("c".into())
    );
}

#[tokio::test]
async fn without_once_stdin_stays_open_until_closed_and_without_stdin_it_is_empty() {
    let node = TestNode::new();
    let yaml = PodYaml::new("two-sessions")
        .never()
        .container(r#"{ name: c, image: "{p2}", args: [stdin], stdin: true }"#)
        .container(r#"{ name: plain, image: "{p1}", args: [stdin, sleep, "600000"] }"#)
        .build();
    let pod = node.start(&yaml).await;
    wait_for(&pod, LIMIT, |s| {
        is_running(s, "c") && is_running(s, "plain")
    })
    .await;
    let first = pod.attach_stdin("c").await.unwrap();
    assert!(!first.once());
    first.write_all(b"from the first\n").await.unwrap();
    drop(first);
    // The first session's end did not end the stream: a second one writes on and closes it.
    let second = pod.attach_stdin("c").await.unwrap();
    second.write_all(b"from the second\n").await.unwrap();
    second.close().await;
    let mut logs = pod.logs("c", LogOptions::default().follow()).unwrap();
    let mut lines = Vec::new();
    while let Some(l) = tokio::time::timeout(LIMIT, logs.next()).await.unwrap() {
        lines.push(l.line);
    }
    assert_eq!(
        lines,
        [
            "read: from the first",
            "read: from the second",
            "stdin ended after 2 lines"
        ]
    );
    // A container without `stdin: true` reads an empty stdin, and cannot be attached to.
    let mut plain = pod.logs("plain", LogOptions::default()).unwrap();
    let first_line = tokio::time::timeout(LIMIT, plain.next()).await.unwrap();
    assert_eq!(first_line.unwrap().line, "stdin ended after 0 lines");
    let refused = pod.attach_stdin("plain").await.unwrap_err();
    assert_eq!(refused, wasmpod::ContainerError::NoStdin("plain".into()));
    remove(&pod).await;
}

#[tokio::test]
async fn an_exec_reads_its_own_stdin() {
    let node = TestNode::new();
    let yaml = PodYaml::new("exec-i")
        .container(r#"{ name: c, image: "{p1}", args: [sleep, "600000"] }"#)
        .build();
    let pod = node.start(&yaml).await;
    running(&pod, &["c"]).await;
    let command = ["agnhost".to_owned(), "stdin".to_owned()];
    let input: &[u8] = b"piped in\nand more\n";
    let out = pod
        .exec_with_stdin("c", &command, input, 1 << 20)
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "read: piped in\nread: and more\nstdin ended after 2 lines\n"
    );
    // Without stdin, the same command reads nothing.
    let out = pod.exec_output("c", &command, 1 << 20).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "stdin ended after 0 lines\n"
    );
    remove(&pod).await;
}
