//! The agent as a device runs it: restarts after `kill -9`, systemd's notify protocol, static
//! pods, a full disk, a small address space, machine code only from named directories.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmpod_tests::{PodYaml, fill};

use super::support::{Agent, LIMIT, row, status_of};

#[test]
fn a_killed_agent_comes_back_with_nothing_lost() {
    let (tmp, agent) = Agent::start();
    let sleeper = |name: &str, never: bool| {
        let yaml = PodYaml::new(name).container(&format!(
            r#"{{ name: main, image: "{{term}}", args: [print, "{name} ran", sleep, "60000"] }}"#
        ));
        if never { yaml.never() } else { yaml }.build()
    };
    agent.create(&sleeper("always", false));
    agent.create(&sleeper("never", true));
    agent.create(
        &PodYaml::new("finished")
            .never()
            .container(r#"{ name: main, image: "{p1}", args: [print, done] }"#)
            .build(),
    );
    agent.create(
        &PodYaml::new("leaving")
            .spec("terminationGracePeriodSeconds: 30")
            .container(
                r#"{ name: main, image: "{term}", args: [print, started, on-term, "0", "3000", sleep, "60000"] }"#,
            )
            .build(),
    );
    agent.ok(&["create", "configmap", "kept", "--from-literal=a=b"]);
    for pod in ["always", "never", "leaving"] {
        agent.ok(&[
            "wait",
            "--for=condition=Ready",
            &format!("pod/{pod}"),
            "--timeout=30s",
        ]);
    }
    agent.until(&["get", "pods"], LIMIT, |t| t.contains("Completed"));
    let uid = agent.pod("always")["metadata"]["uid"].clone();
    agent.ok(&["delete", "pod", "leaving", "--wait=false"]);
    // A later delete may only shorten the grace period.
    agent.ok(&[
        "delete",
        "pod",
        "leaving",
        "--grace-period=60",
        "--wait=false",
    ]);
    assert_eq!(
        agent.pod("leaving")["metadata"]["deletionGracePeriodSeconds"],
        30
    );
    agent.ok(&[
        "delete",
        "pod",
        "leaving",
        "--grace-period=20",
        "--wait=false",
    ]);
    assert_eq!(
        agent.pod("leaving")["metadata"]["deletionGracePeriodSeconds"],
        20
    );
    agent.kill();

    let restarted = Instant::now();
    let agent = Agent::start_in(tmp.path(), &[]);
    // The pod being deleted terminates again from the beginning: its guest runs again, gets
    // TERM and its whole grace period (it takes 3 s after TERM), then the pod goes.
    agent.ok(&["wait", "--for=delete", "pod/leaving", "--timeout=30s"]);
    assert!(
        restarted.elapsed() >= Duration::from_secs(3),
        "{:?}",
        restarted.elapsed()
    );
    let table = agent.until(&["get", "pods"], LIMIT, |t| {
        t.lines()
            .any(|l| l.starts_with("always") && l.contains("Running"))
    });
    // The running pod restarted with its uid, counting the lost instance.
    assert_eq!(row(&table, "always")[1..3], ["1/1", "Running"], "{table}");
    assert!(row(&table, "always")[3].starts_with("1 ("), "{table}");
    let always = agent.pod("always");
    assert_eq!(always["metadata"]["uid"], uid);
    let last = &always["status"]["containerStatuses"][0]["lastState"]["terminated"];
    assert_eq!(last["reason"], "ContainerStatusUnknown", "{always}");
    assert_eq!(last["exitCode"], 137);
    assert_eq!(agent.ok(&["logs", "always", "--previous"]), "always ran\n");
    assert_eq!(agent.ok(&["logs", "always"]), "always ran\n");
    // Its events from before the restart are kept, and those of its run after it are stored
    // beside them (not refused as names already taken), until the pod goes.
    let events = [
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=always,reason=Started",
        "-o",
        "name",
    ];
    agent.until(&events, LIMIT, |t| t.lines().count() == 2);
    agent.ok(&["delete", "pod", "always", "--grace-period=0"]);
    agent.until(&events, LIMIT, |t| t.trim().is_empty());
    // A Never pod cannot run again: it failed, and says why.
    let never = agent.pod("never");
    assert_eq!(never["status"]["phase"], "Failed");
    assert_eq!(never["status"]["reason"], "NodeAgentRestarted");
    assert_eq!(status_of(&table, "finished"), "Completed");
    // A pod that ended before the restart keeps its logs, until it is deleted.
    assert_eq!(agent.ok(&["logs", "finished"]), "done\n");
    let finished_uid = agent.pod("finished")["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let logs = tmp.path().join("state").join("logs");
    let has_logs = |uid: &str| {
        std::fs::read_dir(&logs)
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().ends_with(uid))
    };
    assert!(has_logs(&finished_uid));
    agent.ok(&["delete", "pod", "finished"]);
    assert!(!has_logs(&finished_uid), "a deleted pod's logs are removed");
    assert_eq!(
        agent.ok(&["get", "configmap", "kept", "-o", "jsonpath={.data.a}"]),
        "b"
    );
}

/// What a service manager hears on its notify socket (a datagram a message).
struct Notifications(std::os::unix::net::UnixDatagram);

impl Notifications {
    /// The next message, if one comes within `limit`.
    fn next(&self, limit: Duration) -> Option<String> {
        self.0.set_read_timeout(Some(limit)).unwrap();
        let mut buf = [0u8; 4096];
        let n = self.0.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// Waits for a message with the line `line`, returning the messages before it.
    fn until(&self, line: &str, limit: Duration) -> Vec<String> {
        let start = Instant::now();
        let mut before = Vec::new();
        while let Some(left) = limit.checked_sub(start.elapsed()) {
            match self.next(left) {
                Some(m) if m.lines().any(|l| l == line) => return before,
                Some(m) => before.push(m),
                None => break,
            }
        }
        panic!("no {line} within {limit:?}; heard {before:?}");
    }
}

/// A TCP proxy on loopback to `to` that holds each connection for `delay` milliseconds (as it
/// is when the connection comes) before carrying it; returns its `HOST:PORT`.
fn slow_proxy(to: String, delay: std::sync::Arc<std::sync::atomic::AtomicU64>) -> String {
    use std::net::{Shutdown, TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let wait = delay.load(std::sync::atomic::Ordering::Relaxed);
            let to = to.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(wait));
                let Ok(server) = TcpStream::connect(&to) else {
                    return;
                };
                let (mut up_from, mut up_to) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut up_from, &mut up_to);
                    let _ = up_to.shutdown(Shutdown::Write);
                });
                let (mut down_from, mut down_to) = (server, client);
                let _ = std::io::copy(&mut down_from, &mut down_to);
                let _ = down_to.shutdown(Shutdown::Write);
            });
        }
    });
    addr
}

