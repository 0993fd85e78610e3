//! `containerd-shim-wasmpod-v1 install` and `uninstall` on a real node's containerd: a private
//! containerd with the CRI and its stock runtimes (runc only), supervised as systemd supervises
//! a node's, made to run wasm pods through the handler `wasmpod` and then put back as it was.

#[path = "support/cri.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Output};

use support::{Node, Spec};
use wasmpod_tests::guests;

const SHIM: &str = env!("CARGO_BIN_EXE_containerd-shim-wasmpod-v1");

/// An API server for the installer to reach: wasmpod's node agent on loopback, its one node
/// named [`NODE`], read with kubectl.
struct ApiServer {
    agent: Option<wasmpod_agent::Agent>,
    runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

const NODE: &str = "edge-7";

impl ApiServer {
    fn start() -> ApiServer {
        let dir = tempfile::tempdir().unwrap();
        let node = wasmpod::NodeOptions::default()
            .node_name(NODE)
            .state_dir(dir.path().join("state"))
            .cache_dir(Some(wasmpod_tests::shared_cache()));
        let options = wasmpod_agent::AgentOptions::default()
            .node(node)
            .listen(([127, 0, 0, 1], 0).into())
            .images_dir(dir.path());
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let agent = runtime
            .block_on(wasmpod_agent::Agent::start(options))
            .unwrap();
        ApiServer {
            agent: Some(agent),
            runtime,
            _dir: dir,
        }
    }

    fn kubeconfig(&self) -> String {
        let agent = self.agent.as_ref().unwrap();
        agent.kubeconfig().to_string_lossy().into_owned()
    }

    /// kubectl's output; `None` if it failed.
    fn kubectl(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The node's label `wasmpod.dev/installed`.
    fn label(&self) -> String {
        self.kubectl(&[
            "get",
            "node",
            NODE,
            "-o",
            r"jsonpath={.metadata.labels.wasmpod\.dev/installed}",
        ])
        .unwrap()
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if let Some(agent) = self.agent.take() {
            self.runtime.block_on(agent.stop());
        }
    }
}

/// Runs the installer with `args`.
fn installer(args: &[&str], config: &Path, bin: &Path) -> Output {
    Command::new(SHIM)
        .args(args)
        .arg("--config")
        .arg(config)
        .arg("--bin-dir")
        .arg(bin)
        .args(["--timeout", "30s"])
        .output()
        .unwrap()
}

#[test]
fn install_makes_a_stock_containerd_run_wasm_pods_and_uninstall_puts_it_back_byte_for_byte() {
    let mut node = Node::start_stock(SHIM);
    let config = node.ctd.config();
    let before = std::fs::read(&config).unwrap();
    // On containerd's PATH: Debian's containerd 1.6.20 looks for shims there only.
    let bin = node.ctd.dir().join("bin");
    let image = node.ctd.import("p2", guests::AGNHOST_P2.as_ref());
    let pod = node.sandbox_config("installed", &[]);
    let refused = node.try_run_pod(&pod).unwrap_err();
    assert!(
        refused.message().contains("wasmpod"),
        "the stock containerd has no handler `wasmpod`: {refused:?}"
    );

    // The cluster's API server: the installer makes the RuntimeClass there and labels the node.
    let api = ApiServer::start();
    let kubeconfig = api.kubeconfig();
    let cluster = ["--kubeconfig", &kubeconfig, "--node-name", NODE];
    let install = [&["install"][..], &cluster].concat();
    let uninstall = [&["uninstall"][..], &cluster].concat();
    assert_eq!(api.label(), "");

    let pid = node.ctd.pid().unwrap();
    let begun = std::time::Instant::now();
    let out = wasmpod_tests::succeeded(&installer(&install, &config, &bin));
    let took = begun.elapsed();
    eprintln!("{out}");
    let shim = bin.join("containerd-shim-wasmpod-v1");
    assert!(!out.contains("not on containerd's PATH"), "{out}");
    for line in [
        format!("shim: {} installed", shim.display()),
        format!(
            "config: runtime `wasmpod` added to {} (with SystemdCgroup, as runc has it)",
            config.display()
        ),
        format!("containerd: restarted (SIGTERM to pid {pid}"),
        "cri: containerd lists the handler `wasmpod`".to_owned(),
        "runtimeclass: wasmpod created".to_owned(),
        format!("node: {NODE} labelled wasmpod.dev/installed=true"),
    ] {
        assert!(out.contains(&line), "{line:?} not in:\n{out}");
    }
    // In that order: the node is labelled once containerd lists the handler.
    assert!(out.find("cri: containerd lists").unwrap() < out.find("node: edge-7").unwrap());
    assert_eq!(api.label(), "true");
    let class = api
        .kubectl(&["get", "runtimeclass", "wasmpod", "-o", "json"])
        .unwrap();
    let class: serde_json::Value = serde_json::from_str(&class).unwrap();
    assert_eq!(class["handler"], "wasmpod");
    assert_eq!(class["overhead"]["podFixed"]["memory"], "32Mi");
    assert_eq!(
        class["scheduling"]["nodeSelector"]["wasmpod.dev/installed"],
        "true"
    );
    assert_ne!(node.ctd.pid(), Some(pid), "containerd was restarted");
    assert_eq!(std::fs::read(&shim).unwrap(), std::fs::read(SHIM).unwrap());

    // The handler runs a wasm pod: its container's output in its CRI log, exec, OOMKilled.
    node.reconnect();
    let begun = std::time::Instant::now();
    let id = node.run_pod(&pod);
    let server = node.start_container(
        &id,
        &pod,
        &Spec {
            name: "server",
            image: &image,
            args: &["print", "ready", "sleep", "600000"],
            memory_limit: 64 << 20,
            ..Default::default()
        },
    );
    node.wait_for_line("installed", "server", "ready");
    eprintln!(
        "install: {took:?} (copy, edit, restart, handler listed); then RunPodSandbox to the \
         container's first line: {:?}",
        begun.elapsed()
    );
    let exec = node
        .exec_sync(&server, &["/app.wasm", "print", "from exec"], 10)
        .unwrap();
    assert_eq!(
        (
            exec.exit_code,
            String::from_utf8_lossy(&exec.stdout).as_ref()
        ),
        (0, "from exec\n")
    );
    node.oom_killed(&id, &pod, &image, 100);

    // Again: nothing changes, containerd is not restarted, the handler is still listed.
    let installed = std::fs::read(&config).unwrap();
    let pid = node.ctd.pid();
    let again = wasmpod_tests::succeeded(&installer(&install, &config, &bin));
    for line in [
        "is up to date",
        "already has the runtime `wasmpod`",
        "containerd: not restarted",
        "cri: containerd lists the handler `wasmpod`",
        "runtimeclass: wasmpod is up to date",
        "node: edge-7 is labelled wasmpod.dev/installed=true",
    ] {
        assert!(again.contains(line), "{line:?} not in:\n{again}");
    }
    assert_eq!(std::fs::read(&config).unwrap(), installed);
    assert_eq!(node.ctd.pid(), pid);
    node.remove_pod(&id);

    let out = wasmpod_tests::succeeded(&installer(&uninstall, &config, &bin));
    for line in [
        "node: label wasmpod.dev/installed taken off edge-7",
        "runtimeclass: wasmpod kept for the other nodes",
        "restored as it was before install",
        "containerd: restarted",
        "cri: containerd no longer lists the handler `wasmpod`",
    ] {
        assert!(out.contains(line), "{line:?} not in:\n{out}");
    }
    let removed = format!("shim: {} removed", shim.display());
    assert!(out.contains(&removed), "{removed:?} not in:\n{out}");
    // The label first: no new pod of the class comes while the handler goes.
    assert!(out.find("node: label").unwrap() < out.find("containerd: restarted").unwrap());
    assert_eq!(api.label(), "");
    assert_eq!(std::fs::read(&config).unwrap(), before, "byte for byte");
    assert!(!shim.exists());
    let dir: Vec<_> = std::fs::read_dir(config.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("wasmpod"))
        .collect();
    assert_eq!(dir, Vec::<String>::new(), "no backup or record is left");
    node.reconnect();
    let refused = node
        .try_run_pod(&node.sandbox_config("after", &[]))
        .unwrap_err();
    assert!(refused.message().contains("wasmpod"), "{refused:?}");
}

#[test]
fn a_config_it_cannot_read_or_with_another_wasmpod_runtime_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    for (name, text, reason) in [
        (
            "broken.toml",
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"\n",
            "is not TOML",
        ),
        (
            "clash.toml",
            "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.wasmpod]\n  runtime_type = 'io.containerd.spin.v2'\n",
            "already has a runtime named `wasmpod` whose runtime_type is `io.containerd.spin.v2`",
        ),
    ] {
        let config = dir.path().join(name);
        std::fs::write(&config, text).unwrap();
        let out = installer(&["install"], &config, &bin);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&config.display().to_string()),
            "names the file: {stderr}"
        );
        assert!(stderr.contains(reason), "{stderr}");
        assert_eq!(std::fs::read_to_string(&config).unwrap(), text, "unchanged");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            left.len(),
            1 + usize::from(name == "clash.toml"),
            "{left:?}"
        );
        assert!(!bin.exists(), "the shim is not put in place");
    }
}

