//! The metrics containerd's `Stats` returns, in the form its CRI plugin reads
//! (`io.containerd.cgroups.v1.Metrics`: CPU usage in nanoseconds, memory usage and limit, the
//! working set being usage minus inactive file pages, none here).
//!
//! A container's figures are wasmpod's own, exact per container though all of a pod's
//! containers share one process: the CPU time its instances ran and its memory budget in use
//! (linear memories, tables, socket buffers). The sandbox container's are the whole shim
//! process's (CPU time and resident memory): what the pod costs besides its guests.

use containerd_shim::protos::cgroups::metrics::{
    CPUStat, CPUUsage, MemoryEntry, MemoryStat, Metrics, PidsStat,
};
use containerd_shim::protos::protobuf::MessageField;
use containerd_shim::protos::protobuf::well_known_types::any::Any;
use wasmpod::task::TaskUsage;

/// A container's metrics.
pub(crate) fn of_task(usage: TaskUsage) -> anyhow::Result<Any> {
    let cpu = u64::try_from(usage.cpu.as_nanos()).unwrap_or(u64::MAX);
    let limit = if usage.memory_limit == u64::MAX {
        0
    } else {
        usage.memory_limit
    };
    metrics(cpu, cpu, 0, usage.memory, limit)
}

/// The shim process's metrics (the sandbox container's).
pub(crate) fn of_process() -> anyhow::Result<Any> {
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let nanos = |t: libc::timeval| {
        u64::try_from(t.tv_sec)
            .unwrap_or(0)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::try_from(t.tv_usec).unwrap_or(0).saturating_mul(1_000))
    };
    let (user, system) = (nanos(usage.ru_utime), nanos(usage.ru_stime));
    metrics(
        user.saturating_add(system),
        user,
        system,
        resident_bytes(),
        0,
    )
}

/// The process's resident memory, from `/proc/self/statm`.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    pages.saturating_mul(page)
}

fn metrics(total: u64, user: u64, kernel: u64, memory: u64, limit: u64) -> anyhow::Result<Any> {
    let metrics = Metrics {
        cpu: MessageField::some(CPUStat {
            usage: MessageField::some(CPUUsage {
                total,
                user,
                kernel,
                ..Default::default()
            }),
            ..Default::default()
        }),
        memory: MessageField::some(MemoryStat {
            usage: MessageField::some(MemoryEntry {
                usage: memory,
                limit,
                ..Default::default()
            }),
            rss: memory,
            total_rss: memory,
            ..Default::default()
        }),
        pids: MessageField::some(PidsStat {
            current: 1,
            ..Default::default()
        }),
        ..Default::default()
    };
    Ok(containerd_shim::util::convert_to_any(Box::new(metrics))?)
}