/// Under systemd (`Type=notify`, `deploy/systemd/wasmpod.service`): `READY=1` only once the API
/// answers and the stored pods run again after a `kill -9` (their image slow to come); watchdog pings at half of
/// `WATCHDOG_USEC`, none while the agent is stopped (SIGSTOP) and again once it goes on;
/// `STOPPING=1` at SIGTERM. The unit file passes `systemd-analyze verify`.
#[test]
fn systemd_hears_ready_watchdog_and_stopping() {
    let tmp = tempfile::tempdir().unwrap();
    let socket_path = tmp.path().join("notify.sock");
    let heard = Notifications(std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap());
    let socket = socket_path.to_str().unwrap();
    let env = [("NOTIFY_SOCKET", socket), ("WATCHDOG_USEC", "2000000")];
    // The pods' image comes from a registry through a proxy that can be made slow.
    let registry = wasmpod_tests::registry::Registry::start(false);
    let wasm = std::fs::read(wasmpod_tests::guests::AGNHOST_TERM_P1).unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(registry.push_wasm("sleeper:1.0", &wasm));
    let delay = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let proxy = slow_proxy(registry.host.clone(), delay.clone());
    let extra = ["--insecure-registry", proxy.as_str()];
    let agent = Agent::start_with(&[], tmp.path(), &extra, &env);
    heard.until("READY=1", LIMIT);
    agent.ok(&["get", "namespace", "default"]);
    let pods: Vec<String> = (0..3)
        .map(|i| {
            PodYaml::new(&format!("kept-{i}"))
                .container(&format!(
                    r#"{{ name: main, image: "{proxy}/sleeper:1.0", args: [print, up, sleep, "60000"] }}"#
                ))
                .build()
        })
        .collect();
    agent.create(&pods.join("---\n"));
    agent.ok(&[
        "wait",
        "--for=condition=Ready",
        "pods",
        "--all",
        "--timeout=60s",
    ]);
    // A write the API acknowledges makes the pods' running status durable with it.
    agent.ok(&["create", "configmap", "durable", "--from-literal=a=b"]);
    agent.kill();

    // Brought back without their image, which now takes two seconds to come: READY=1 waits.
    std::fs::remove_dir_all(tmp.path().join("image-store")).unwrap();
    delay.store(2000, std::sync::atomic::Ordering::Relaxed);
    let agent = Agent::start_with(&[], tmp.path(), &extra, &env);
    heard.until("READY=1", LIMIT);
    // Nothing has happened since READY=1 but a read: every pod runs again already, its instance
    // the restart lost counted.
    let list: Value = serde_json::from_str(&agent.ok(&["get", "pods", "-o", "json"])).unwrap();
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    for pod in items {
        let container = &pod["status"]["containerStatuses"][0];
        assert_eq!(container["restartCount"], 1, "{pod:#}");
        assert!(container["state"]["running"].is_object(), "{pod:#}");
        assert_eq!(
            container["lastState"]["terminated"]["reason"], "ContainerStatusUnknown",
            "{pod:#}"
        );
    }

    // Pings every second (half of 2 s), each less than the watchdog's 2 s after the last.
    let mut last = Instant::now();
    let mut pings = 0;
    while pings < 4 {
        heard.until("WATCHDOG=1", Duration::from_secs(2));
        assert!(
            last.elapsed() < Duration::from_secs(2),
            "{:?}",
            last.elapsed()
        );
        last = Instant::now();
        pings += 1;
    }
    let pid = agent.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    // What was sent before the stop is read; then three seconds of silence.
    while heard.next(Duration::from_millis(100)).is_some() {}
    let silent = heard.next(Duration::from_secs(3));
    assert!(
        Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(silent, None, "a stopped agent pinged");
    heard.until("WATCHDOG=1", Duration::from_secs(3));

    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    heard.until("STOPPING=1", LIMIT);
    let mut agent = agent;
    assert!(agent.child.wait().unwrap().success());

    // The unit file, with the binary at hand where it names /usr/local/bin/wasmpod.
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/systemd/wasmpod.service"),
    )
    .unwrap()
    .replace("/usr/local/bin/wasmpod", env!("CARGO_BIN_EXE_wasmpod"));
    let file = tmp.path().join("wasmpod.service");
    std::fs::write(&file, unit).unwrap();
    let verified = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&file)
        .output()
        .expect("systemd-analyze runs (Debian's systemd)");
    assert!(
        verified.status.success() && verified.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
}

