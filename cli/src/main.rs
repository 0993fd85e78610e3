//! `wasmpod`: run Kubernetes Pods whose containers are WASI programs.
//!
//! The commands and their exit codes are fixed by the project's contract: `run` exits 0 when
//! the pod Succeeded, 1 when it Failed, 2 for bad input (with the errors on stderr).

#[cfg(feature = "compiler")]
mod compile;
mod node;
mod printer;
mod run;
#[cfg(feature = "agent")]
mod serve;
mod signals;
#[cfg(feature = "agent")]
mod systemd;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "wasmpod",
    version,
    about = "Run Kubernetes Pods of WASI containers on wasmtime"
)]
struct Cli {
    /// How wasmpod writes its own diagnostics on stderr: `text` for a person, `json` for
    /// machines (one object a line: time, level, target, message and fields; for journald,
    /// Loki or Vector). Containers' output is not affected.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run one pod in the foreground until it ends; exit 0 if it Succeeded, 1 if it Failed.
    Run(Box<run::RunArgs>),
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("WASMPOD_LOG")
        .unwrap_or_else(|_| "warn".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| printer::Diagnostics);
    match cli.log_format {
        // Colours only for a person reading a terminal, not in a file or a pipe.
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs.json().flatten_event(true).init(),
    }
    match cli.command {
        Command::Validate { pod, config } => validate::validate(&pod, &config),
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
            let code = match runtime.block_on(serve::serve(*args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    printer::report(&format!("wasmpod: {e:#}\n"));
                    ExitCode::from(2)
                }
            };
            printer::finish();
            code
        }
        Command::Run(args) => {
            let runtime = tokio::runtime::Runtime::new().expect("cannot start the async runtime");
            let code = match runtime.block_on(run::run(*args)) {
                Ok(code) => code,
                Err(e) => {
                    printer::report(&format!("wasmpod: {e:#}\n"));
                    ExitCode::from(2)
                }
            };
            // What stderr takes in time: a stderr nobody reads does not keep wasmpod running.
            printer::finish();
            // Nor is the runtime shut down (its idle threads woken and joined): the pod is gone
            // and its output written.
            std::mem::forget(runtime);
            code
        }
    }
}
