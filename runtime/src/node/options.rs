//! The settings of a node and of one pod: where state lives, backoff, limits, egress, what the
//! node has for pods, PriorityClasses, log limits; and a pod's published ports and output tap.

use crate::images::{ImageGc, VerifyKey};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use tokio::sync::mpsc;

use crate::cgroup::read_kernel_file;
use crate::network::Egress;
use crate::output::{LogLimits, OutputLine};
use crate::supervisor::BackoffOptions;

/// The settings of a [`Node`](crate::Node).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeOptions {
    /// Where pods keep their logs and `emptyDir` volumes.
    pub state_dir: PathBuf,
    /// Where compiled modules are cached; `None` disables the on-disk cache.
    pub cache_dir: Option<PathBuf>,
    /// Tiered compilation (x86-64): a module or component the node compiles (not found in the
    /// compile cache) runs at once on Winch's baseline code (about half as fast) in containers
    /// that end (a Job's, init containers) and in probes, hooks, `exec`s and HTTP requests,
    /// while Cranelift optimizes it in the background; instances made after that run the
    /// optimized code. A container that lives as long as its pod (a sidecar, or under
    /// `restartPolicy: Always`) has its module compiled by Cranelift first, or, when another
    /// container loaded it as baseline code, waits for the optimized code, which it would
    /// otherwise keep (unless it is an HTTP handler, whose instances are each request's).
    /// `false`: every module waits for Cranelift.
    pub tiered_compilation: bool,
    /// Where registry images are kept [default: `images` under the cache dir, else under the
    /// state dir].
    pub image_dir: Option<PathBuf>,
    /// The crash-loop backoff.
    pub backoff: BackoffOptions,
    /// The most linear memory one container instance may use, in bytes.
    pub memory_limit: u64,
    /// Whether pods may reach addresses outside the node's pod network.
    pub egress: Egress,
    /// The Kubernetes API pods reach as the `kubernetes` Service (a node agent's listener):
    /// connections from a pod to [`crate::KUBERNETES_SERVICE`] go to this address, whatever
    /// the egress policy, and every container finds it in its environment
    /// (`KUBERNETES_SERVICE_HOST`, `KUBERNETES_SERVICE_PORT`, ...), as a cluster's pods do.
    pub api_server: Option<std::net::SocketAddr>,
    /// The node's name (`spec.nodeName` in the downward API); default the host's name.
    pub node_name: String,
    /// How many terminated pods (Succeeded or Failed, not deleted) the node keeps, with their
    /// status and logs; past it the oldest are deleted. Kubernetes' default is 12,500.
    pub terminated_pods_kept: usize,
    /// What the node has for pods' requests; a pod that does not fit waits, Pending.
    pub allocatable: Allocatable,
    /// When the linear memory all guests hold exceeds this many bytes, pods using more than
    /// they request are evicted (the kubelet's order). `None`: the allocatable memory less
    /// 100 MiB (Kubernetes' default `memory.available<100Mi`), or less a tenth if that is smaller.
    pub eviction_threshold: Option<u64>,
    /// The PriorityClasses pods may name in `spec.priorityClassName`.
    pub priority_classes: Vec<PriorityClass>,
    /// How large containers' logs may grow (the kubelet's rotation settings).
    pub log_limits: LogLimits,
    /// The node's labels besides the kubelet's own (`kubernetes.io/hostname`,
    /// `kubernetes.io/os`, `kubernetes.io/arch`), which these may override: what pods'
    /// `nodeSelector`s match (`--node-labels`).
    pub labels: BTreeMap<String, String>,
    /// The node's taints (the kubelet's `--register-with-taints`): a pod must tolerate each
    /// `NoSchedule` and `NoExecute` one to be admitted (`PreferNoSchedule` is a preference,
    /// which one node cannot act on).
    pub taints: Vec<Taint>,
    /// Registries (`HOST:PORT`) pulled from over plain HTTP; every other is HTTPS only.
    pub insecure_registries: Vec<String>,
    /// Where pods' local image files may be precompiled artefacts (machine code from
    /// `wasmpod compile`, run as it is): `None` anywhere but under the state dir and
    /// `/dev/shm/wasmpod` (where guests write), the default for the operator's own pod files;
    /// `Some` only under these directories, and never under those two (`wasmpod serve`:
    /// `--precompiled-dir`, none by default, since pods come from the API).
    pub precompiled_dirs: Option<Vec<PathBuf>>,
    /// Registries (`HOST:PORT`) whose precompiled layers (`wasmpod compile`'s machine code) the
    /// node runs: from every other, only portable `.wasm` layers are taken.
    pub precompiled_registries: Vec<String>,
    /// A docker-style config file (`{"auths": {...}}`) with registry credentials, used when a
    /// pod's `imagePullSecrets` have none for the registry. Read at the node's first pull: a
    /// broken one fails that pull (and every later one), naming the file.
    pub registry_config: Option<PathBuf>,
    /// Images that run only with a cosign signature by a key: each entry a prefix of the
    /// image's `registry/repository` (`registry.example/team`, which covers
    /// `registry.example/team/app`) and the key; the longest prefix that covers an image
    /// decides. An image without such a signature waits in `SignatureValidationFailed`.
    pub signed_images: Vec<(String, VerifyKey)>,
    /// Whether pods may ask for the host's network (`spec.hostNetwork: true`): their
    /// components' sockets are then the host's (ports bound on the host's addresses, the
    /// host's other services reachable on 127.0.0.1), as wasmtime-wasi's own sockets are. Off
    /// by default, as the Pod Security Standards' baseline forbids it; such a pod is refused
    /// with the option's name.
    pub allow_host_network: bool,
    /// The node's address, as its pods see it: every pod's `status.hostIP` (and the downward
    /// API's `status.hostIP`), and a host-network pod's `status.podIP`, as the kubelet reports
    /// the node's. Default `127.0.0.1`, where a host-network pod's listeners are reachable.
    pub host_ip: IpAddr,
    /// The image store's garbage collection (the store is under the cache dir, else the
    /// state dir).
    pub image_gc: ImageGc,
}

