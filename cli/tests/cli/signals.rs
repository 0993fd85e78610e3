//! `wasmpod run` under SIGTERM and Ctrl-C: the pod deleted gracefully, a second signal forcing it.

use super::*;

/// Ctrl-C (SIGTERM here) deletes the pod gracefully: containers that do not handle TERM stop at
/// once, and wasmpod exits with the pod's final phase.
#[cfg(unix)]
#[test]
fn sigterm_deletes_the_pod() {
    let dir = Dir::new();
    let pod = dir.write(
        "pod.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: { name: forever }
spec:
  containers:
  - { name: c, image: "{p1}", args: [print, started, sleep, "100000"] }
"#,
    );
    let ev = dir.path("events.jsonl");
    let (mut child, line) = dir.spawn(&pod, &["--events", ev.to_str().unwrap()]);
    assert_eq!(line.trim(), "[c] started");
    let sent = Instant::now();
    sigterm(&child);
    let status = child.wait().unwrap();
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(status.code(), Some(1));
    let events = events(&ev);
    let reasons: Vec<&str> = events
        .iter()
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    let pos = |r| reasons.iter().position(|x| *x == r).unwrap();
    assert!(
        pos("Terminating") < pos("Killing")
            && pos("Killing") < pos("Exited")
            && pos("Exited") < pos("Deleted")
    );
    assert_eq!(events[pos("Exited")]["exitCode"], 143);
}

/// SIGTERM acts while nobody reads stdout: with `--events -` to a pipe that is never read (and
/// so full), the pod is deleted and wasmpod exits at once, without the output it could not
/// write (the log files have it).
#[cfg(unix)]
#[test]
fn sigterm_acts_while_stdout_is_not_read() {
    sigterm_acts_while_unread(
        "flood",
        "flood line 19999",
        &["--events", "-"],
        Stdio::piped(),
        Stdio::piped(),
    );
}

/// The same with stderr: a guest writing to a stderr nobody reads (a paused pager, a full
/// journal), and wasmpod's own messages (why the container failed) with it: none of the node's
/// work waits on it, and wasmpod exits.
#[cfg(unix)]
#[test]
fn sigterm_acts_while_stderr_is_not_read() {
    sigterm_acts_while_unread(
        "eflood",
        "stderr flood line 19999",
        &[],
        Stdio::null(),
        Stdio::piped(),
    );
}

#[cfg(unix)]
fn sigterm_acts_while_unread(
    flood: &str,
    last: &str,
    extra: &[&str],
    stdout: Stdio,
    stderr: Stdio,
) {
    let dir = Dir::new();
    let pod = dir.write(
        "pod.yaml",
        &r#"
apiVersion: v1
kind: Pod
metadata: { name: loud }
spec:
  containers:
  - { name: c, image: "{p1}", args: [print, started, FLOOD, "20000", sleep, "100000"] }
"#
        .replace("FLOOD", flood),
    );
    let mut child = dir
        .run_command(&pod, extra)
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .unwrap();
    // The pipe (64 KiB) fills with the flood and stays full: nothing reads it.
    let log = dir.path("state").join("logs");
    let start = Instant::now();
    while !std::fs::read_dir(&log).is_ok_and(|mut d| d.next().is_some())
        || !std::fs::read_to_string(dir.log_dir("c").join("0.log"))
            .unwrap_or_default()
            .contains(last)
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the pod never flooded"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let sent = Instant::now();
    sigterm(&child);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "SIGTERM did nothing while the output was not read"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = sent.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "exited {took:?} after SIGTERM"
    );
    assert_eq!(status.code(), Some(1));
}

/// A second Ctrl-C (SIGTERM) forces the deletion: a guest that ignores TERM is killed at once
/// instead of at the end of its grace period.
#[cfg(unix)]
#[test]
fn second_signal_forces() {
    let dir = Dir::new();
    let pod = dir.write(
        "pod.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: { name: stubborn }
spec:
  terminationGracePeriodSeconds: 60
  containers:
  - { name: c, image: "{term}", args: [print, started, sleep, "100000"] }
"#,
    );
    let st = dir.path("status.json");
    let (mut child, line) = dir.spawn(&pod, &["--status", st.to_str().unwrap()]);
    assert_eq!(line.trim(), "[c] started");
    let kill = || sigterm(&child);
    let sent = Instant::now();
    kill();
    std::thread::sleep(Duration::from_millis(200));
    // (`run` creates the status file before the pod starts, and writes it at the end.)
    assert_eq!(
        std::fs::metadata(&st).unwrap().len(),
        0,
        "still in its grace period after the first signal"
    );
    kill();
    let status = child.wait().unwrap();
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(status.code(), Some(1));
    let status: Value = serde_json::from_str(&std::fs::read_to_string(&st).unwrap()).unwrap();
    assert_eq!(
        status["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        137
    );
}

/// A stderr that is read, if slowly, gets everything `run` says at the end: the containers'
/// lines queued before it and why the container failed after them.
#[test]
fn a_slow_stderr_gets_the_failure_report_after_the_lines_before_it() {
    use std::io::Read as _;
    let dir = Dir::new();
    let pod = dir.write(
        "pod.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: { name: loud }
spec:
  restartPolicy: Never
  containers:
  - { name: c, image: "{p1}", args: [eflood, "2000", exit, "3"] }
"#,
    );
    let mut child = dir
        .run_command(&pod, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    // About 50 KB/s: slower than the guest writes, so the queue is full when `run` reports.
    let mut buf = [0; 512];
    loop {
        match stderr.read(&mut buf).unwrap() {
            0 => break,
            n => seen.extend_from_slice(&buf[..n]),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(child.wait().unwrap().code(), Some(1));
    let seen = String::from_utf8_lossy(&seen);
    assert!(seen.contains("[c] stderr flood line 0 "), "{seen:.200}");
    assert!(
        seen.trim_end()
            .ends_with("container c ended Error (exit code 3)"),
        "{}",
        &seen[seen.len().saturating_sub(300)..]
    );
}