#[test]
fn static_pods_follow_their_manifests() {
    wasmpod_tests::warm_shared_cache();
    let tmp = tempfile::tempdir().unwrap();
    let manifests = tmp.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    let agent = Agent::start_in(tmp.path(), &["--manifests", manifests.to_str().unwrap()]);
    let manifest = |version: &str| {
        fill(
            &PodYaml::new("web")
                .spec("terminationGracePeriodSeconds: 10")
                .container(&format!(
                    r#"{{ name: main, image: "{{term}}", args: [print, "{version}", on-term, "0", "10", sleep, "60000"] }}"#
                ))
                .build(),
        )
    };
    let file = manifests.join("web.yaml");
    std::fs::write(&file, manifest("v1")).unwrap();
    // The pod is named after the node, as the kubelet names static pods.
    agent.until(&["get", "pods"], LIMIT, |t| {
        t.lines()
            .any(|l| l.starts_with("web-edge-1") && l.contains("Running"))
    });
    assert_eq!(agent.ok(&["logs", "web-edge-1"]), "v1\n");
    let uid = agent.pod("web-edge-1")["metadata"]["uid"].clone();

    // The mirror cannot be deleted or changed through the API.
    let refused = agent.fails(&["delete", "pod", "web-edge-1"]);
    assert!(refused.contains("mirror of a static pod"), "{refused}");
    let refused = agent.fails(&["label", "pod", "web-edge-1", "a=b"]);
    assert!(refused.contains("mirror of a static pod"), "{refused}");

    // A changed manifest replaces the pod; a removed one deletes it.
    std::fs::write(&file, manifest("v2")).unwrap();
    agent.until(&["logs", "web-edge-1"], LIMIT, |t| t == "v2\n");
    assert_ne!(agent.pod("web-edge-1")["metadata"]["uid"], uid);
    std::fs::remove_file(&file).unwrap();
    agent.until(&["get", "pods", "-o", "name"], LIMIT, |t| {
        t.trim().is_empty()
    });
}

