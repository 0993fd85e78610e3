//! The flags of the node that runs the pods, shared by `run` and `serve`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use wasmpod::k8s_openapi::api::core::v1::Taint;
use wasmpod::{BackoffOptions, Egress, ImageGc, LogLimits, NodeOptions};

/// Options of the node that runs the pods.
#[derive(Args)]
pub(crate) struct NodeArgs {
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
    /// A module not in the compile cache runs at once on baseline code (Winch, x86-64; about
    /// half as fast) in containers that end, while Cranelift optimizes it in the background
    /// for later instances; containers that live as long as their pod wait for Cranelift.
    /// `false`: every module waits for Cranelift.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    tiered_compilation: bool,
    /// Directory of pulled registry images [default: `images` in the cache dir]
    #[arg(long, value_name = "DIR")]
    image_store: Option<PathBuf>,
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
    /// Images under PREFIX (`registry/repository`, or a path above repositories) run only with
    /// a cosign signature made with the key in FILE (a PEM public key, `cosign.pub`); the
    /// longest prefix decides. Repeatable.
    #[arg(long, value_name = "PREFIX=FILE", value_parser = parse_signed_images)]
    signed_images: Vec<(String, wasmpod::VerifyKey)>,
    /// Let pods ask for the host's network (`hostNetwork: true`): their components' sockets
    /// are the host's, as wasmtime's own are. Refused by default, as the Pod Security
    /// Standards' baseline does.
    #[arg(long)]
    allow_host_network: bool,
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

/// `PREFIX=FILE`: the prefix and the key the file holds.
fn parse_signed_images(pair: &str) -> Result<(String, wasmpod::VerifyKey), String> {
    let (prefix, file) = pair
        .split_once('=')
        .filter(|(p, f)| !p.is_empty() && !f.is_empty())
        .ok_or_else(|| format!("{pair:?}: expected PREFIX=FILE"))?;
    Ok((prefix.to_owned(), read_key(file.as_ref())?))
}

/// The cosign public key in `file`.
pub(crate) fn read_key(file: &std::path::Path) -> Result<wasmpod::VerifyKey, String> {
    let pem = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    wasmpod::VerifyKey::from_pem(&pem).map_err(|e| format!("{}: {e}", file.display()))
}

/// `compact` or `reserved`.
fn parse_address_space(s: &str) -> Result<wasmpod::AddressSpace, String> {
    match s {
        "compact" => Ok(wasmpod::AddressSpace::Compact),
        "reserved" => Ok(wasmpod::AddressSpace::Reserved),
        _ => Err("compact or reserved".into()),
    }
}

/// A size in bytes, with an optional `Ki`, `Mi` or `Gi` suffix.
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

/// `allow` or `deny`.
fn parse_egress(s: &str) -> Result<Egress, String> {
    match s {
        "allow" => Ok(Egress::Allow),
        "deny" => Ok(Egress::Deny),
        _ => Err("must be allow or deny".into()),
    }
}

impl NodeArgs {
    /// The node's options as the flags give them.
    pub(crate) fn options(&self) -> NodeOptions {
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
        options = options.tiered_compilation(self.tiered_compilation);
        if let Some(dir) = &self.image_store {
            options = options.image_dir(dir);
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
        options = options.allow_host_network(self.allow_host_network);
        for (prefix, key) in &self.signed_images {
            options = options.signed_images(prefix.clone(), key.clone());
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