/// What a node has for pods: the sum of the requests of the pods it runs stays within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Allocatable {
    /// Bytes of memory; default the machine's memory, or the limit of the memory cgroup over the
    /// process when that is smaller (a systemd unit's `MemoryMax`, a container's limit): the
    /// guests live in the process, so that limit is all they and the runtime have.
    pub memory: u64,
    /// Thousandths of a core; default 1000 per core the process may use.
    pub cpu_milli: u64,
    /// Pods at once (not counting terminated ones); default as many as [`Allocatable::containers`].
    pub pods: u64,
    /// Containers running at once, over all pods (a pod counts its regular containers and
    /// sidecars, or while it initialises its sidecars and one init container, whichever is
    /// more); default what the process can map, less a reserve for probes, hooks and the
    /// runtime: its memory-mapping limit (`vm.max_map_count`) at six mappings per instance, and
    /// its address space at what an instance reserves in the node's [`AddressSpace`](crate::AddressSpace) mode (4 GiB
    /// and a guard reserved, 32 MiB compact), whichever allows fewer. A node never starts more instances than the kernel lets the
    /// process map, which would abort it.
    pub containers: u64,
}

impl Allocatable {
    /// Memory, CPU and pod count as the machine, and the cgroups over the process, allow.
    pub fn from_machine() -> Allocatable {
        let memory = total_memory().unwrap_or(4 << 30);
        let memory = crate::cgroup::memory().map_or(memory, |cgroup| memory.min(cgroup.limit));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let max_map_count = read_kernel_file(Path::new("/proc/sys/vm/max_map_count"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(65_530);
        let containers = containers_for(max_map_count);
        Allocatable {
            memory,
            cpu_milli: cores * 1000,
            pods: containers,
            containers,
        }
    }

    /// Sets [`Allocatable::memory`].
    pub fn memory(mut self, bytes: u64) -> Self {
        self.memory = bytes;
        self
    }

    /// Sets [`Allocatable::cpu_milli`].
    pub fn cpu_milli(mut self, milli: u64) -> Self {
        self.cpu_milli = milli;
        self
    }

    /// Sets [`Allocatable::pods`].
    pub fn pods(mut self, pods: u64) -> Self {
        self.pods = pods;
        self
    }

    /// Sets [`Allocatable::containers`].
    pub fn containers(mut self, containers: u64) -> Self {
        self.containers = containers;
        self
    }
}

/// The default [`Allocatable::containers`] under a `vm.max_map_count`: what both the mappings
/// (six an instance, less a reserve) and the address space hold. The reserve of 4,096 is for the
/// probe pool's mappings, the engine's free fiber stacks (two each, at most 512) and the
/// process's own (code, heap, threads).
fn containers_for(max_map_count: u64) -> u64 {
    let by_mappings = max_map_count.saturating_sub(4096) / 6;
    by_mappings
        .min(crate::engine::AddressSpace::process_instances())
        .max(1)
}

impl Default for NodeOptions {
    fn default() -> Self {
        let state = dirs::state_dir()
            .or_else(dirs::cache_dir)
            .unwrap_or_else(std::env::temp_dir);
        NodeOptions {
            state_dir: state.join("wasmpod"),
            cache_dir: dirs::cache_dir().map(|d| d.join("wasmpod")),
            tiered_compilation: true,
            image_dir: None,
            backoff: BackoffOptions::default(),
            memory_limit: 1 << 30,
            egress: Egress::Allow,
            api_server: None,
            node_name: host_name(),
            terminated_pods_kept: 12_500,
            allocatable: Allocatable::from_machine(),
            eviction_threshold: None,
            priority_classes: Vec::new(),
            log_limits: LogLimits::default(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            insecure_registries: Vec::new(),
            precompiled_registries: Vec::new(),
            precompiled_dirs: None,
            registry_config: None,
            signed_images: Vec::new(),
            allow_host_network: false,
            host_ip: Ipv4Addr::LOCALHOST.into(),
            image_gc: ImageGc::default(),
        }
    }
}

impl NodeOptions {
    /// Sets [`NodeOptions::state_dir`].
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = dir.into();
        self
    }

    /// Sets [`NodeOptions::precompiled_dirs`].
    pub fn precompiled_dirs(mut self, dirs: Option<Vec<PathBuf>>) -> Self {
        self.precompiled_dirs = dirs;
        self
    }

    /// Adds a registry (`HOST:PORT`) to [`NodeOptions::precompiled_registries`].
    pub fn precompiled_registry(mut self, host: impl Into<String>) -> Self {
        self.precompiled_registries.push(host.into());
        self
    }

    /// Adds a registry (`HOST:PORT`) to [`NodeOptions::insecure_registries`].
    pub fn insecure_registry(mut self, host: impl Into<String>) -> Self {
        self.insecure_registries.push(host.into());
        self
    }

    /// Sets [`NodeOptions::registry_config`].
    pub fn registry_config(mut self, file: Option<PathBuf>) -> Self {
        self.registry_config = file;
        self
    }

    /// Adds an entry to [`NodeOptions::signed_images`]: images under `prefix` run only when
    /// signed with `key`.
    pub fn signed_images(mut self, prefix: impl Into<String>, key: VerifyKey) -> Self {
        self.signed_images.push((prefix.into(), key));
        self
    }

    /// Sets [`NodeOptions::allow_host_network`].
    pub fn allow_host_network(mut self, allow: bool) -> Self {
        self.allow_host_network = allow;
        self
    }

    /// Sets [`NodeOptions::host_ip`].
    pub fn host_ip(mut self, ip: IpAddr) -> Self {
        self.host_ip = ip;
        self
    }

    /// Sets [`NodeOptions::image_gc`].
    pub fn image_gc(mut self, gc: ImageGc) -> Self {
        self.image_gc = gc;
        self
    }

    /// Sets [`NodeOptions::cache_dir`].
    pub fn cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cache_dir = dir;
        self
    }

    /// Sets [`NodeOptions::tiered_compilation`].
    pub fn tiered_compilation(mut self, tiered: bool) -> Self {
        self.tiered_compilation = tiered;
        self
    }

    /// Sets [`NodeOptions::image_dir`].
    pub fn image_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.image_dir = Some(dir.into());
        self
    }

