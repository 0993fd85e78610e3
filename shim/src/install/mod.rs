//! `containerd-shim-wasmpod-v1 install` and `uninstall`: the shim put on a node and made a
//! runtime handler of the containerd there, in one command, and taken away again.
//!
//! `install` decides everything before it changes anything (a config it cannot read, or one
//! where another runtime is named `wasmpod`, is refused untouched); then it puts the shim in
//! place (a rename: never half a binary), adds the runtime to containerd's config where the
//! config's version reads it (keeping a backup), restarts containerd the way the host runs it
//! and waits until containerd's CRI lists the handler. Each step prints what it did; a second
//! run changes nothing. `uninstall` puts the config back byte for byte (or, if it was edited
//! since, takes only the runtime out), restarts containerd, waits until the handler is gone and
//! removes the shim.
//!
//! - [`node`]: where the node's distribution keeps containerd's config.
//! - [`config`]: the edit of a config file or template.
//! - [`containerd`]: the process, its restart, its CRI.
//! - [`cluster`]: the RuntimeClass and the node's label, through the API server.

mod cluster;
mod config;
mod containerd;
mod files;
mod node;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;

use config::{HANDLER, Runtime};
use containerd::Process;
use files::{Paths, Record, digest, put_shim, read_optional, write_atomically};
use node::{Node, Source, host};

/// The shim's file name: what containerd runs for `io.containerd.wasmpod.v1`.
const SHIM: &str = "containerd-shim-wasmpod-v1";

/// What the binary does besides being containerd's shim.
#[derive(Debug, Parser)]
#[command(name = SHIM, version, about = "Installs wasmpod's containerd shim on this node, or removes it")]
enum Command {
    /// Puts the shim on the node and makes it containerd's runtime handler `wasmpod`.
    Install(Options),
    /// Takes the handler out of containerd's config and the shim off the node.
    Uninstall(Options),
}

#[derive(Debug, clap::Args)]
struct Options {
    /// Where the host's root filesystem is (`/host` in the DaemonSet's container).
    #[arg(long, default_value = "/")]
    host_root: PathBuf,
    /// containerd's config file (or the template a distribution renders it from, `*.tmpl`),
    /// when the node keeps it where no known distribution does.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The host directory the shim is put in.
    #[arg(long, default_value = "/usr/local/bin")]
    bin_dir: PathBuf,
    /// containerd's socket, when neither its command line nor its config names it.
    #[arg(long)]
    address: Option<PathBuf>,
    /// How long containerd may take to restart and answer.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    cluster: cluster::ClusterOptions,
}

/// Runs `install` or `uninstall` when the command line asks for one: the process's exit code.
/// `None` for containerd's own calls.
pub(crate) fn from_command_line() -> Option<i32> {
    let first = std::env::args_os().nth(1)?;
    if !matches!(
        first.to_str(),
        Some("install" | "uninstall" | "help" | "--help" | "-h" | "--version" | "-V")
    ) {
        return None;
    }
    let command = match Command::try_parse() {
        Ok(command) => command,
        Err(e) => {
            let _ = e.print();
            return Some(e.exit_code());
        }
    };
    let outcome = match command {
        Command::Install(o) => o.check().and_then(|()| install(&o)),
        Command::Uninstall(o) => o.check().and_then(|()| uninstall(&o)),
    };
    Some(match outcome {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    })
}

/// One step's line of output.
fn say(step: &str, what: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{step}: {what}");
}

