//! Volumes, the basic part: `emptyDir` shared by a pod's containers and removed with the pod,
//! `hostPath` directories, read-only mounts, a mount at `/`.

use std::time::Duration;

use wasmpod::Reason::*;
use wasmpod_tests::{TestNode, Timeline, log_lines, read, remove, terminated};

const LIMIT: Duration = Duration::from_secs(20);

/// An init container writes into an emptyDir that the main containers (p1 and p2) read.
#[tokio::test]
async fn empty_dir_is_shared_and_removed_with_the_pod() {
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: shared }
spec:
  restartPolicy: Never
  volumes: [ { name: work, emptyDir: {} } ]
  initContainers:
  - { name: init, image: "{p1}", args: [write, /work/msg, "made by init"], volumeMounts: [ { name: work, mountPath: /work } ] }
  containers:
  - { name: p1, image: "{p1}", args: [cat, /work/msg], volumeMounts: [ { name: work, mountPath: /work } ] }
  - { name: p2, image: "{p2}", args: [cat, /mnt/msg], volumeMounts: [ { name: work, mountPath: /mnt } ] }
"#,
        )
        .await;
    let status = tokio::time::timeout(LIMIT, pod.wait()).await.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    for c in ["p1", "p2"] {
        assert!(
            read(&pod.log_file(c, 0)).ends_with("stdout F made by init\n"),
            "{c}"
        );
    }
    let volume = pod.dir().join("volumes").join("work");
    assert_eq!(read(&volume.join("msg")), "made by init\n");
    pod.delete(None);
    pod.deleted().await;
    assert!(!volume.exists(), "the emptyDir is removed with the pod");
}

/// hostPath mounts show the host directory; read-only mounts refuse writes; a mount may be `/`.
#[tokio::test]
async fn host_path_and_read_only_mounts() {
    let node = TestNode::new();
    let host = node.dir.path().join("host");
    std::fs::create_dir(&host).unwrap();
    std::fs::write(host.join("config"), "from the host\n").unwrap();
    let yaml = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: hostpath }}
spec:
  restartPolicy: Never
  volumes: [ {{ name: h, hostPath: {{ path: {host}, type: Directory }} }} ]
  containers:
  - {{ name: writer, image: "{{p1}}", args: [cat, /config, write, /out, written], volumeMounts: [ {{ name: h, mountPath: / }} ] }}
  - {{ name: reader, image: "{{p1}}", args: [cat, /etc/app/config, write, /etc/app/nope, x], volumeMounts: [ {{ name: h, mountPath: /etc/app, readOnly: true }} ] }}
"#,
        host = host.display()
    );
    let pod = node.start(&yaml).await;
    let status = tokio::time::timeout(LIMIT, pod.wait()).await.unwrap();
    assert_eq!(read(&host.join("out")), "written\n");
    assert_eq!(terminated(&status, "writer").exit_code, 0);
    let reader = read(&pod.log_file("reader", 0));
    assert!(reader.contains("stdout F from the host"), "{reader}");
    assert!(
        reader.contains("stderr F agnhost: write /etc/app/nope:"),
        "{reader}"
    );
    assert_eq!(terminated(&status, "reader").exit_code, 2);
    assert!(!host.join("nope").exists());
    pod.delete(None);
    let t = Timeline::collect(&pod).await;
    assert_eq!(t.0.last().unwrap().reason, Deleted);
    assert!(
        host.join("config").exists(),
        "a hostPath volume is not removed"
    );
}

/// A container sees only its mounts: paths outside them do not exist for it.
#[tokio::test]
async fn nothing_but_the_mounts_is_visible() {
    let node = TestNode::new();
    let (t, status) = node
        .run(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: sandbox }
spec:
  restartPolicy: Never
  volumes: [ { name: v, emptyDir: {} } ]
  containers:
  - { name: c, image: "{p1}", args: [exists, /etc/passwd], volumeMounts: [ { name: v, mountPath: /v } ] }
  - { name: d, image: "{p1}", args: [exists, /v/../../etc/passwd], volumeMounts: [ { name: v, mountPath: /v } ] }
"#,
            LIMIT,
        )
        .await;
    assert_eq!(t.exit_codes("c"), [1], "/etc/passwd is not visible");
    assert_eq!(t.exit_codes("d"), [1], "'..' does not leave the mount");
    assert_eq!(status.phase.as_deref(), Some("Failed"));
}