    /// Sets [`NodeOptions::memory_limit`].
    pub fn memory_limit(mut self, bytes: u64) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// Sets [`NodeOptions::node_name`].
    pub fn node_name(mut self, name: impl Into<String>) -> Self {
        self.node_name = name.into();
        self
    }

    /// Sets [`NodeOptions::terminated_pods_kept`].
    pub fn terminated_pods_kept(mut self, n: usize) -> Self {
        self.terminated_pods_kept = n;
        self
    }

    /// Sets [`NodeOptions::egress`].
    pub fn egress(mut self, egress: Egress) -> Self {
        self.egress = egress;
        self
    }

    /// Sets [`NodeOptions::api_server`].
    pub fn api_server(mut self, addr: std::net::SocketAddr) -> Self {
        self.api_server = Some(addr);
        self
    }

    /// Sets [`NodeOptions::allocatable`].
    pub fn allocatable(mut self, allocatable: Allocatable) -> Self {
        self.allocatable = allocatable;
        self
    }

    /// Sets [`NodeOptions::eviction_threshold`].
    pub fn eviction_threshold(mut self, bytes: u64) -> Self {
        self.eviction_threshold = Some(bytes);
        self
    }

    /// Adds PriorityClasses (see [`crate::read_priority_classes`] to read them from YAML).
    pub fn priority_classes(mut self, classes: impl IntoIterator<Item = PriorityClass>) -> Self {
        self.priority_classes.extend(classes);
        self
    }

