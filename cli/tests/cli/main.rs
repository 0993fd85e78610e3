//! `wasmpod` as a user runs it, one module per command: `run` (output, exit codes, the event
//! stream, the status file, node flags, bad input at run time), its signals, `validate` (every
//! kind of bad input) and `compile` (the compile cache, precompiled artefacts).

mod compile;
mod run;
mod signals;
mod validate;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmpod_tests::{PodYaml, container_yaml, fill};

pub(crate) struct Dir {
    tmp: tempfile::TempDir,
}

impl Dir {
    pub(crate) fn new() -> Dir {
        wasmpod_tests::warm_shared_cache();
        Dir {
            tmp: tempfile::tempdir().unwrap(),
        }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, fill(text)).unwrap();
        path
    }

    /// Writes `pod` as `pod.yaml`.
    pub(crate) fn pod(&self, pod: &PodYaml) -> PathBuf {
        self.write("pod.yaml", &pod.build())
    }

    /// The log directory of container `c` of the one pod that ran.
    pub(crate) fn log_dir(&self, container: &str) -> PathBuf {
        let logs = self.path("state").join("logs");
        let pod = std::fs::read_dir(logs)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        pod.join(container)
    }

    pub(crate) fn wasmpod(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_wasmpod"));
        cmd.env("XDG_CACHE_HOME", self.path("xdg-cache"))
            .env("XDG_STATE_HOME", self.path("xdg-state"));
        cmd
    }

    /// `wasmpod run` on `pod` with the test's state dir, the shared compile cache and `extra`.
    pub(crate) fn run_command(&self, pod: &Path, extra: &[&str]) -> Command {
        let mut cmd = self.wasmpod();
        cmd.arg("run")
            .arg("--state-dir")
            .arg(self.path("state"))
            .arg("--cache-dir")
            .arg(wasmpod_tests::shared_cache())
            .arg("--image-store")
            .arg(self.path("images"))
            .args(extra)
            .arg(pod);
        cmd
    }

    /// Starts `wasmpod run` on `pod` with its stdin and stdout piped to the test.
    pub(crate) fn run_piped(&self, pod: &Path) -> std::process::Child {
        self.run_command(pod, &[])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    }

    pub(crate) fn run(&self, pod: &Path, extra: &[&str]) -> Output {
        self.run_command(pod, extra).output().unwrap()
    }

    /// Starts `wasmpod run` on `pod` and returns it once the first line of output arrived.
    #[cfg(unix)]
    pub(crate) fn spawn(&self, pod: &Path, extra: &[&str]) -> (std::process::Child, String) {
        let mut child = self
            .run_command(pod, extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        (child, line)
    }

    /// Pods that wrote output under the state dir (a pod that never started leaves no log).
    pub(crate) fn pods_started(&self) -> usize {
        std::fs::read_dir(self.path("state").join("logs"))
            .map(|d| d.count())
            .unwrap_or(0)
    }
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub(crate) fn events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub(crate) const HELLO: &str = r#"
apiVersion: v1
kind: Pod
metadata: { name: hello }
spec:
  restartPolicy: Never
  containers:
  - { name: p1, image: "{p1}", args: [print, "hello from p1", eprint, "to stderr"] }
  - { name: p2, image: "{p2}", args: [print, "hello from p2"] }
"#;

#[cfg(unix)]
pub(crate) fn sigterm(child: &std::process::Child) {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
}
