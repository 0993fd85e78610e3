//! Embedding wasmpod: a host that runs pods in its own process with the public API only.
//!
//! ```sh
//! examples/build.sh
//! cargo run -p wasmpod-example-embed -- examples/hello/pod.yaml
//! ```
//!
//! It builds a node, creates the pod, prints its events and output as they come, waits for it to
//! end, prints the final phase and each container's log as kept on the node, and deletes it.

use std::time::Duration;

use anyhow::Context;
use wasmpod::{Egress, LogOptions, Node, NodeOptions, PodOptions, PodSpec};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let file = std::env::args()
        .nth(1)
        .context("usage: wasmpod-example-embed POD.yaml")?;
    let spec = PodSpec::from_file(file.as_ref())?;

    // A node whose pods may not reach outside the node; everything else defaults.
    let node = Node::new(
        NodeOptions::default()
            .state_dir(std::env::temp_dir().join("wasmpod-embed"))
            .egress(Egress::Deny),
    )?;

    let (tx, mut output) = tokio::sync::mpsc::channel(64);
    let pod = node
        .create_pod(spec, PodOptions::default().output(tx))
        .await?;
    let room = node.allocatable();
    println!(
        "created pod {} (uid {}) on a node for {} pods, {} MiB",
        pod.name(),
        pod.uid(),
        room.pods,
        room.memory >> 20
    );

    let mut events = pod.events();
    let watcher = tokio::spawn(async move {
        while let Some(e) = events.next().await {
            let who = e.container.as_deref().unwrap_or("pod");
            println!("event {who}: {:?} {}", e.reason, e.message);
        }
    });
    let printer = tokio::spawn(async move {
        while let Some(line) = output.recv().await {
            println!("output {}: {}", line.container, line.line);
        }
    });

    for p in node.pods() {
        println!("on the node: {}", p.name());
    }
    let status = tokio::time::timeout(Duration::from_secs(60), pod.wait())
        .await
        .context("the pod did not end within a minute")?;
    println!(
        "pod ended: {}, pod IP {}",
        status.phase.as_deref().unwrap_or("?"),
        status.pod_ip.as_deref().unwrap_or("-")
    );

    let containers = status.container_statuses.iter().flatten();
    for name in containers.map(|c| c.name.clone()) {
        let mut log = pod.logs(&name, LogOptions::default())?;
        while let Some(line) = log.next().await {
            println!("log {name}: {}", line.line);
        }
    }

    pod.delete(None);
    pod.deleted().await;
    watcher.await?;
    drop(pod);
    let _ = printer.await;
    Ok(())
}
