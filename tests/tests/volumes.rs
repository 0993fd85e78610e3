//! Volumes, the basic part: `emptyDir` shared by a pod's containers and removed with the pod,
//! `hostPath` directories, read-only mounts, a mount at `/`.

use std::time::Duration;

use wasmpod::Reason::*;
use wasmpod_tests::{TestNode, Timeline, read, terminated};

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