    /// Sets [`NodeOptions::backoff`].
    pub fn backoff(mut self, backoff: BackoffOptions) -> Self {
        self.backoff = backoff;
        self
    }

    /// Adds labels to [`NodeOptions::labels`].
    pub fn labels(
        mut self,
        labels: impl IntoIterator<Item = (impl Into<String>, impl Into<String>)>,
    ) -> Self {
        self.labels
            .extend(labels.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Adds taints to [`NodeOptions::taints`].
    pub fn taints(mut self, taints: impl IntoIterator<Item = Taint>) -> Self {
        self.taints.extend(taints);
        self
    }

    /// The node's labels: the kubelet's own, then [`NodeOptions::labels`] over them.
    pub(super) fn all_labels(&self) -> BTreeMap<String, String> {
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        let mut labels = BTreeMap::from([
            ("kubernetes.io/hostname".to_owned(), self.node_name.clone()),
            (
                "kubernetes.io/os".to_owned(),
                std::env::consts::OS.to_owned(),
            ),
            ("kubernetes.io/arch".to_owned(), arch.to_owned()),
        ]);
        labels.extend(self.labels.clone());
        labels
    }

    /// Sets [`NodeOptions::log_limits`].
    pub fn log_limits(mut self, limits: LogLimits) -> Self {
        self.log_limits = limits;
        self
    }
}

/// The machine's memory in bytes (`MemTotal`), as `sysinfo` tells it.
fn total_memory() -> Option<u64> {
    // SAFETY: `sysinfo` fills the zeroed struct it is given.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid, writable `sysinfo`.
    if unsafe { libc::sysinfo(&mut info) } != 0 {
        return None;
    }
    #[expect(
        clippy::useless_conversion,
        reason = "`c_ulong` is 32 bits on 32-bit targets"
    )]
    let total = u64::from(info.totalram);
    total.checked_mul(u64::from(info.mem_unit))
}

/// The machine's host name, or `localhost`.
pub(super) fn host_name() -> String {
    read_kernel_file(Path::new("/proc/sys/kernel/hostname"))
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Options for one pod.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct PodOptions {
    /// Receives every line the pod's containers write, as they write it. A slow receiver slows
    /// the writers down; nothing is dropped.
    pub output: Option<mpsc::Sender<OutputLine>>,
    /// Extra published ports (`run --publish`): host address → container port on the pod IP.
    /// `hostPort` fields of the pod are published too.
    pub publish: Vec<(SocketAddr, u16)>,
    /// The restart counts of the containers of a pod resumed after its node's process ended
    /// (a node agent's restart), by container name; see [`PodOptions::resume`].
    pub resume: BTreeMap<String, i32>,
}

impl PodOptions {
    /// Publishes `container_port` of the pod on `host` (adds to [`PodOptions::publish`]).
    pub fn publish(mut self, host: SocketAddr, container_port: u16) -> Self {
        self.publish.push((host, container_port));
        self
    }

    /// Resumes a pod whose node's process ended while it ran, from the status it last had:
    /// each container that had started counts its lost instance as exited (last state
    /// `ContainerStatusUnknown`, exit code 137) and starts again as a restart, so restart counts
    /// and log files go on from where they were (the pod's `metadata.uid` must be the same).
    pub fn resume(mut self, last: &k8s_openapi::api::core::v1::PodStatus) -> Self {
        let ran = |s: &Option<k8s_openapi::api::core::v1::ContainerState>| {
            s.as_ref()
                .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
        };
        for c in last
            .init_container_statuses
            .iter()
            .chain(&last.container_statuses)
            .flatten()
        {
            if ran(&c.state) || ran(&c.last_state) {
                self.resume.insert(c.name.clone(), c.restart_count.max(0));
            }
        }
        self
    }

    /// Sets [`PodOptions::output`].
    pub fn output(mut self, tx: mpsc::Sender<OutputLine>) -> Self {
        self.output = Some(tx);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_container_count_fits_the_address_space() {
        let fit = crate::engine::AddressSpace::process_instances();
        // The default mapping limit bounds it first; a raised one meets the address space.
        assert_eq!(containers_for(65_530), 10_239.min(fit).max(1));
        assert_eq!(containers_for(1 << 24), fit.max(1));
        // x86-64's 128 TiB hold the 30,000 pods a node is sized for, and no more than the
        // reservations themselves allow (a test run without an address-space limit).
        #[cfg(target_arch = "x86_64")]
        if crate::engine::AddressSpace::of_process() == crate::AddressSpace::Reserved {
            assert!(
                (30_000..=(128u64 << 40) / (4 << 30)).contains(&fit),
                "{fit}"
            );
        }
    }
}
