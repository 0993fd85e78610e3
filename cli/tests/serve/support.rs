//! What the tests of `wasmpod serve` share: an agent started as a user starts it, on loopback
//! with its own state dir, and `kubectl` pointed at it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmpod_tests::fill;

/// A `wasmpod serve` process and its state dir.
pub(crate) struct Agent {
    pub(crate) dir: PathBuf,
    pub(crate) child: Child,
    pub(crate) kubeconfig: PathBuf,
}

impl Agent {
    pub(crate) fn start() -> (tempfile::TempDir, Agent) {
        wasmpod_tests::warm_shared_cache();
        let tmp = tempfile::tempdir().unwrap();
        let agent = Agent::start_in(tmp.path(), &[]);
        (tmp, agent)
    }

    /// Starts an agent on the state under `dir` (a second start finds the first one's pods),
    /// with `extra` options.
    pub(crate) fn start_in(dir: &Path, extra: &[&str]) -> Agent {
        Agent::start_under(&[], dir, extra)
    }

    /// [`Agent::start_in`], the agent run by the command `wrapper` (e.g. `prlimit`).
    pub(crate) fn start_under(wrapper: &[&str], dir: &Path, extra: &[&str]) -> Agent {
        Agent::start_with(wrapper, dir, extra, &[])
    }

    /// [`Agent::start_under`] with `env` in the agent's environment.
    pub(crate) fn start_with(
        wrapper: &[&str],
        dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Agent {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("agent.log"))
            .unwrap();
        // Any port, unless `extra` names one.
        let listen: &[&str] = if extra.contains(&"--listen") {
            &[]
        } else {
            &["--listen", "127.0.0.1:0"]
        };
        let mut command = match wrapper {
            [program, args @ ..] => {
                let mut c = Command::new(program);
                c.args(args).arg(env!("CARGO_BIN_EXE_wasmpod"));
                c
            }
            [] => Command::new(env!("CARGO_BIN_EXE_wasmpod")),
        };
        let mut child = command
            .args(["serve", "--backoff-initial", "200ms"])
            .args(listen)
            .args(["--backoff-max", "1s", "--node-name", "edge-1"])
            .arg("--state-dir")
            .arg(dir.join("state"))
            .arg("--cache-dir")
            .arg(wasmpod_tests::shared_cache())
            .arg("--image-store")
            .arg(dir.join("image-store"))
            .arg("--images-dir")
            .arg(dir)
            .args(extra)
            .envs(env.iter().copied())
            .env("WASMPOD_LOG", "wasmpod_agent=debug,warn")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut kubeconfig = None;
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if let Some(path) = line.strip_prefix("KUBECONFIG=") {
                kubeconfig = Some(PathBuf::from(path));
                break;
            }
        }
        let kubeconfig = kubeconfig.expect("wasmpod serve printed no KUBECONFIG line");
        Agent {
            dir: dir.to_owned(),
            child,
            kubeconfig,
        }
    }

    /// kubectl with this agent's kubeconfig, bounded to a minute.
    pub(crate) fn kubectl(&self, args: &[&str]) -> Output {
        Command::new("timeout")
            .arg("60")
            .arg("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.dir)
            .output()
            .expect("kubectl runs")
    }

    /// Puts the test guest under the images dir as `agnhost.wasm`: `kubectl run` takes an image
    /// name, not a path, and the agent finds it under `--images-dir`.
    pub(crate) fn provide_agnhost(&self) {
        std::fs::copy(
            wasmpod_tests::guests::AGNHOST_P1,
            self.dir.join("agnhost.wasm"),
        )
        .unwrap();
    }

    /// kubectl with `input` on its stdin, bounded to a minute.
    pub(crate) fn kubectl_with_input(&self, args: &[&str], input: &[u8]) -> Output {
        use std::io::Write as _;
        let mut child = Command::new("timeout")
            .arg("60")
            .arg("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    }

    /// kubectl that must succeed: its stdout.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// kubectl that must fail: its stderr.
    pub(crate) fn fails(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            !out.status.success(),
            "kubectl {args:?} succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Writes `yaml` (with the guests filled in) to a file and returns its path.
    pub(crate) fn file(&self, name: &str, yaml: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, fill(yaml)).unwrap();
        path.display().to_string()
    }

    /// `kubectl create -f` of `yaml`.
    pub(crate) fn create(&self, yaml: &str) -> String {
        let file = self.file("created.yaml", yaml);
        self.ok(&["create", "-f", &file])
    }

    /// Runs kubectl until its stdout satisfies `check` (at most `limit`); returns that stdout.
    pub(crate) fn until(
        &self,
        args: &[&str],
        limit: Duration,
        check: impl Fn(&str) -> bool,
    ) -> String {
        let start = Instant::now();
        loop {
            let out = self.kubectl(args);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if out.status.success() && check(&text) {
                return text;
            }
            assert!(
                start.elapsed() < limit,
                "kubectl {args:?} never matched; last: {text}{}\n{}",
                String::from_utf8_lossy(&out.stderr),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The pod as JSON.
    pub(crate) fn pod(&self, name: &str) -> Value {
        serde_json::from_str(&self.ok(&["get", "pod", name, "-o", "json"])).unwrap()
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    /// `kill -9` of the agent.
    pub(crate) fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The table row of `name` in `kubectl get pods` output, split into its cells.
pub(crate) fn row(table: &str, name: &str) -> Vec<String> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in:\n{table}"))
        .split("   ")
        .map(|c| c.trim().to_owned())
        .filter(|c| !c.is_empty())
        .collect()
}

pub(crate) fn status_of(table: &str, name: &str) -> String {
    row(table, name)[2].clone()
}

pub(crate) const LIMIT: Duration = Duration::from_secs(30);
