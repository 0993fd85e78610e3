//! `wasmpod`: run Kubernetes Pods whose containers are WASI programs.
//!
//! The commands and their exit codes are fixed by the project's contract: `run` exits 0 when
//! the pod Succeeded, 1 when it Failed, 2 for bad input (with the errors on stderr).

#[cfg(feature = "compiler")]
mod compile;
#[cfg(feature = "agent")]
mod serve;

use std::io::{IsTerminal, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use wasmpod::k8s_openapi::api::core::v1::Taint;
use wasmpod::k8s_openapi::api::scheduling::v1::PriorityClass;
use wasmpod::{
    BackoffOptions, Egress, ImageGc, InvalidPod, LogLimits, Node, NodeOptions, PodHandle,
    PodOptions, PodSpec, Reason, Stream,
};

#[derive(Parser)]
#[command(
    name = "wasmpod",
    version,
    about = "Run Kubernetes Pods of WASI containers on wasmtime"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one pod in the foreground until it ends; exit 0 if it Succeeded, 1 if it Failed.
    Run(Box<RunArgs>),
    /// Run the node agent until SIGTERM or Ctrl-C: keep pods across restarts in the state dir
    /// and serve the Kubernetes API to kubectl (the kubeconfig is written under the state dir).
    #[cfg(feature = "agent")]
    Serve(Box<serve::ServeArgs>),
    /// Compile a module or component ahead of time into a `.cwasm` that a node (also one built
    /// without a compiler) runs as it is.
    #[cfg(feature = "compiler")]
    Compile(compile::CompileArgs),
    /// Check a Pod YAML file; print `valid` or every error.
    Validate {
        /// YAML with the ConfigMap, Secret and PriorityClass documents the pod uses. Repeatable.
        #[arg(long, value_name = "FILE")]
        config: Vec<PathBuf>,
        /// The Pod YAML file.
        pod: PathBuf,
    },
}

#[derive(Args)]
struct RunArgs {
    /// Write the event stream (JSON Lines) to FILE, or `-` for stdout.
    #[arg(long, value_name = "FILE")]
    events: Option<PathBuf>,
    /// Write the final PodStatus JSON to FILE.
    #[arg(long, value_name = "FILE")]
    status: Option<PathBuf>,
    /// Publish a container port of the pod on the host: `HOSTPORT:CONTAINERPORT` listens on
    /// 127.0.0.1, `IP:HOSTPORT:CONTAINERPORT` on IP. Repeatable.
    #[arg(long, value_name = "[IP:]HOSTPORT:CONTAINERPORT", value_parser = parse_publish)]
    publish: Vec<(SocketAddr, u16)>,
    /// YAML with the ConfigMap and Secret documents the pod's volumes and env use, and the
    /// PriorityClasses the node knows (the pod file may carry them too). Repeatable.
    #[arg(long, value_name = "FILE")]
    config: Vec<PathBuf>,
    #[command(flatten)]
    node: NodeArgs,
    /// The Pod YAML file.
    pod: PathBuf,
}