/// A state dir on a small file system of its own (a tmpfs), unmounted when dropped.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(at: PathBuf, size: &str) -> SmallDisk {
        std::fs::create_dir_all(&at).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .status()
            .unwrap();
        assert!(
            mounted.success(),
            "this test mounts a tmpfs: it runs as root"
        );
        SmallDisk(at)
    }

    /// Fills the file system: what is left is less than a page.
    fn fill(&self) {
        use std::io::Write;
        let mut filler = std::fs::File::create(self.0.join("filler")).unwrap();
        let block = vec![0u8; 64 << 10];
        while filler.write_all(&block).is_ok() {}
        while filler.write_all(&[0]).is_ok() {}
    }

    fn free(&self) {
        std::fs::remove_file(self.0.join("filler")).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// What was acknowledged survives a full disk and a `kill -9` on it: while the state dir's file
/// system is full, a write is refused with a `Status` and the agent goes on serving; killed
/// there, it starts again on the full disk with every object it had; once there is room again,
/// writes succeed.
#[test]
fn a_full_disk_loses_nothing_acknowledged() {
    wasmpod_tests::warm_shared_cache();
    let tmp = tempfile::tempdir().unwrap();
    let disk = SmallDisk::mount(tmp.path().join("state"), "16m");
    // The agent's own port, as a device has: the kubeconfig stays what it was.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let listen = ["--listen", &port];
    let agent = Agent::start_in(tmp.path(), &listen);
    agent.ok(&["create", "configmap", "kept", "--from-literal=a=b"]);
    agent.create(
        &PodYaml::new("sleeper")
            .container(r#"{ name: main, image: "{term}", args: [print, ran, sleep, "60000"] }"#)
            .build(),
    );
    agent.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/sleeper",
        "--timeout=30s",
    ]);

    disk.fill();
    let refused = agent.fails(&["create", "configmap", "late", "--from-literal=a=b"]);
    assert!(refused.contains("No space left"), "{refused}");
    assert_eq!(
        agent.ok(&["get", "configmap", "kept", "-o", "jsonpath={.data.a}"]),
        "b"
    );
    agent.fails(&["get", "configmap", "late"]);
    agent.kill();

    let agent = Agent::start_in(tmp.path(), &listen);
    assert_eq!(
        agent.ok(&["get", "configmap", "kept", "-o", "jsonpath={.data.a}"]),
        "b"
    );
    agent.until(&["get", "pods"], LIMIT, |t| {
        t.lines()
            .any(|l| l.starts_with("sleeper") && l.contains("Running"))
    });

    disk.free();
    agent.ok(&["create", "configmap", "late", "--from-literal=a=b"]);
    agent.ok(&["delete", "pod", "sleeper", "--grace-period=0", "--force"]);
}