/// A symlink inside a volume that points outside it does not lead out, for preview1 and
/// preview2 alike; neither does a `subPath` through such a symlink (the container fails to
/// start with the reason).
#[tokio::test]
async fn symlinks_do_not_escape_a_mount() {
    let node = TestNode::new();
    let outside = node.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret"), "not for guests\n").unwrap();
    let host = node.dir.path().join("vol");
    std::fs::create_dir(&host).unwrap();
    std::os::unix::fs::symlink(&outside, host.join("link")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), host.join("file-link")).unwrap();
    let yaml = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: links }}
spec:
  restartPolicy: Never
  volumes: [ {{ name: h, hostPath: {{ path: {host} }} }} ]
  containers:
  - {{ name: p1, image: "{{p1}}", args: [cat, /h/link/secret], volumeMounts: [ {{ name: h, mountPath: /h }} ] }}
  - {{ name: p2, image: "{{p2}}", args: [cat, /h/file-link], volumeMounts: [ {{ name: h, mountPath: /h }} ] }}
  - {{ name: write, image: "{{p2}}", args: [write, /h/link/planted, x], volumeMounts: [ {{ name: h, mountPath: /h }} ] }}
  - {{ name: sub, image: "{{p2}}", args: [ls, /s], volumeMounts: [ {{ name: h, mountPath: /s, subPath: link }} ] }}
"#,
        host = host.display()
    );
    let (t, status) = node.run(&yaml, LIMIT).await;
    // agnhost exits 2 on a failed file operation (a preview2 guest's std reports it as 1).
    for c in ["p1", "p2", "write"] {
        let codes = t.exit_codes(c);
        assert!(codes == [2] || codes == [1], "{c} must fail: {codes:?}");
        assert!(read(&node_log(&node, "links", c)).contains("stderr F agnhost: "));
    }
    assert!(!outside.join("planted").exists());
    let sub = terminated(&status, "sub");
    assert_eq!(sub.exit_code, 128);
    // The event says why, as the kubelet's `Failed` event does.
    assert!(
        t.0.iter().any(|e| e.reason == wasmpod::Reason::Failed
            && e.container.as_deref() == Some("sub")
            && e.message.starts_with("Error: ")
            && e.message.contains("leads out of the volume")),
        "{t}"
    );
    assert!(
        sub.message
            .as_deref()
            .unwrap_or_default()
            .contains("leads out of the volume"),
        "{sub:?}"
    );
    for c in ["p1", "p2"] {
        assert!(!read(&node_log(&node, "links", c)).contains("not for guests"));
    }
}

/// The log file of a pod's container that ran on `node` (restart 0).
fn node_log(node: &TestNode, pod: &str, container: &str) -> std::path::PathBuf {
    let pods = node.dir.path().join("state/logs");
    let dir = std::fs::read_dir(pods)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .contains(&format!("_{pod}_"))
        })
        .expect("the pod's log directory");
    dir.join(container).join("0.log")
}

/// `subPath` mounts a directory inside the volume (made on demand); nested mount paths each show
/// their own volume.
#[tokio::test]
async fn sub_paths_and_nested_mounts() {
    let node = TestNode::new();
    let (t, status) = node
        .run(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: nested }
spec:
  restartPolicy: Never
  volumes: [ { name: a, emptyDir: {} }, { name: b, emptyDir: {} } ]
  initContainers:
  - name: writer
    image: "{p2}"
    args: [write, /data/msg, in-app, write, /data/inner/msg, in-b]
    volumeMounts:
    - { name: a, mountPath: /data, subPath: app/config }
    - { name: b, mountPath: /data/inner }
  containers:
  - name: reader
    image: "{p1}"
    args: [cat, /all/app/config/msg, ls, /all, ls, /b]
    volumeMounts: [ { name: a, mountPath: /all }, { name: b, mountPath: /b } ]
"#,
            LIMIT,
        )
        .await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{t}");
    let log = read(&node_log(&node, "nested", "reader"));
    assert!(log.contains("stdout F in-app"), "{log}");
    assert!(log.contains("stdout F ls /all: app"), "{log}");
    assert!(log.contains("stdout F ls /b: msg"), "{log}");
}