/// Options of the node that runs the pods.
#[derive(Args)]
struct NodeArgs {
    /// How instances use the address space: `compact` (bounds-checked memories that reserve
    /// their size; for little address space) or `reserved` (4 GiB reservations, no bounds
    /// checks) [default: what the process's address space allows].
    #[arg(long, value_name = "MODE", value_parser = parse_address_space)]
    address_space: Option<wasmpod::AddressSpace>,
    /// First crash-loop backoff delay.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    backoff_initial: Duration,
    /// Largest crash-loop backoff delay.
    #[arg(long, value_name = "DURATION", default_value = "300s", value_parser = humantime::parse_duration)]
    backoff_max: Duration,
    /// A container that ran this long restarts with the initial delay again.
    #[arg(long, value_name = "DURATION", default_value = "600s", value_parser = humantime::parse_duration)]
    backoff_reset: Duration,
    /// Directory of compiled modules [default: the user's cache dir]
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Directory of logs and pod state [default: the user's state dir]
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Whether pods may connect to addresses outside the node's pod network.
    #[arg(long, value_name = "POLICY", default_value = "allow", value_parser = parse_egress)]
    egress: Egress,
    /// A container's log file is rotated past this size (the kubelet's containerLogMaxSize).
    #[arg(long, value_name = "SIZE", default_value = "10Mi", value_parser = parse_size)]
    container_log_max_size: u64,
    /// Labels of the node, `KEY=VALUE,...`, beside kubernetes.io/hostname, os and arch (the
    /// kubelet's --node-labels): what pods' nodeSelectors match.
    #[arg(long, value_name = "KEY=VALUE,...", value_delimiter = ',', value_parser = parse_label)]
    node_labels: Vec<(String, String)>,
    /// Taints of the node, `KEY[=VALUE]:EFFECT,...` (the kubelet's --register-with-taints):
    /// pods must tolerate each NoSchedule and NoExecute one.
    #[arg(long, value_name = "KEY=VALUE:EFFECT,...", value_delimiter = ',', value_parser = parse_taint)]
    register_with_taints: Vec<Taint>,
    /// A registry (`HOST:PORT`) pulled from over plain HTTP; every other is HTTPS only.
    #[arg(long, value_name = "HOST:PORT")]
    insecure_registry: Vec<String>,
    /// A registry (`HOST:PORT`) whose precompiled layers (machine code from `wasmpod compile`)
    /// this node runs as they are: trust it as you trust this binary. Repeatable.
    #[arg(long, value_name = "HOST:PORT")]
    precompiled_registry: Vec<String>,
    /// A docker-style config file with registry credentials [default: $DOCKER_CONFIG/config.json
    /// or ~/.docker/config.json, when it exists].
    #[arg(long, value_name = "FILE")]
    registry_config: Option<PathBuf>,
    /// The image store's size budget: past 85 % of it, unused images are removed, least
    /// recently used first, down to 80 % (the kubelet's image garbage collection).
    #[arg(long, value_name = "SIZE", default_value = "10Gi", value_parser = parse_size)]
    image_gc_limit: u64,
    /// Log files kept per container instance (the kubelet's containerLogMaxFiles).
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..))]
    container_log_max_files: u16,
}

/// `KEY[=VALUE]:EFFECT`.
fn parse_taint(s: &str) -> Result<Taint, String> {
    let (kv, effect) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("invalid taint {s:?}: expected KEY[=VALUE]:EFFECT"))?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(format!(
            "invalid taint effect {effect:?}: must be NoSchedule, PreferNoSchedule or NoExecute"
        ));
    }
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    if key.is_empty() {
        return Err(format!("invalid taint {s:?}: the key is empty"));
    }
    Ok(Taint {
        key: key.to_owned(),
        value: Some(value.to_owned()),
        effect: effect.to_owned(),
        time_added: None,
    })
}

/// `KEY=VALUE`.
fn parse_label(pair: &str) -> Result<(String, String), String> {
    match pair.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("invalid label {pair:?}: expected KEY=VALUE")),
    }
}

/// A size in bytes, with an optional `Ki`, `Mi` or `Gi` suffix.
fn parse_address_space(s: &str) -> Result<wasmpod::AddressSpace, String> {
    match s {
        "compact" => Ok(wasmpod::AddressSpace::Compact),
        "reserved" => Ok(wasmpod::AddressSpace::Reserved),
        _ => Err("compact or reserved".into()),
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    let (digits, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, ""),
    };
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        _ => return Err("must be a number of bytes, optionally with Ki, Mi or Gi".into()),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("invalid size {s:?}"))
}

fn parse_egress(s: &str) -> Result<Egress, String> {
    match s {
        "allow" => Ok(Egress::Allow),
        "deny" => Ok(Egress::Deny),
        _ => Err("must be allow or deny".into()),
    }
}

fn parse_publish(s: &str) -> Result<(SocketAddr, u16), String> {
    let (host, container) = s
        .rsplit_once(':')
        .ok_or("expected HOSTPORT:CONTAINERPORT or IP:HOSTPORT:CONTAINERPORT")?;
    let port = |p: &str| match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("invalid port {p:?}: must be between 1 and 65535")),
    };
    let host = match host.rsplit_once(':') {
        None => SocketAddr::from(([127, 0, 0, 1], port(host)?)),
        Some((ip, hp)) => {
            let ip = ip.trim_start_matches('[').trim_end_matches(']');
            let ip: IpAddr = ip
                .parse()
                .map_err(|_| format!("invalid IP address {ip:?}"))?;
            SocketAddr::new(ip, port(hp)?)
        }
    };
    Ok((host, port(container)?))
}

