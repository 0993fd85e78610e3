//! How a node's instances use the process's address space, chosen once from the space there is.
//!
//! A linear memory is normally a 4 GiB reservation with a guard after it: wasm code then needs
//! no bounds checks, and a memory grows in place. That takes about 4 GiB of address space per
//! instance, which a 47-bit address space (128 TiB) holds thirty thousand times over, but which
//! a 39-bit board (512 GiB), or a process under an `RLIMIT_AS` (`prlimit --as`, a container
//! runtime's limit), holds a few times or not at all. There the node runs **compact**: a memory
//! reserves its size and a little room to grow, moves when it grows past that, and the compiled
//! code checks every access's bounds. The
//! short-lived instance pool, which reserves its slots up front, is not used.
//!
//! Artefacts differ between the two (the bounds checks are compiled in): the compile cache keys
//! them by the engine's settings, and `wasmpod compile --compact` makes them for a compact node.

use std::sync::OnceLock;

use wasmtime::Config;

/// How instances use the address space: chosen by the node from the space it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AddressSpace {
    /// Each linear memory reserves 4 GiB and a guard: no bounds checks, growth in place.
    Reserved,
    /// Each linear memory reserves its size and 8 MiB to grow into, with explicit
    /// bounds checks.
    Compact,
}

/// Address space a reserved instance takes: its linear memory's 4 GiB and guard, with room for
/// its fiber stack and tables.
const RESERVED_PER_INSTANCE: u64 = (4 << 30) + (64 << 20);
/// Address space a reserved node keeps for the rest: the pool of short-lived instances (about
/// 1 TiB), the heap, code and thread stacks.
const RESERVED_FOR_THE_REST: u64 = 2 << 40;
/// A node runs reserved when the space holds this many reserved instances besides the rest.
const RESERVED_AT_LEAST: u64 = 1024;

/// Room a compact memory reserves to grow into before it moves.
const COMPACT_GROWTH: u64 = 8 << 20;
/// The guard after a compact memory (lets one bounds check cover nearby accesses).
const COMPACT_GUARD: u64 = 64 << 10;
/// Address space a compact instance is counted at: a small guest's memory, its room to grow,
/// its fiber stack (2 MiB) and tables.
const COMPACT_PER_INSTANCE: u64 = 32 << 20;
/// Address space a compact node keeps for the process: code, heap, thread stacks and malloc's
/// arenas.
const COMPACT_FOR_THE_REST: u64 = 1 << 30;

static MODE: OnceLock<AddressSpace> = OnceLock::new();

impl AddressSpace {
    /// The mode of this process's engines: the one [`AddressSpace::set_for_process`] chose, else
    /// the one its address space suggests (decided once).
    pub(crate) fn of_process() -> AddressSpace {
        *MODE.get_or_init(|| {
            let mode = AddressSpace::for_space(usable());
            tracing::debug!(?mode, space = usable(), "address space");
            mode
        })
    }

    /// Makes `self` the mode of this process's engines instead of the one its address space
    /// suggests (a reserved node where the space is tight fails to start instances; a compact
    /// one runs everywhere, its code a little slower). Call it before the first node is made
    /// (or [`NodeOptions::default`](crate::NodeOptions), which sizes the node's capacity by it);
    /// once chosen, the mode stays: `Err` holds it when it is another.
    pub fn set_for_process(self) -> Result<(), AddressSpace> {
        match MODE.set(self) {
            Ok(()) => Ok(()),
            Err(_) if AddressSpace::of_process() == self => Ok(()),
            Err(_) => Err(AddressSpace::of_process()),
        }
    }

    fn for_space(space: u64) -> AddressSpace {
        let reserved =
            RESERVED_FOR_THE_REST.saturating_add(RESERVED_AT_LEAST * RESERVED_PER_INSTANCE);
        if space >= reserved {
            AddressSpace::Reserved
        } else {
            AddressSpace::Compact
        }
    }

    /// How many instances this mode fits in `space` bytes (at least one).
    pub(crate) fn instances_in(self, space: u64) -> u64 {
        let (rest, each) = match self {
            AddressSpace::Reserved => (RESERVED_FOR_THE_REST, RESERVED_PER_INSTANCE),
            AddressSpace::Compact => (COMPACT_FOR_THE_REST, COMPACT_PER_INSTANCE),
        };
        (space.saturating_sub(rest) / each).max(1)
    }

    /// How many instances this process's address space holds in its mode.
    pub(crate) fn process_instances() -> u64 {
        AddressSpace::of_process().instances_in(usable())
    }

    /// Its name, as the node's status shows it.
    pub fn name(self) -> &'static str {
        match self {
            AddressSpace::Reserved => "reserved",
            AddressSpace::Compact => "compact",
        }
    }

    /// Whether the pool of short-lived instances (which reserves its slots up front) is used.
    pub(crate) fn pools(self) -> bool {
        self == AddressSpace::Reserved
    }

    pub(crate) fn apply(self, config: &mut Config) {
        if self == AddressSpace::Compact {
            config
                .memory_reservation(0)
                .memory_reservation_for_growth(COMPACT_GROWTH)
                .memory_guard_size(COMPACT_GUARD)
                .memory_may_move(true);
        }
    }
}

/// The process's usable address space: the power of two above the stack's addresses (128 TiB
/// on x86-64, 256 GiB under a 39-bit VA), or its `RLIMIT_AS` if lower.
fn usable() -> u64 {
    let here = 0u8;
    let mut space = (std::ptr::addr_of!(here) as u64).next_power_of_two();
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limit into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } == 0
        && limit.rlim_cur != libc::RLIM_INFINITY
    {
        space = space.min(limit.rlim_cur);
    }
    space
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_follows_the_space() {
        assert_eq!(AddressSpace::for_space(128 << 40), AddressSpace::Reserved);
        assert_eq!(AddressSpace::for_space(256 << 30), AddressSpace::Compact);
        assert_eq!(AddressSpace::for_space(4 << 30), AddressSpace::Compact);
        assert_eq!(AddressSpace::Compact.instances_in(4 << 30), 96);
        assert_eq!(AddressSpace::Compact.instances_in(256 << 20), 1);
        assert!(AddressSpace::Reserved.instances_in(128 << 40) > 30_000);
    }
}
