//! `wasmpod serve`: the node agent, with its Kubernetes API (the `agent` feature).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::node::NodeArgs;
use crate::signals::Signals;
use crate::systemd::Systemd;

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// Where the API listens (HTTPS); port 0 picks a free port.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Where relative image paths of pods are resolved [default: the current directory]
    #[arg(long, value_name = "DIR")]
    images_dir: Option<PathBuf>,
    /// The node's name [default: the host name]
    #[arg(long, value_name = "NAME")]
    node_name: Option<String>,
    /// A directory of static pod manifests (the kubelet's staticPodPath): each Pod file in it
    /// runs as a pod, removed files delete theirs, changed files replace theirs.
    #[arg(long, value_name = "DIR")]
    manifests: Option<PathBuf>,
    /// Let pods sent through the API have hostPath volumes (they read and write the host's
    /// files); refused by default, as the Pod Security Standards' baseline does.
    #[arg(long)]
    allow_host_path: bool,
    /// A directory whose precompiled images (`.cwasm`: machine code, run as it is) pods may
    /// name; none by default, since pods come from the API. Repeatable.
    #[arg(long, value_name = "DIR")]
    precompiled_dir: Vec<PathBuf>,
    /// How often containers' CPU and memory are read for `kubectl top` (metrics-server's
    /// resolution): the CPU shown is the rate between the last two readings.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = humantime::parse_duration)]
    metrics_resolution: std::time::Duration,
    /// Where the node's desired state comes from: an OCI artifact of manifests in Flux's
    /// format (`flux push artifact`), polled and applied as one set; what it made and no longer
    /// holds is pruned, objects made through the API are left alone.
    #[arg(long, value_name = "oci://REGISTRY/REPO:TAG")]
    source: Option<String>,
    /// How often the source is polled (each wait varies by a tenth; failures back off).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration, requires = "source")]
    source_interval: std::time::Duration,
    /// The source's artifacts are applied only with a cosign signature made with the key in
    /// FILE (a PEM public key, `cosign.pub`), checked offline.
    #[arg(long, value_name = "FILE", requires = "source")]
    verify_key: Option<PathBuf>,
    #[command(flatten)]
    node: NodeArgs,
}

/// `wasmpod serve`: the node agent, until SIGTERM or Ctrl-C.
pub(crate) async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut signals = Signals::listen().context("cannot listen for signals")?;
    let mut node = args
        .node
        .options()
        .precompiled_dirs(Some(args.precompiled_dir));
    if let Some(name) = args.node_name {
        node = node.node_name(name);
    }
    let mut options = wasmpod_agent::AgentOptions::default()
        .node(node)
        .listen(args.listen)
        .allow_host_path(args.allow_host_path)
        .metrics_resolution(args.metrics_resolution);
    if let Some(dir) = args.images_dir {
        options = options.images_dir(dir);
    }
    if let Some(dir) = args.manifests {
        options = options.manifests(dir);
    }
    if let Some(reference) = args.source {
        let mut source = wasmpod_agent::SourceOptions::new(&reference)
            .map_err(anyhow::Error::msg)
            .context("--source")?
            .interval(args.source_interval);
        if let Some(file) = args.verify_key {
            let key = crate::node::read_key(&file)
                .map_err(anyhow::Error::msg)
                .context("--verify-key")?;
            source = source.verify_key(key);
        }
        options = options.source(source);
    }
    let agent = wasmpod_agent::Agent::start(options).await?;
    println!(
        "wasmpod: serving the Kubernetes API on https://{}\nKUBECONFIG={}",
        agent.local_addr(),
        agent.kubeconfig().display()
    );
    let mut systemd = Systemd::from_env();
    if let Some(systemd) = &mut systemd {
        tokio::select! {
            () = systemd.ready(&agent) => {}
            _ = signals.next() => {
                systemd.stopping();
                agent.stop().await;
                return Ok(());
            }
        }
    }
    loop {
        let tick = async {
            match &mut systemd {
                Some(systemd) => {
                    tokio::time::sleep(systemd.period()).await;
                    systemd.tick(&agent).await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = signals.next() => break,
            () = tick => {}
        }
    }
    if let Some(systemd) = &systemd {
        systemd.stopping();
    }
    agent.stop().await;
    Ok(())
}
