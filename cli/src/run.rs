//! `wasmpod run`: one pod in the foreground, its output on stdout and stderr, its events and
//! final status where asked; exit 0 when it Succeeded, 1 when it Failed, 2 for bad input.

use std::io::{IsTerminal, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use wasmpod::{Node, PodFiles, PodHandle, PodOptions, Reason, Stream};

use crate::node::NodeArgs;
use crate::printer::{self, Printer};
use crate::signals::Signals;

#[derive(Args)]
pub(crate) struct RunArgs {
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

/// Runs the pod of `args` until it ends; its exit code.
pub(crate) async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let (spec, classes) = match PodFiles::read(&args.pod, &args.config) {
        Ok(files) => (files.spec, files.priority_classes),
        Err(e) => {
            printer::report(&format!("{e}\n"));
            return Ok(ExitCode::from(2));
        }
    };
    // Every output is opened before the pod exists: a bad path is bad input (exit 2), not a
    // failure after the pod started.
    let events_out = args.events.as_deref().map(open_output).transpose()?;
    // Events on stdout are whole JSON lines among the containers' lines: no line is left open.
    let stdout_whole_lines = args.events.as_deref() == Some(Path::new("-"));
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
            printer::report(&format!(
                "{}: {second}: wasmpod run connects its stdin to one container, and {first} asks \
                 for it too\n",
                args.pod.display()
            ));
            return Ok(ExitCode::from(2));
        }
    };
    let options = args.node.options().priority_classes(classes);
    // A pod file given to the node runs on it, as the kubelet's file source binds its pods.
    let mut spec = spec;
    if let Some(other) = spec.bind_to(&options.node_name) {
        printer::diagnostic(&format!(
            "wasmpod: {}: spec.nodeName {other:?} names another node: the pod runs on this one \
             ({:?})\n",
            args.pod.display(),
            options.node_name
        ));
    }
    let node = Node::new(options)?;
    if let Err(why) = node.check_fits(&spec) {
        printer::report(&format!("{}: {why}\n", args.pod.display()));
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
            printer::report(&format!("{}: {e}\n", args.pod.display()));
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
        let mut stdout = Printer::stdout(stdout_whole_lines);
        while let Some(out) = output.blocking_recv() {
            let _ = match out.stream {
                Stream::Stdout => stdout.print(
                    &mut std::io::stdout(),
                    &out.container,
                    &out.line,
                    out.partial,
                ),
                Stream::Stderr => {
                    printer::stderr(&out.container, &out.line, out.partial);
                    Ok(())
                }
            };
            progress.fetch_add(1, Ordering::Relaxed);
        }
        let _ = stdout.end(&mut std::io::stdout());
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
            None => {
                printer::report("wasmpod: the event stream could not be written: nobody reads it\n")
            }
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
    // A module that ran on baseline code is being optimized: its code goes to the compile
    // cache, for the next run, before the process ends.
    node.optimized().await;
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
            printer::report(&format!(
                "wasmpod: {}: container {} ended {} (exit code {}){message}\n",
                pod.display(),
                c.name,
                t.reason.as_deref().unwrap_or("Error"),
                t.exit_code,
            ));
        }
    }
    if let Some(message) = &status.message {
        printer::report(&format!("wasmpod: {}: {message}\n", pod.display()));
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

/// Says on stderr why the pod waits, when the node has no room for it.
async fn report_pending(pod: PodHandle) {
    let mut events = pod.events();
    while let Some(event) = events.next().await {
        if event.reason == Reason::FailedScheduling {
            printer::diagnostic(&format!(
                "wasmpod: pod {} is Pending: {}\n",
                pod.name(),
                event.message
            ));
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
            printer::diagnostic(&format!("\r\x1b[K{}", line.join("; ")));
            shown = true;
        } else if shown {
            printer::diagnostic("\r\x1b[K");
            shown = false;
        }
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