/// A node under a 4 GiB address-space limit (as a 39-bit board or a container runtime's limit
/// gives it) runs compact and says so in its status, and runs 50 sleeping pods and the hello pod.
#[test]
fn a_small_address_space_runs_fifty_pods() {
    wasmpod_tests::warm_shared_cache();
    let tmp = tempfile::tempdir().unwrap();
    let manifests = tmp.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    for i in 0..50 {
        let pod = PodYaml::new(&format!("sleeper-{i}"))
            .container(r#"{ name: main, image: "{p1}", args: [print, up, sleep, "600000"] }"#)
            .build();
        std::fs::write(manifests.join(format!("{i}.yaml")), fill(&pod)).unwrap();
    }
    let agent = Agent::start_under(
        &["prlimit", "--as=4294967296"],
        tmp.path(),
        &["--manifests", manifests.to_str().unwrap()],
    );
    let node = |path: &str| agent.ok(&["get", "node", "edge-1", "-o", &format!("jsonpath={path}")]);
    assert_eq!(
        node(r"{.metadata.annotations.wasmpod\.dev/address-space}"),
        "compact"
    );
    let containers: u64 = node(r"{.status.allocatable.wasmpod\.dev/containers}")
        .parse()
        .unwrap();
    assert!((50..1000).contains(&containers), "{containers}");
    agent.until(&["get", "pods", "--no-headers"], LIMIT, |t| {
        t.lines().filter(|l| l.contains("Running")).count() == 50
    });
    agent.create(
        &PodYaml::new("hello")
            .never()
            .container(r#"{ name: main, image: "{p1}", args: [print, hello] }"#)
            .build(),
    );
    agent.until(&["get", "pod", "hello"], LIMIT, |t| t.contains("Completed"));
    assert_eq!(agent.ok(&["logs", "hello"]), "hello\n");
}

/// Pods come from the network, so an agent runs machine code (a `.cwasm` from `wasmpod
/// compile`) only from the directories it is given (`--precompiled-dir`): elsewhere such a pod
/// is refused with where machine code may come from.
#[test]
fn precompiled_images_run_only_from_named_dirs() {
    wasmpod_tests::warm_shared_cache();
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let artefact = bin.join("app.cwasm");
    let compiled = Command::new(env!("CARGO_BIN_EXE_wasmpod"))
        .arg("compile")
        .arg(fill("{p1}"))
        .arg("-o")
        .arg(&artefact)
        .status()
        .unwrap();
    assert!(compiled.success());
    let pod = |name: &str| {
        PodYaml::new(name)
            .never()
            .container(&format!(
                r#"{{ name: main, image: "{}", args: [print, hi] }}"#,
                artefact.display()
            ))
            .build()
    };

    let agent = Agent::start_in(tmp.path(), &[]);
    let file = agent.file("refused.yaml", &pod("refused"));
    let refused = agent.fails(&["create", "-f", &file]);
    assert!(
        refused.contains("is machine code (a precompiled artefact)")
            && refused.contains("--precompiled-dir"),
        "{refused}"
    );
    agent.kill();

    let agent = Agent::start_in(tmp.path(), &["--precompiled-dir", bin.to_str().unwrap()]);
    agent.create(&pod("allowed"));
    agent.until(&["get", "pod", "allowed"], LIMIT, |t| {
        t.contains("Completed")
    });
    assert_eq!(agent.ok(&["logs", "allowed"]), "hi\n");
}

/// `hostNetwork: true` through the API: refused naming `--allow-host-network` on an agent
/// without it; with it, the pod's IP is the Node's InternalIP, as every pod's `hostIP` is (and
/// `kubectl get -o wide` shows it), while a pod on the pod network keeps its own.
#[test]
fn host_network_pods_show_the_nodes_address() {
    let tmp = tempfile::tempdir().unwrap();
    wasmpod_tests::warm_shared_cache();
    let pod = |name: &str, host: bool| {
        PodYaml::new(name)
            .spec(&format!("hostNetwork: {host}"))
            .container(r#"{ name: c, image: "{p1}", args: [sleep, "600000"] }"#)
            .build()
    };
    let agent = Agent::start_in(tmp.path(), &[]);
    let file = agent.file("refused.yaml", &pod("refused", true));
    let refused = agent.fails(&["create", "-f", &file]);
    assert!(
        refused.contains("spec.hostNetwork") && refused.contains("--allow-host-network"),
        "{refused}"
    );
    agent.kill();

    let agent = Agent::start_in(tmp.path(), &["--allow-host-network"]);
    agent.create(&pod("host", true));
    agent.create(&pod("own", false));
    agent.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/host",
        "pod/own",
        "--timeout=30s",
    ]);
    let node_ip = agent.ok(&[
        "get",
        "nodes",
        "-o",
        "jsonpath={.items[0].status.addresses[?(@.type==\"InternalIP\")].address}",
    ]);
    assert!(!node_ip.is_empty());
    let ips = |name: &str| {
        agent.ok(&[
            "get",
            "pod",
            name,
            "-o",
            "jsonpath={.status.podIP} {.status.hostIP}",
        ])
    };
    assert_eq!(ips("host"), format!("{node_ip} {node_ip}"));
    let own = ips("own");
    let (own_ip, own_host) = own.split_once(' ').unwrap();
    assert!(own_ip.starts_with("10.88."), "{own}");
    assert_eq!(own_host, node_ip);
    let wide = agent.ok(&["get", "pods", "-o", "wide"]);
    assert!(row(&wide, "host").contains(&node_ip), "{wide}");
}
