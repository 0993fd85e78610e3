//! The node: at most one pod of a name at a time, listing pods, garbage collection of terminated
//! pods.

use std::time::Duration;

use wasmpod::Reason::*;
use wasmpod::{Error, PodOptions};
use wasmpod_tests::{PodYaml, TestNode, Timeline, container_yaml, running, wait_for};

const LIMIT: Duration = Duration::from_secs(20);

fn pod(name: &str, args: &str) -> String {
    PodYaml::new(name)
        .never()
        .container(&container_yaml("c", "{term}", args))
        .build()
}

/// A pod with the name of one still terminating starts only after every container of the old
/// one has stopped and it is gone; a pod with the name of a live one is refused, as is a second
/// creation racing the first.
#[tokio::test]
async fn one_pod_of_a_name_at_a_time() {
    let node = TestNode::new();
    // The old pod takes 300 ms to exit after TERM.
    let old = node
        .start(&pod(
            "same",
            r#"[on-term, "0", "300", print, up, sleep, "600000"]"#,
        ))
        .await;
    wait_for(&old, LIMIT, |s| {
        s.container_statuses
            .iter()
            .flatten()
            .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
    })
    .await;

    let taken = node
        .node
        .create_pod(
            node.spec(&pod("same", "[print, hi]")),
            PodOptions::default(),
        )
        .await;
    assert!(
        matches!(&taken, Err(Error::AlreadyExists { name, .. }) if name == "same"),
        "a live pod's name is taken"
    );

    old.delete(None);
    let new = tokio::time::timeout(
        LIMIT,
        node.node.create_pod(
            node.spec(&pod("same", "[print, new]")),
            PodOptions::default(),
        ),
    )
    .await
    .expect("created once the old pod is gone")
    .unwrap();
    let old_events = Timeline::collect(&old).await;
    let deleted_at = old_events.time(old_events.pod_positions(Deleted)[0]);
    tokio::time::timeout(LIMIT, new.wait()).await.unwrap();
    let new_events = Timeline::so_far(&new).await;
    let started_at = new_events.time(new_events.first("c", Started));
    assert!(
        started_at > deleted_at,
        "the new pod started before the old one was gone:\nold:\n{old_events}\nnew:\n{new_events}"
    );
    assert_ne!(old.uid(), new.uid());

    // Two creations racing for one name: exactly one wins.
    let spec = node.spec(&pod("race", r#"[sleep, "600000"]"#));
    let (a, b) = tokio::join!(
        node.node.create_pod(spec.clone(), PodOptions::default()),
        node.node.create_pod(spec, PodOptions::default())
    );
    assert!(
        a.is_ok() != b.is_ok(),
        "exactly one of two racing creations succeeds"
    );
    let winner = a.or(b).unwrap();
    assert_eq!(
        node.node
            .pods()
            .iter()
            .map(|p| p.name().to_owned())
            .collect::<Vec<_>>(),
        ["same", "race"]
    );
    winner.delete(Some(Duration::ZERO));
    new.delete(None);
    winner.deleted().await;
}

/// Terminated pods past `terminated_pods_kept` are deleted, oldest first, with their logs;
/// newer ones keep their status and logs.
#[tokio::test]
async fn terminated_pods_are_garbage_collected() {
    let node = TestNode::with(|o| o.terminated_pods_kept(2));
    let mut pods = Vec::new();
    for i in 0..4 {
        let p = node
            .start(&pod(&format!("done{i}"), "[print, finished]"))
            .await;
        tokio::time::timeout(LIMIT, p.wait()).await.unwrap();
        // Read to its end: the log file is complete.
        let mut logs = p.logs("c", wasmpod::LogOptions::default()).unwrap();
        while logs.next().await.is_some() {}
        assert!(p.log_file("c", 0).exists());
        pods.push(p);
    }
    // The sweep runs as pods stop: by now the two oldest are collected or on their way.
    let live = node.start(&pod("live", r#"[sleep, "600000"]"#)).await;
    for old in &pods[..2] {
        tokio::time::timeout(LIMIT, old.deleted())
            .await
            .expect("collected");
    }
    let names: Vec<String> = node
        .node
        .pods()
        .iter()
        .map(|p| p.name().to_owned())
        .collect();
    assert_eq!(names, ["done2", "done3", "live"]);
    assert!(
        pods[3].log_file("c", 0).exists(),
        "a kept pod keeps its logs"
    );
    let gone = pods[0].log_file("c", 0);
    tokio::time::timeout(LIMIT, async {
        while gone.parent().unwrap().parent().unwrap().exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("a collected pod's logs are removed");
    live.delete(Some(Duration::ZERO));
}

/// Collection also happens when pods stop, not only when one is created: a node that creates no
/// more pods still keeps no more than `terminated_pods_kept` terminated ones.
#[tokio::test]
async fn pods_are_collected_when_they_stop() {
    let node = TestNode::with(|o| o.terminated_pods_kept(1));
    let mut pods = Vec::new();
    for i in 0..3 {
        // All created while running; they end 200 ms later, oldest first.
        let args = r#"[sleep, "200", print, done]"#;
        pods.push(node.start(&pod(&format!("late{i}"), args)).await);
    }
    for old in &pods[..2] {
        tokio::time::timeout(LIMIT, old.deleted())
            .await
            .expect("collected once newer pods had terminated");
    }
    tokio::time::timeout(LIMIT, pods[2].wait()).await.unwrap();
    let names: Vec<String> = node
        .node
        .pods()
        .iter()
        .map(|p| p.name().to_owned())
        .collect();
    assert_eq!(names, ["late2"], "the newest terminated pod is kept");
}

/// The lines of a log as (stream, text).
async fn read_all(mut logs: wasmpod::Logs) -> Vec<(wasmpod::Stream, String)> {
    let mut lines = Vec::new();
    let read = async {
        while let Some(l) = logs.next().await {
            lines.push((l.stream, l.line));
        }
    };
    tokio::time::timeout(LIMIT, read)
        .await
        .expect("the log ends");
    lines
}

/// Logs read back as `kubectl logs` does: the whole log of an instance, followed live until the
/// instance ends, the previous instance's, and clear errors for logs that do not exist.
#[tokio::test]
async fn logs_are_read_and_followed() {
    use wasmpod::LogOptions;
    use wasmpod::Stream::{Stderr, Stdout};

    let node = TestNode::new();
    // Followed from before its second line, to its end.
    let talker = node
        .start(&pod(
            "talker",
            r#"[print, one, eprint, two, sleep, "300", print, three]"#,
        ))
        .await;
    running(&talker, &["c"]).await;
    let followed = talker.logs("c", LogOptions::default().follow()).unwrap();
    let lines = read_all(followed).await;
    let expected = [
        (Stdout, "one".to_owned()),
        (Stderr, "two".to_owned()),
        (Stdout, "three".to_owned()),
    ];
    assert_eq!(lines, expected);
    // The container had ended when the followed log did.
    let s = talker.status();
    assert_eq!(wasmpod_tests::terminated(&s, "c").exit_code, 0);
    // Read again, without following: the same lines.
    let lines = read_all(talker.logs("c", LogOptions::default()).unwrap()).await;
    assert_eq!(lines, expected);
    let err = talker
        .logs("c", LogOptions::default().previous())
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "previous terminated container \"c\" in pod \"talker\" not found"
    );
    let err = talker.logs("nope", LogOptions::default()).err().unwrap();
    assert_eq!(
        err.to_string(),
        "container nope is not valid for pod talker"
    );
    talker.delete(None);

    // Read (not followed) once the pod has finished but before the log writer has caught up
    // (it waits on a slow output receiver): the whole log still comes.
    let (tx, mut slow) = tokio::sync::mpsc::channel(1);
    let spec = node.spec(&pod("late", "[print, one, print, two, print, three]"));
    let late = node
        .node
        .create_pod(spec, PodOptions::default().output(tx))
        .await
        .unwrap();
    tokio::time::timeout(LIMIT, late.wait()).await.unwrap();
    let logs = late.logs("c", LogOptions::default()).unwrap();
    let drainer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        while slow.recv().await.is_some() {}
    });
    let lines = read_all(logs).await;
    drainer.abort();
    let texts: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(texts, ["one", "two", "three"]);
    late.delete(None);

    // A container that restarts: the current instance's log, and the previous one's.
    let restarts = node
        .start(
            &(pod("again", r#"[count, /data/n, fail-after, /data/n, "3"]"#)
                .replace("restartPolicy: Never", "restartPolicy: OnFailure")
                .replace(
                    "args:",
                    "volumeMounts: [ { name: d, mountPath: /data } ], args:",
                )
                + "  volumes: [ { name: d, emptyDir: {} } ]\n"),
        )
        .await;
    let s = tokio::time::timeout(LIMIT, restarts.wait()).await.unwrap();
    assert_eq!(s.phase.as_deref(), Some("Succeeded"));
    let current = read_all(restarts.logs("c", LogOptions::default()).unwrap()).await;
    assert_eq!(current, [(Stdout, "count 3".to_owned())]);
    let previous = read_all(
        restarts
            .logs("c", LogOptions::default().previous())
            .unwrap(),
    )
    .await;
    // (`count` and `fail-after` each add a line: the first run saw one, the second three.)
    assert_eq!(previous, [(Stdout, "count 1".to_owned())]);
    restarts.delete(None);
}

/// A container that writes nothing: its log reads empty, not as an error, while it runs and
/// after it ends, when its file is at the kubelet's path (`<namespace>_<pod>_<uid>/<container>/
/// <restart count>.log`), empty. One that keeps restarting keeps the files of its previous and
/// current instances only, as one that writes does.
#[tokio::test]
async fn a_quiet_container_has_an_empty_log() {
    use wasmpod::LogOptions;

    let node = TestNode::new();
    let quiet = node.start(&pod("quiet", r#"[sleep, "200"]"#)).await;
    running(&quiet, &["c"]).await;
    assert!(
        read_all(quiet.logs("c", LogOptions::default()).unwrap())
            .await
            .is_empty()
    );
    let followed = quiet.logs("c", LogOptions::default().follow()).unwrap();
    assert!(read_all(followed).await.is_empty());
    let s = tokio::time::timeout(LIMIT, quiet.wait()).await.unwrap();
    assert_eq!(wasmpod_tests::terminated(&s, "c").exit_code, 0);
    let dir = node
        .dir
        .path()
        .join(format!("state/logs/default_quiet_{}/c", quiet.uid()));
    assert_eq!(std::fs::read(dir.join("0.log")).unwrap(), b"");
    quiet.delete(None);

    let again = node
        .start(
            &pod("again", r#"[exit, "0"]"#)
                .replace("restartPolicy: Never", "restartPolicy: Always"),
        )
        .await;
    let dir = node
        .dir
        .path()
        .join(format!("state/logs/default_again_{}/c", again.uid()));
    let restarted = |n: i32| {
        move |s: &wasmpod::k8s_openapi::api::core::v1::PodStatus| {
            s.container_statuses
                .iter()
                .flatten()
                .any(|c| c.restart_count >= n)
        }
    };
    let mut files: Vec<String> = Vec::new();
    for n in 1..=3 {
        tokio::time::timeout(LIMIT, again.wait_until(restarted(n)))
            .await
            .unwrap();
        files = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!((1..=2).contains(&files.len()), "{files:?}");
        for f in &files {
            assert_eq!(std::fs::read(dir.join(f)).unwrap(), b"", "{f}");
        }
    }
    // Three restarts: instance 0's log is gone.
    assert!(!files.contains(&"0.log".to_owned()), "{files:?}");
    let previous = again.logs("c", LogOptions::default().previous()).unwrap();
    assert!(read_all(previous).await.is_empty());
    again.delete(None);
}

/// A pod created from the thread `block_on` runs on, outside the runtime's workers, takes its
/// first steps on that thread (so that a pod that ends at once wakes no worker and no parked
/// caller): when `create_pod` returns, its container has started there (it may also have ended,
/// unless its guest's first time slice ran out first), and the pod then ends as any other,
/// `Succeeded` with its line in its log file. A guest that never stops computing goes to the
/// workers at the end of its first time slice: the caller has its handle back at once, the guest
/// goes on computing on the workers, and it is killed as any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_created_outside_the_workers_takes_its_first_steps_there() {
    let node = TestNode::new();
    let short = node
        .node
        .create_pod(
            node.spec(&pod("short", "[print, hi]")),
            PodOptions::default(),
        )
        .await
        .unwrap();
    let state = short.status().container_statuses.unwrap()[0].state.clone();
    assert!(
        state
            .as_ref()
            .is_some_and(|s| s.running.is_some() || s.terminated.is_some()),
        "{state:?}"
    );
    let status = tokio::time::timeout(LIMIT, short.wait()).await.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{status:?}");
    assert_eq!(wasmpod_tests::log_lines(&short, "c"), ["hi"]);

    let t0 = std::time::Instant::now();
    let spinning = node
        .node
        .create_pod(node.spec(&pod("spinning", "[loop]")), PodOptions::default())
        .await
        .unwrap();
    let returned = t0.elapsed();
    // Its first time slice is a millisecond; the bound leaves room for a slow machine.
    assert!(returned < Duration::from_secs(5), "{returned:?}");
    running(&spinning, &["c"]).await;
    // It computes on the workers meanwhile: this thread only waits.
    let cpu = || spinning.usage()[0].cpu;
    tokio::time::timeout(LIMIT, async {
        while cpu() < Duration::from_millis(100) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the spinning guest computes");
    // It ignores TERM: killed at once.
    spinning.delete(Some(Duration::ZERO));
    tokio::time::timeout(LIMIT, spinning.deleted())
        .await
        .expect("the spinning pod is deleted");
}
