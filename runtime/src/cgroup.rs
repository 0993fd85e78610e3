//! The memory cgroup the process is in: the limit over it (its own or an ancestor's, whichever
//! is smallest) and what it uses against that limit, in cgroup v1's memory hierarchy or the
//! unified one. Guests run inside the process, so that limit is the most their memory and the
//! runtime's together may reach before the kernel ends the process.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What the process's own memory may grow by between two fittings of its guests' room
/// (instances' host state, stacks, buffers, pods' bookkeeping), kept from the guests.
const OWN_GROWTH: u64 = 8 << 20;

/// How old a [`Cap`] may be when the guests grow.
const REFIT: Duration = Duration::from_secs(1);

/// A procfs, sysfs or cgroupfs file's text. Such files report no size, so `read_to_string` would
/// look for one (`fstat`, `lseek`) and then grow its buffer from 32 bytes, a `read` each time;
/// this reads into a page at once.
pub(crate) fn read_kernel_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::with_capacity(4096);
    // Through `Take`, which has no size lookup.
    std::fs::File::open(path)?
        .take(1 << 20)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// The limit over the process and its use against it, in bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Memory {
    pub(crate) limit: u64,
    /// Usage less inactive file pages (the kubelet's working set).
    pub(crate) working_set: u64,
}

/// The memory limit over this process, and what it uses against it: of the process's memory
/// cgroup and its ancestors (a systemd unit's `MemoryMax`, a container's limit, the kubelet's
/// pod cgroup), the one with the smallest limit, and its working set. `None` where no limit
/// applies.
pub(crate) fn memory() -> Option<Memory> {
    let cgroups = read_kernel_file(Path::new("/proc/self/cgroup")).ok()?;
    // cgroup v1's memory hierarchy, else the unified one.
    let (root, path, v1) = cgroups
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once(':')?;
            let (controllers, path) = rest.split_once(':')?;
            controllers.split(',').any(|c| c == "memory").then_some((
                "/sys/fs/cgroup/memory",
                path,
                true,
            ))
        })
        .or_else(|| {
            let path = cgroups.lines().find_map(|l| l.strip_prefix("0::"))?;
            Some(("/sys/fs/cgroup", path, false))
        })?;
    let (limit_file, usage_file, inactive) = if v1 {
        (
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            "total_inactive_file",
        )
    } else {
        ("memory.max", "memory.current", "inactive_file")
    };
    let read = |dir: &Path, file: &str| -> Option<u64> {
        read_kernel_file(&dir.join(file)).ok()?.trim().parse().ok()
    };
    let mut dir = Path::new(root).join(path.trim_start_matches('/'));
    let mut tightest: Option<(u64, PathBuf)> = None;
    loop {
        // v1 writes no limit as a number near 2^63, v2 as `max`.
        if let Some(limit) = read(&dir, limit_file).filter(|&l| l < 1 << 62)
            && tightest.as_ref().is_none_or(|(t, _)| limit < *t)
        {
            tightest = Some((limit, dir.clone()));
        }
        if dir == Path::new(root) || !dir.pop() {
            break;
        }
    }
    let (limit, dir) = tightest?;
    let usage = read(&dir, usage_file)?;
    let stat = read_kernel_file(&dir.join("memory.stat")).unwrap_or_default();
    let inactive = stat
        .lines()
        .find_map(|l| {
            l.strip_prefix(inactive)?
                .strip_prefix(' ')?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    Some(Memory {
        limit,
        working_set: usage.saturating_sub(inactive),
    })
}

/// The limit over the process and the process's own part of it when its guests hold `guests`
/// bytes: its working set less the guests' memory, never less than `base`, which the first call
/// records (while guests hold memory they have not touched, the difference underestimates it).
/// `None` without a limit.
fn limit_and_own(guests: u64, base: &OnceLock<u64>) -> Option<(u64, u64)> {
    let cgroup = memory()?;
    let own = cgroup.working_set.saturating_sub(guests);
    Some((cgroup.limit, own.max(*base.get_or_init(|| own))))
}

/// A cap on what the guests of a process hold together that follows its memory cgroup:
/// fitted at the guests' first growth, and again as they grow when it is over a second old or
/// the growth would pass it (so a raised limit, the kubelet resizing a pod, lets them in). A
/// growth past it is refused (the guest ends out of memory) instead of the kernel ending the
/// process. Below it, the point where the node starts evicting: where the memory left in the
/// cgroup falls under the kubelet's `memory.available` default, 100 MiB or a tenth of the
/// limit if that is less.
#[derive(Debug)]
pub(crate) struct Cap {
    cap: AtomicU64,
    evict_at: AtomicU64,
    base: OnceLock<u64>,
    made: Instant,
    /// When it was last fitted, in nanoseconds since `made`.
    fitted: AtomicU64,
}

impl Cap {
    /// A cap not fitted yet (0, so that the first growth fits it: by then a shim has joined
    /// its pod's cgroup).
    pub(crate) fn new() -> Cap {
        Cap {
            cap: AtomicU64::new(0),
            evict_at: AtomicU64::new(u64::MAX),
            base: OnceLock::new(),
            made: Instant::now(),
            fitted: AtomicU64::new(0),
        }
    }

    fn fit(&self, guests: u64) {
        let (cap, evict_at) = match limit_and_own(guests, &self.base) {
            Some((limit, own)) => {
                let left = limit.saturating_sub(own);
                let available = (100 << 20u64).min(limit / 10);
                (
                    left.saturating_sub(OWN_GROWTH),
                    left.saturating_sub(available),
                )
            }
            None => (u64::MAX, u64::MAX),
        };
        self.cap.store(cap, Ordering::Relaxed);
        self.evict_at.store(evict_at, Ordering::Relaxed);
        let now = u64::try_from(self.made.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.fitted.store(now, Ordering::Relaxed);
    }

    /// Past how many bytes of guests' memory the node evicts, as last fitted.
    pub(crate) fn evict_at(&self) -> u64 {
        self.evict_at.load(Ordering::Relaxed)
    }

    /// Whether the guests, holding `guests` bytes, may take `bytes` more.
    pub(crate) fn allows(&self, guests: u64, bytes: u64) -> bool {
        let total = guests.saturating_add(bytes);
        let age = self
            .made
            .elapsed()
            .saturating_sub(Duration::from_nanos(self.fitted.load(Ordering::Relaxed)));
        if total > self.cap.load(Ordering::Relaxed) || age >= REFIT {
            self.fit(guests);
        }
        total <= self.cap.load(Ordering::Relaxed)
    }
}