/// `hostPath` types: `DirectoryOrCreate` and `FileOrCreate` make what is missing at start;
/// `Directory` and `File` must exist as such.
#[tokio::test]
async fn host_path_types() {
    let node = TestNode::new();
    let made = node.dir.path().join("made/deep");
    let file = node.dir.path().join("made-file");
    let yaml = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: types }}
spec:
  restartPolicy: Never
  volumes:
  - {{ name: d, hostPath: {{ path: {made}, type: DirectoryOrCreate }} }}
  - {{ name: f, hostPath: {{ path: {file}, type: FileOrCreate }} }}
  containers:
  - {{ name: c, image: "{{p1}}", args: [write, /d/x, hi], volumeMounts: [ {{ name: d, mountPath: /d }} ] }}
"#,
        made = made.display(),
        file = file.display()
    );
    let (_, status) = node.run(&yaml, LIMIT).await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    assert_eq!(read(&made.join("x")), "hi\n");
    assert!(file.is_file(), "FileOrCreate made the file");

    let bad = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: bad }}
spec:
  volumes:
  - {{ name: a, hostPath: {{ path: {file}, type: Directory }} }}
  - {{ name: b, hostPath: {{ path: {made}, type: File }} }}
  - {{ name: c, hostPath: {{ path: {file}, type: File }} }}
  - {{ name: e, hostPath: {{ path: {made}, type: Socket }} }}
  containers:
  - {{ name: c, image: "{{p1}}", volumeMounts: [ {{ name: c, mountPath: /f }} ] }}
"#,
        made = made.display(),
        file = file.display()
    );
    let err = wasmpod::PodSpec::from_yaml(&wasmpod_tests::fill(&bad), node.dir.path())
        .unwrap_err()
        .to_string();
    for expected in [
        "spec.volumes[0].hostPath.path: ".to_owned()
            + &format!("{} is not a directory", file.display()),
        "spec.volumes[1].hostPath.path: ".to_owned() + &format!("{} is not a file", made.display()),
        "spec.volumes[3].hostPath.type: unsupported value \"Socket\"".to_owned(),
    ] {
        assert!(err.contains(&expected), "missing {expected:?} in:\n{err}");
    }
}