fn install(o: &Options) -> anyhow::Result<()> {
    let node = locate(o);
    let target = edited_file(&node);
    let paths = Paths::of(&o.host_root, target);
    let shim = o.bin_dir.join(SHIM);
    let rendered = read_optional(&host(&o.host_root, &node.config))?;
    let current = read_optional(&paths.file)?;
    // Every decision first: a config that is refused leaves the node as it was.
    let systemd_cgroup = match rendered.as_deref().or(current.as_deref()) {
        Some(text) => {
            config::read(text)
                .with_context(|| format!("{}", node.config.display()))?
                .systemd_cgroup
        }
        None => false,
    };
    let runtime = Runtime {
        path: shim.to_string_lossy().into_owned(),
        systemd_cgroup,
    };
    let edit = match &node.source {
        Source::File(file) => config::add(current.as_deref().unwrap_or(""), &runtime)
            .with_context(|| format!("{}", file.display()))?,
        Source::Template { template, .. } => {
            let rendered = rendered.as_deref().with_context(|| {
                format!(
                    "{} is not there: start the distribution once, so that it writes containerd's config",
                    node.config.display()
                )
            })?;
            config::add_to_template(current.as_deref(), rendered, &runtime)
                .with_context(|| format!("{}", template.display()))?
        }
    };
    let containerd = Process::find(&node.config);
    let cluster = o.cluster.connect(&o.host_root)?;
    let plan = cluster.as_ref().map(cluster::Cluster::plan).transpose()?;

    // What a failed restart puts back.
    let before = Before {
        record: read_optional(&paths.record)?,
        shim: host(&o.host_root, &shim).exists(),
    };
    let installed = put_shim(&host(&o.host_root, &shim))?;
    match installed {
        true => say("shim", format!("{} installed", shim.display())),
        false => say("shim", format!("{} is up to date", shim.display())),
    }
    // The config names the shim's path, but containerd 1.6.0–1.6.20 and 1.7.0 ignore it and
    // look the shim up on their PATH.
    if let Some(path) = containerd.as_ref().and_then(|c| c.path.as_deref())
        && !std::env::split_paths(path).any(|dir| dir == o.bin_dir)
    {
        say(
            "shim",
            format!(
                "note: {} is not on containerd's PATH ({path}): containerd 1.6.0 to 1.6.20 and 1.7.0 \
                 look for the shim there, not at its runtime_path (use --bin-dir)",
                o.bin_dir.display()
            ),
        );
    }
    let changed = match edit {
        Some(text) => {
            let record = match paths.record()? {
                Some(mut record) => {
                    record.written = digest(text.as_bytes());
                    record
                }
                None => {
                    if let Some(old) = &current {
                        write_atomically(&paths.backup, old.as_bytes(), &paths.file)?;
                    }
                    Record {
                        file: target.to_owned(),
                        existed: current.is_some(),
                        written: digest(text.as_bytes()),
                        shim: installed.then(|| shim.clone()),
                    }
                }
            };
            write_atomically(
                &paths.record,
                &serde_json::to_vec_pretty(&record)?,
                &paths.file,
            )?;
            write_atomically(&paths.file, text.as_bytes(), &paths.file)?;
            let backup = if record.existed {
                format!("; the file as it was is {}", paths.backup.display())
            } else {
                String::new()
            };
            say(
                "config",
                format!(
                    "runtime `{HANDLER}` added to {}{}{backup}",
                    target.display(),
                    if systemd_cgroup {
                        " (with SystemdCgroup, as runc has it)"
                    } else {
                        ""
                    }
                ),
            );
            true
        }
        None => {
            say(
                "config",
                format!("{} already has the runtime `{HANDLER}`", target.display()),
            );
            false
        }
    };
    let socket = socket(o, &node, containerd.as_ref());
    let listed = match restart_and_wait(o, &node, containerd, changed, true) {
        Ok(listed) => listed,
        Err(e) if changed => {
            let put_back = Edit {
                paths: &paths,
                text: current.as_deref(),
                shim: &shim,
            };
            return Err(roll_back(o, &node, &socket, &put_back, &before, e));
        }
        Err(e) => return Err(e),
    };
    match (cluster, plan) {
        (Some(cluster), Some(plan)) if listed => cluster.apply(plan),
        (Some(_), _) => {
            say(
                "node",
                format!(
                    "not labelled {}: containerd is not running, so nothing says it lists the \
                     handler; run install again once it runs",
                    cluster::LABEL
                ),
            );
            Ok(())
        }
        _ => Ok(()),
    }
}

/// What was there before `install` wrote anything: its record of an earlier install, and
/// whether the shim was.
struct Before {
    record: Option<String>,
    shim: bool,
}