impl NodeArgs {
    fn options(&self) -> NodeOptions {
        // Before the default options, which size the node's capacity by the mode.
        if let Some(mode) = self.address_space {
            // The first choice of the process: nothing has chosen before.
            let _ = mode.set_for_process();
        }
        let mut options = NodeOptions::default().backoff(BackoffOptions {
            initial: self.backoff_initial,
            max: self.backoff_max,
            reset: self.backoff_reset,
        });
        if let Some(dir) = &self.state_dir {
            options = options.state_dir(dir);
        }
        if let Some(dir) = &self.cache_dir {
            options = options.cache_dir(Some(dir.clone()));
        }
        options = options
            .labels(self.node_labels.clone())
            .taints(self.register_with_taints.clone());
        for registry in &self.insecure_registry {
            options = options.insecure_registry(registry.clone());
        }
        for registry in &self.precompiled_registry {
            options = options.precompiled_registry(registry.clone());
        }
        let docker_config = std::env::var_os("DOCKER_CONFIG")
            .map(PathBuf::from)
            .or_else(|| dirs::home_dir().map(|h| h.join(".docker")))
            .map(|d| d.join("config.json"))
            .filter(|f| f.is_file());
        options = options
            .registry_config(self.registry_config.clone().or(docker_config))
            .image_gc(ImageGc {
                limit: self.image_gc_limit,
                ..ImageGc::default()
            });
        options.egress(self.egress).log_limits(LogLimits::new(
            self.container_log_max_size,
            self.container_log_max_files.into(),
        ))
    }
}

/// On a terminal, a line of pull progress while registry images are pulled.
async fn show_pulls(node: Node) {
    let mut shown = false;
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let pulls = node.pulls();
        let line: Vec<String> = pulls
            .iter()
            .map(|p| {
                format!(
                    "pulling {}: {} of {} layers, {:.1} MiB",
                    p.image,
                    p.layers_done,
                    p.layers,
                    p.bytes as f64 / 1048576.0
                )
            })
            .collect();
        if !line.is_empty() {
            eprint!("\r\x1b[K{}", line.join("; "));
            shown = true;
        } else if shown {
            eprint!("\r\x1b[K");
            shown = false;
        }
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WASMPOD_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Validate { pod, config } => {
            match PodSpec::from_files(&pod, &config).and_then(|_| priority_classes(&pod, &config)) {
                Ok(_) => {
                    println!("valid");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(2)
                }
            }
        }
        #[cfg(feature = "compiler")]
        Command::Compile(args) => match compile::compile(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("wasmpod: {e:#}");
                ExitCode::from(2)
            }
        },
        #[cfg(feature = "agent")]
        Command::Serve(args) => {
            let runtime = tokio::runtime::Runtime::new().expect("cannot start the async runtime");
            match runtime.block_on(serve::serve(*args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("wasmpod: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Run(args) => {
            let runtime = tokio::runtime::Runtime::new().expect("cannot start the async runtime");
            let code = match runtime.block_on(run(*args)) {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("wasmpod: {e:#}");
                    ExitCode::from(2)
                }
            };
            // Nor is the runtime shut down (its idle threads woken and joined): the pod is gone
            // and its output written.
            std::mem::forget(runtime);
            code
        }
    }
}