/// Single-file mounts: ConfigMap keys by `subPath` and `hostPath` files appear at their paths,
/// alone in their directory (WASI preopens only directories); a writable host file is the
/// host's own (a write shows on the host); a file whose directory another mount shows is
/// refused with the reason.
#[tokio::test]
async fn single_file_mounts() {
    let node = TestNode::new();
    let motd = node.dir.path().join("motd");
    std::fs::write(&motd, "welcome").unwrap();
    let notes = node.dir.path().join("notes.txt");
    std::fs::write(&notes, "").unwrap();
    let pod = |mounts: &str| {
        format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{ name: files }}
spec:
  restartPolicy: Never
  volumes:
  - {{ name: cfg, configMap: {{ name: app }} }}
  - {{ name: motd, hostPath: {{ path: {motd}, type: File }} }}
  - {{ name: host, hostPath: {{ path: {dir} }} }}
  containers:
  - name: c
    image: "{{p1}}"
    args: [cat, /etc/app/app.conf, cat, /etc/app/other.conf, ls, /etc/app, cat, /etc/motd, write, /var/notes.txt, noted]
    volumeMounts: {mounts}
---
apiVersion: v1
kind: ConfigMap
metadata: {{ name: app }}
data: {{ app.conf: "port=8080", other.conf: "debug=1", unused: x }}
"#,
            motd = motd.display(),
            dir = node.dir.path().display(),
        )
    };
    let good = "[ { name: cfg, mountPath: /etc/app/app.conf, subPath: app.conf }, { name: cfg, mountPath: /etc/app/other.conf, subPath: other.conf }, { name: motd, mountPath: /etc/motd, readOnly: true }, { name: host, mountPath: /var/notes.txt, subPath: notes.txt } ]";
    let handle = node.start(&pod(good)).await;
    let status = tokio::time::timeout(LIMIT, handle.wait()).await.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{status:#?}");
    let log = read(&handle.log_file("c", 0));
    let out = log_lines(&handle, "c");
    assert_eq!(
        out,
        [
            "port=8080",
            "debug=1",
            "ls /etc/app: app.conf other.conf",
            "welcome"
        ],
        "{log}"
    );
    assert_eq!(read(&notes), "noted\n", "the host's own file");

    let hiding = "[ { name: host, mountPath: /etc }, { name: cfg, mountPath: /etc/app/app.conf, subPath: app.conf } ]";
    let err = node.invalid(&pod(hiding));
    assert!(
        err.contains("spec.containers[0].volumeMounts[1].mountPath: invalid value \"/etc/app/app.conf\": WASI preopens directories only, so the file is given a directory of its own at /etc/app, which would hide what the mount at /etc shows there"),
        "{err}"
    );
    let mixed = "[ { name: cfg, mountPath: /etc/app/app.conf, subPath: app.conf, readOnly: true }, { name: cfg, mountPath: /etc/app/other.conf, subPath: other.conf } ]";
    let err = node.invalid(&pod(mixed));
    assert!(
        err.contains("must all be readOnly or all writable"),
        "{err}"
    );
}

/// `medium: Memory` keeps the volume in RAM (`/dev/shm`) and removes it with the pod.
#[tokio::test]
async fn memory_empty_dir() {
    if !std::path::Path::new("/dev/shm").is_dir() {
        panic!("this test needs /dev/shm");
    }
    let node = TestNode::new();
    let pod = node
        .start(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: ram }
spec:
  restartPolicy: Never
  volumes: [ { name: m, emptyDir: { medium: Memory } } ]
  containers:
  - { name: c, image: "{p2}", args: [write, /m/x, in-ram, sleep, "600000"], volumeMounts: [ { name: m, mountPath: /m } ] }
"#,
        )
        .await;
    let dir = std::path::Path::new("/dev/shm/wasmpod")
        .join(pod.uid())
        .join("m");
    let start = std::time::Instant::now();
    // The guest writes the file while we look: wait for its whole content.
    while std::fs::read_to_string(dir.join("x")).ok().as_deref() != Some("in-ram\n") {
        assert!(
            start.elapsed() < LIMIT,
            "{} never held in-ram",
            dir.display()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    remove(&pod).await;
    assert!(!dir.exists(), "removed with the pod");
}

/// An `emptyDir` that grows past its `sizeLimit` gets the pod evicted, as the kubelet does:
/// phase Failed, reason Evicted, an `Evicted` event, containers killed at once.
#[tokio::test]
async fn size_limit_evicts_the_pod() {
    let node = TestNode::new();
    let (t, status) = node
        .run(
            r#"
apiVersion: v1
kind: Pod
metadata: { name: greedy }
spec:
  volumes: [ { name: scratch, emptyDir: { sizeLimit: 1Mi } } ]
  containers:
  - { name: c, image: "{p2}", args: [bigfile, /s/a, "512", bigfile, /s/b, "1024", sleep, "600000"], volumeMounts: [ { name: scratch, mountPath: /s } ] }
"#,
            LIMIT,
        )
        .await;
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    assert_eq!(status.reason.as_deref(), Some("Evicted"));
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains(r#"Usage of EmptyDir volume "scratch" exceeds the limit"#),
        "{message}"
    );
    let evicted = t.pod_positions(Evicted);
    assert_eq!(evicted.len(), 1, "{t}");
    assert!(evicted[0] < t.last("c", Exited), "{t}");
    assert_eq!(t.exit_codes("c"), [137]);
}