/// The config file `install` edited, and its text before (`None`: install made it).
struct Edit<'a> {
    paths: &'a Paths,
    text: Option<&'a str>,
    shim: &'a Path,
}

/// After containerd failed to come back with the edited config: the config and the record put
/// back, a shim put where there was none removed, containerd restarted on that config, so that
/// a failed install leaves the node's CRI as it found it. Returns the error to report.
fn roll_back(
    o: &Options,
    node: &Node,
    socket: &Path,
    edit: &Edit,
    before: &Before,
    error: anyhow::Error,
) -> anyhow::Error {
    let paths = edit.paths;
    let remove = |path: &Path| match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(anyhow::Error::from(e)),
        _ => Ok(()),
    };
    let put_back = match edit.text {
        Some(text) => write_atomically(&paths.file, text.as_bytes(), &paths.file),
        None => remove(&paths.file),
    }
    .and_then(|()| match &before.record {
        Some(record) => write_atomically(&paths.record, record.as_bytes(), &paths.file),
        None => remove(&paths.record).and_then(|()| remove(&paths.backup)),
    });
    if let Err(e) = put_back {
        return error.context(format!(
            "containerd did not come back with the runtime `{HANDLER}`, and {} could not be \
             put back as it was ({e:#})",
            paths.file.display()
        ));
    }
    say(
        "config",
        format!(
            "{} put back as it was: containerd did not come back with the runtime `{HANDLER}`",
            paths.file.display()
        ),
    );
    if !before.shim && remove(&host(&o.host_root, edit.shim)).is_ok() {
        say("shim", format!("{} removed", edit.shim.display()));
    }
    match Process::find(&node.config) {
        None => say(
            "containerd",
            "not running: it reads the config as it was when it starts",
        ),
        Some(process) => {
            let restarted = process.restart(&o.host_root, o.timeout).and_then(|()| {
                containerd::wait_for_handler(socket, HANDLER, before.record.is_some(), o.timeout)
            });
            match restarted {
                Ok(()) => say(
                    "containerd",
                    format!("restarted on the config as it was ({})", process.how()),
                ),
                Err(e) => say(
                    "containerd",
                    format!("not back after a second restart: {e:#}"),
                ),
            }
        }
    }
    error.context(format!(
        "install undone: containerd did not come back with the runtime `{HANDLER}`"
    ))
}

fn uninstall(o: &Options) -> anyhow::Result<()> {
    let node = locate(o);
    let target = edited_file(&node);
    let paths = Paths::of(&o.host_root, target);
    let record = paths.record()?;
    let current = read_optional(&paths.file)?;
    let containerd = Process::find(&node.config);
    // First no new pod of the class comes here; then the handler goes.
    if let Some(cluster) = o.cluster.connect(&o.host_root)? {
        cluster.unlabel()?;
    }
    let restored = match (&record, &current) {
        (Some(record), Some(text)) if digest(text.as_bytes()) == record.written => {
            if record.existed {
                let before = std::fs::read(&paths.backup).with_context(|| {
                    format!("cannot read the backup {}", paths.backup.display())
                })?;
                write_atomically(&paths.file, &before, &paths.file)?;
                say(
                    "config",
                    format!("{} restored as it was before install", target.display()),
                );
            } else {
                std::fs::remove_file(&paths.file)
                    .with_context(|| format!("cannot remove {}", paths.file.display()))?;
                say(
                    "config",
                    format!("{} removed (install made it)", target.display()),
                );
            }
            true
        }
        (_, Some(text)) => {
            let edit = match &node.source {
                Source::File(_) => config::remove(text),
                Source::Template { .. } => config::remove_from_template(text),
            }
            .with_context(|| format!("{}", target.display()))?;
            match edit {
                Some(text) => {
                    write_atomically(&paths.file, text.as_bytes(), &paths.file)?;
                    say(
                        "config",
                        format!(
                            "runtime `{HANDLER}` taken out of {} (edited since install: the other edits are kept)",
                            target.display()
                        ),
                    );
                    true
                }
                None => {
                    say(
                        "config",
                        format!("{} has no runtime `{HANDLER}`", target.display()),
                    );
                    false
                }
            }
        }
        (_, None) => {
            say("config", format!("{} is not there", target.display()));
            false
        }
    };
    restart_and_wait(o, &node, containerd, restored, false)?;
    match record.as_ref().and_then(|r| r.shim.as_deref()) {
        Some(shim) => {
            match std::fs::remove_file(host(&o.host_root, shim)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot remove {}", shim.display()));
                }
            }
            say("shim", format!("{} removed", shim.display()));
        }
        None => say("shim", "left where it is (install did not put it there)"),
    }
    for leftover in [&paths.backup, &paths.record] {
        match std::fs::remove_file(leftover) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("cannot remove {}", leftover.display()));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Restarts containerd when its config changed, then waits until its CRI lists the handler