async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let spec = match PodSpec::from_files(&args.pod, &args.config) {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(2));
        }
    };
    let classes = match priority_classes(&args.pod, &args.config) {
        Ok(classes) => classes,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(2));
        }
    };
    // Every output is opened before the pod exists: a bad path is bad input (exit 2), not a
    // failure after the pod started.
    let events_out = args.events.as_deref().map(open_output).transpose()?;
    let status_out = match &args.status {
        Some(path) => Some(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        ),
        None => None,
    };
    // `wasmpod run`'s stdin goes to the pod's one container with `stdin: true`.
    let stdin_container = match spec.stdin_containers().collect::<Vec<_>>().as_slice() {
        [] => None,
        [(name, _)] => Some((*name).to_owned()),
        [(_, first), (_, second), ..] => {
            eprintln!(
                "{}: {second}: wasmpod run connects its stdin to one container, and {first} asks for it too",
                args.pod.display()
            );
            return Ok(ExitCode::from(2));
        }
    };
    let node = Node::new(args.node.options().priority_classes(classes))?;
    if let Err(why) = node.check_fits(&spec) {
        eprintln!("{}: {why}", args.pod.display());
        return Ok(ExitCode::from(2));
    }
    let signals = Signals::listen().context("cannot listen for signals")?;
    let (tx, mut output) = tokio::sync::mpsc::channel(1024);
    let options = args
        .publish
        .iter()
        .fold(PodOptions::default().output(tx), |o, &(host, port)| {
            o.publish(host, port)
        });
    let pod = match node.create_pod(spec, options).await {
        Ok(pod) => pod,
        Err(e) => {
            eprintln!("{}: {e}", args.pod.display());
            return Ok(ExitCode::from(2));
        }
    };
    // Container output is printed by a thread of its own: a stdout nobody reads blocks that
    // thread only (the node drops lines for a watcher that does not keep up; the logs have
    // them), never the pod or wasmpod's exit.
    let (printed_tx, printed) = tokio::sync::oneshot::channel::<()>();
    let written = Arc::new(AtomicU64::new(0));
    let progress = written.clone();
    std::thread::spawn(move || {
        // Write errors (a closed pipe: `wasmpod run pod.yaml | head`) are ignored: the pod runs
        // on and its output stays in the log files.
        while let Some(out) = output.blocking_recv() {
            let _ = match out.stream {
                Stream::Stdout => writeln!(std::io::stdout(), "[{}] {}", out.container, out.line),
                Stream::Stderr => writeln!(std::io::stderr(), "[{}] {}", out.container, out.line),
            };
            progress.fetch_add(1, Ordering::Relaxed);
        }
        drop(printed_tx);
    });
    let events = events_out.map(|out| write_events(pod.clone(), out, written.clone()));
    tokio::spawn(forward_signals(signals, pod.clone()));
    if let Some(container) = stdin_container {
        tokio::spawn(forward_stdin(pod.clone(), container));
    }
    tokio::spawn(report_pending(pod.clone()));
    if std::io::stderr().is_terminal() {
        tokio::spawn(show_pulls(node.clone()));
    }

    let status = pod.wait().await;
    pod.delete(None);
    pod.deleted().await;
    // Everything the pod printed is on stdout before `run` ends, unless nobody reads it: the
    // writers are waited for only while they make progress.
    let _ = drain(printed, &written).await;
    if let Some(events) = events {
        match drain(events, &written).await {
            Some(result) => result.context("cannot write the event stream")?,
            None => eprintln!("wasmpod: the event stream could not be written: nobody reads it"),
        }
    }
    if let (Some(path), Some(mut file)) = (&args.status, status_out) {
        let json = serde_json::to_string_pretty(&status)? + "\n";
        file.write_all(json.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if status.phase.as_deref() != Some("Succeeded") {
        report_failures(&args.pod, &status);
    }
    // The process ends here: the node is not torn down (every module's code unmapped, every
    // table freed) only for the kernel to do it again at exit.
    std::mem::forget(node);
    Ok(match status.phase.as_deref() {
        Some("Succeeded") => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    })
}

/// Copies wasmpod's stdin to `container`'s once it runs, and ends the container's stdin at
/// wasmpod's end of file. Read on a thread of its own, which the process's exit does not wait
/// for (a terminal nobody types on).
async fn forward_stdin(pod: PodHandle, container: String) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    std::thread::spawn(move || {
        let mut buf = vec![0; 16 * 1024];
        loop {
            match std::io::stdin().read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let running = |s: &wasmpod::k8s_openapi::api::core::v1::PodStatus| {
        s.container_statuses
            .iter()
            .chain(&s.init_container_statuses)
            .flatten()
            .any(|c| c.name == container && c.state.as_ref().is_some_and(|s| s.running.is_some()))
    };
    let status = pod
        .wait_until(|s| running(s) || matches!(s.phase.as_deref(), Some("Succeeded" | "Failed")))
        .await;
    if !running(&status) {
        return;
    }
    let stdin = match pod.attach_stdin(&container).await {
        Ok(stdin) => stdin,
        Err(why) => return tracing::warn!("cannot attach wasmpod's stdin: {why}"),
    };
    while let Some(chunk) = rx.recv().await {
        if stdin.write_all(&chunk).await.is_err() {
            return;
        }
    }
    stdin.close().await;
}

/// Why each container that failed did (its last end that was not a success: reason, exit code,
/// message), on stderr, as `kubectl describe` shows a container's last state.
fn report_failures(pod: &Path, status: &wasmpod::k8s_openapi::api::core::v1::PodStatus) {
    let statuses = status
        .init_container_statuses
        .iter()
        .chain(&status.container_statuses)
        .flatten();
    for c in statuses {
        let ends = [&c.state, &c.last_state];
        let failed = ends
            .into_iter()
            .filter_map(|s| s.as_ref()?.terminated.as_ref())
            .find(|t| t.exit_code != 0);
        if let Some(t) = failed {
            let message = t
                .message
                .as_deref()
                .map(|m| format!(": {}", m.trim_end()))
                .unwrap_or_default();
            eprintln!(
                "wasmpod: {}: container {} ended {} (exit code {}){message}",
                pod.display(),
                c.name,
                t.reason.as_deref().unwrap_or("Error"),
                t.exit_code,
            );
        }
    }
    if let Some(message) = &status.message {
        eprintln!("wasmpod: {}: {message}", pod.display());
    }
}

/// How long `run` waits, once the pod is gone, for its output and event stream to be written
/// out, at most, and for the writers to write anything at all.
const OUTPUT_PATIENCE: Duration = Duration::from_secs(5);
const OUTPUT_STALL: Duration = Duration::from_millis(300);

/// Waits for a writer thread to finish while the writers make progress (`written` counts their
/// lines): a stdout or event stream nobody reads stalls them, and `run` then ends without the
/// rest (the log files have it), however much is left.
async fn drain<T>(done: tokio::sync::oneshot::Receiver<T>, written: &AtomicU64) -> Option<T> {
    let deadline = tokio::time::Instant::now() + OUTPUT_PATIENCE;
    tokio::pin!(done);
    let mut seen = written.load(Ordering::Relaxed);
    loop {
        match tokio::time::timeout(OUTPUT_STALL, &mut done).await {
            Ok(result) => return result.ok(),
            Err(_) => {
                let now = written.load(Ordering::Relaxed);
                if now == seen || tokio::time::Instant::now() >= deadline {
                    return None;
                }
                seen = now;
            }
        }
    }
}

/// The PriorityClass documents of the pod file and the `--config` files.
fn priority_classes(pod: &Path, config: &[PathBuf]) -> Result<Vec<PriorityClass>, InvalidPod> {
    let mut classes = Vec::new();
    for file in std::iter::once(pod).chain(config.iter().map(PathBuf::as_path)) {
        classes.extend(wasmpod::read_priority_classes(file)?);
    }
    Ok(classes)
}

/// Says on stderr why the pod waits, when the node has no room for it.
async fn report_pending(pod: PodHandle) {
    let mut events = pod.events();
    while let Some(event) = events.next().await {
        if event.reason == Reason::FailedScheduling {
            eprintln!("wasmpod: pod {} is Pending: {}", pod.name(), event.message);
        }
    }
}

/// Where the event stream goes: the file at `path`, or stdout for `-`.
fn open_output(path: &Path) -> anyhow::Result<Box<dyn Write + Send>> {
    if path == Path::new("-") {
        return Ok(Box::new(std::io::stdout()));
    }
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    Ok(Box::new(file))
}

/// Writes the pod's event stream from a thread of its own (a blocking writer never holds up
/// the async runtime); the handle completes once every event was written.
fn write_events(
    pod: PodHandle,
    mut out: Box<dyn Write + Send>,
    written: Arc<AtomicU64>,
) -> tokio::sync::oneshot::Receiver<std::io::Result<()>> {
    let (lines_tx, mut lines) = tokio::sync::mpsc::channel::<Vec<u8>>(1024);
    let (done_tx, done) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut result = Ok(());
        while let Some(line) = lines.blocking_recv() {
            // One write per line: with `--events -` container output shares stdout, and a line
            // written in pieces could be split by one of theirs.
            if let Err(e) = out.write_all(&line).and_then(|()| out.flush()) {
                result = Err(e);
                break;
            }
            written.fetch_add(1, Ordering::Relaxed);
        }
        let _ = done_tx.send(result);
    });
    tokio::spawn(async move {
        let mut events = pod.events();
        while let Some(event) = events.next().await {
            let Ok(mut line) = serde_json::to_vec(&event) else {
                continue;
            };
            line.push(b'\n');
            if lines_tx.send(line).await.is_err() {
                break;
            }
        }
    });
    done
}

/// Ctrl-C or SIGTERM deletes the pod gracefully; a second one forces it (grace 0).
/// Ctrl-C and SIGTERM, listened for from before the pod is created: a signal that came before
/// the listener would meet the default action and end wasmpod without deleting the pod.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    #[cfg(unix)]
    fn listen() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    #[cfg(not(unix))]
    fn listen() -> std::io::Result<Signals> {
        Ok(Signals {})
    }

    /// The next signal; `None` if signals can no longer be received.
    #[cfg(unix)]
    async fn next(&mut self) -> Option<()> {
        tokio::select! {
            r = self.term.recv() => r,
            r = self.interrupt.recv() => r,
        }
    }

    #[cfg(not(unix))]
    async fn next(&mut self) -> Option<()> {
        tokio::signal::ctrl_c().await.ok()
    }
}

/// The first signal deletes the pod gracefully, the second forces it.
async fn forward_signals(mut signals: Signals, pod: PodHandle) {
    let mut forced = false;
    while signals.next().await.is_some() {
        pod.delete(forced.then_some(Duration::ZERO));
        forced = true;
    }
}
