//! containerd's calls to the shim binary: `start` (find or start the pod's shim process, in the
//! pod's network namespace), the long-running process itself (its task service), and `delete`
//! (clean up after a shim process that is gone).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;

use containerd_shim::publisher::RemotePublisher;
use containerd_shim::util::write_address;
use containerd_shim::{Config, DeleteResponse, ExitSignal, Flags, StartOpts};
use oci_spec::runtime::{LinuxNamespaceType, Spec};

use crate::events::Events;
use crate::service::Service;

/// The runtime's name in containerd.
pub(crate) const RUNTIME: &str = "io.containerd.wasmpod.v1";

/// The annotation the CRI puts on every container of a pod: the pod sandbox's id.
pub(crate) const SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";

pub(crate) struct WasmpodShim {
    namespace: String,
    /// containerd's gRPC socket.
    address: String,
    exit: Arc<ExitSignal>,
}

impl containerd_shim::Shim for WasmpodShim {
    type T = Service<Events>;

    fn new(_runtime_id: &str, args: &Flags, _config: &mut Config) -> Self {
        WasmpodShim {
            namespace: args.namespace.clone(),
            address: args.address.clone(),
            exit: Arc::default(),
        }
    }

    /// Runs in the directory of the bundle of the first container of a pod (under the CRI, the
    /// sandbox's). The pod's other containers find the same address and are served by the same
    /// process.
    fn start_shim(&mut self, opts: StartOpts) -> containerd_shim::Result<String> {
        let spec = Spec::load("config.json").map_err(|e| {
            containerd_shim::Error::InvalidArgument(format!("cannot read config.json: {e}"))
        })?;
        let grouping = spec
            .annotations()
            .as_ref()
            .and_then(|a| a.get(SANDBOX_ID))
            .cloned()
            .unwrap_or_else(|| opts.id.clone());
        // The shim process is started in the pod's network namespace: its guests' sockets are
        // the pod's. (A process already serving this pod is in it.)
        enter_network_namespace(&spec).map_err(|e| containerd_shim::Error::Other(e.to_string()))?;
        let (_, address) = containerd_shim::spawn(opts, &grouping, Vec::new())?;
        write_address(&address)?;
        Ok(address)
    }

    /// containerd calls `delete` in a bundle whose shim process is gone: the root filesystem
    /// the process mounted is unmounted.
    fn delete_shim(&mut self) -> containerd_shim::Result<DeleteResponse> {
        crate::bundle::unmount_rootfs(Path::new("rootfs"));
        Ok(DeleteResponse {
            exit_status: 137,
            exited_at: Some(containerd_shim::util::timestamp()?).into(),
            ..Default::default()
        })
    }

    fn wait(&mut self) {
        self.exit.wait();
    }

    fn create_task_service(&self, publisher: RemotePublisher) -> Service<Events> {
        let images = crate::image::Images {
            address: self.address.clone(),
            namespace: self.namespace.clone(),
        };
        let events = Events::start(publisher, images.namespace.clone());
        Service::new(
            events,
            images,
            self.exit.clone(),
            crate::service::cache_dir(),
        )
    }
}

/// Joins the network namespace the spec names (the CNI's pod network), or makes a new one when
/// it asks for one without a path (`ctr run`); with none (host network) stays.
fn enter_network_namespace(spec: &Spec) -> anyhow::Result<()> {
    let namespaces = spec
        .linux()
        .as_ref()
        .and_then(|l| l.namespaces().clone())
        .unwrap_or_default();
    let Some(net) = namespaces
        .iter()
        .find(|n| n.typ() == LinuxNamespaceType::Network)
    else {
        return Ok(());
    };
    match net.path() {
        Some(path) => {
            let file = File::open(path)
                .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
            // SAFETY: a plain system call on a file descriptor we own.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                anyhow::bail!(
                    "cannot join the network namespace {}: {}",
                    path.display(),
                    std::io::Error::last_os_error()
                );
            }
        }
        // SAFETY: a plain system call; this process has one thread.
        None => {
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                anyhow::bail!(
                    "cannot make a network namespace: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
    Ok(())
}