/// (`listed`) or does not; returns whether containerd was seen to (it is not when it does not
/// run).
fn restart_and_wait(
    o: &Options,
    node: &Node,
    containerd: Option<Process>,
    changed: bool,
    listed: bool,
) -> anyhow::Result<bool> {
    let socket = socket(o, node, containerd.as_ref());
    if changed {
        let Some(process) = containerd else {
            say(
                "containerd",
                "not running: it reads the new config when it starts",
            );
            return Ok(false);
        };
        let start = Instant::now();
        process.restart(&o.host_root, o.timeout)?;
        say("containerd", format!("restarted ({})", process.how()));
        containerd::wait_for_handler(&socket, HANDLER, listed, o.timeout)?;
        say(
            "cri",
            format!(
                "containerd {} the handler `{HANDLER}`, {:.1} s after the restart began",
                if listed { "lists" } else { "no longer lists" },
                start.elapsed().as_secs_f64()
            ),
        );
    } else {
        say("containerd", "not restarted: its config did not change");
        if containerd.is_some() {
            containerd::wait_for_handler(&socket, HANDLER, listed, o.timeout)?;
            say(
                "cri",
                format!(
                    "containerd {} the handler `{HANDLER}`",
                    if listed { "lists" } else { "does not list" }
                ),
            );
            return Ok(true);
        }
    }
    Ok(changed)
}

/// The node's containerd, and what this run edits, said.
fn locate(o: &Options) -> Node {
    let node = node::find(&o.host_root, o.config.as_deref(), |rendered| {
        let text = std::fs::read_to_string(rendered).ok()?;
        config::read(&text).ok().map(|f| f.version.number())
    });
    match &node.source {
        Source::File(file) => say(
            "node",
            format!("{}; config {}", node.distribution, file.display()),
        ),
        Source::Template { template, rendered } => say(
            "node",
            format!(
                "{}; config {} rendered from {}",
                node.distribution,
                rendered.display(),
                template.display()
            ),
        ),
    }
    node
}

/// The file `install` edits: the config, or the template it is rendered from.
fn edited_file(node: &Node) -> &Path {
    match &node.source {
        Source::File(file) => file,
        Source::Template { template, .. } => template,
    }
}

/// containerd's socket (as this process reaches it): the option, its command line, its config,
/// or the distribution's.
fn socket(o: &Options, node: &Node, containerd: Option<&Process>) -> PathBuf {
    let named = o
        .address
        .clone()
        .or_else(|| containerd.and_then(|p| p.address.clone()))
        .or_else(|| {
            let text = std::fs::read_to_string(host(&o.host_root, &node.config)).ok()?;
            config::grpc_address(&text).map(PathBuf::from)
        })
        .unwrap_or_else(|| node.socket.clone());
    host(&o.host_root, &named)
}

impl Options {
    /// Refuses a host path that is not absolute: it would be read against this process's
    /// working directory, not the host's root.
    fn check(&self) -> anyhow::Result<()> {
        let paths = [
            ("--host-root", Some(&self.host_root)),
            ("--config", self.config.as_ref()),
            ("--bin-dir", Some(&self.bin_dir)),
            ("--address", self.address.as_ref()),
        ];
        for (flag, path) in paths {
            if let Some(path) = path
                && !path.is_absolute()
            {
                bail!("{flag} {} is not an absolute path", path.display());
            }
        }
        Ok(())
    }
}