/// In the cluster as on the node, every decision comes first: a RuntimeClass `wasmpod` of
/// another handler, or a node the cluster does not have, refuses the install with nothing
/// changed (the config, the shim, the class, the node's labels).
#[test]
fn a_cluster_whose_runtime_class_is_another_runtimes_or_without_the_node_is_refused_untouched() {
    let api = ApiServer::start();
    let kubeconfig = api.kubeconfig();
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    let config = dir.path().join("config.toml");
    let text = "version = 2\n";
    std::fs::write(&config, text).unwrap();
    let class = dir.path().join("class.yaml");
    std::fs::write(
        &class,
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: wasmpod}\nhandler: spin\n",
    )
    .unwrap();
    api.kubectl(&["create", "-f", &class.to_string_lossy()])
        .unwrap();
    for (node, reason) in [
        (
            NODE,
            "the cluster's RuntimeClass \"wasmpod\" has the handler \"spin\", not \"wasmpod\"",
        ),
        ("elsewhere", "the cluster has no node \"elsewhere\""),
    ] {
        let args = ["install", "--kubeconfig", &kubeconfig, "--node-name", node];
        let out = installer(&args, &config, &bin);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(reason), "{stderr}");
        assert_eq!(std::fs::read_to_string(&config).unwrap(), text, "unchanged");
        assert!(!bin.exists(), "the shim is not put in place");
    }
    let handler = api.kubectl(&[
        "get",
        "runtimeclass",
        "wasmpod",
        "-o",
        "jsonpath={.handler}",
    ]);
    assert_eq!(handler.as_deref(), Some("spin"));
    assert_eq!(api.label(), "");
}
