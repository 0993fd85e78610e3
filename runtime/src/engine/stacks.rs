//! The fiber stacks guests run on, kept for the next instance instead of unmapped.
//!
//! Every instance runs on a fiber with a stack of its own (wasmtime's `async_stack_size`, 2 MiB
//! of address space under a guard page). Wasmtime's on-demand allocator maps a fresh one for
//! each instance (an `mmap` and an `mprotect`) and unmaps it when the instance's store is
//! dropped. Each of those calls takes the process's memory-map lock for writing, and the
//! unmapping also flushes the other cores' TLBs: when many pods end at once (a mass kill at a
//! grace deadline, a node draining) the runtime's workers queue on that lock, one at a time.
//!
//! A stack freed here goes on a bounded free list instead, cleaned for its next user: its pages
//! below the top [`KEEP`] bytes go back to the kernel (`MADV_DONTNEED`, which takes the lock
//! only for reading, and finds nothing to flush when the guest never went that deep) and the top
//! is zeroed, so a stack handed out again is as clean as a new one and no guest's frames reach
//! another pod's instance.

use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

use wasmtime::{StackCreator, StackMemory};

/// Free stacks kept at most: each holds two memory mappings (the guard page and the stack),
/// part of the reserve the node's default capacity leaves, and at most [`KEEP`] resident bytes.
const FREE_MAX: usize = 256;
/// Bytes at the top of a freed stack kept resident (zeroed): what a guest's calls into the host
/// usually touch (two pages, as the resident sets of sleeping pods' stacks show), so that
/// zeroing them faults nothing in and returning the rest finds nothing to flush.
const KEEP: usize = 8 << 10;

/// The stack creator of a node's engine.
#[derive(Default)]
pub(crate) struct Stacks {
    free: Arc<Free>,
}

#[derive(Default)]
struct Free(Mutex<Vec<Mapping>>);

impl Free {
    fn take(&self, size: usize) -> Option<Mapping> {
        let mut free = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Every stack of an engine has the same size; another size (none today) is not reused.
        while let Some(mapping) = free.pop() {
            if mapping.stack_len() == size {
                return Some(mapping);
            }
        }
        None
    }

    fn put(&self, mapping: Mapping) {
        let lock = || self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // A full list takes no more: the mapping is unmapped without being cleaned first.
        if lock().len() >= FREE_MAX || !mapping.clean() {
            return;
        }
        let mut free = lock();
        if free.len() < FREE_MAX {
            free.push(mapping);
        }
    }
}

// SAFETY: a stack is handed out to one fiber at a time: from the free list to a `Stack`, which
// wasmtime owns until it drops it, and back. Its range and guard are those of a live mapping
// for as long as the `Stack` lives, and a new stack is zeroed (fresh anonymous memory, or
// cleaned when it was put back).
unsafe impl StackCreator for Stacks {
    fn new_stack(&self, size: usize, _zeroed: bool) -> wasmtime::Result<Box<dyn StackMemory>> {
        let size = size.max(1).next_multiple_of(page_size());
        let mapping = match self.free.take(size) {
            Some(mapping) => mapping,
            None => Mapping::new(size)?,
        };
        Ok(Box::new(Stack {
            mapping: Some(mapping),
            free: self.free.clone(),
        }))
    }
}

/// A stack in use by a fiber.
struct Stack {
    /// `Some` until dropped.
    mapping: Option<Mapping>,
    free: Arc<Free>,
}

impl Stack {
    fn mapping(&self) -> &Mapping {
        self.mapping.as_ref().expect("a live stack has its mapping")
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Some(mapping) = self.mapping.take() {
            self.free.put(mapping);
        }
    }
}

// SAFETY: the ranges are those of the mapping the stack owns (see `Mapping`).
unsafe impl StackMemory for Stack {
    fn top(&self) -> *mut u8 {
        self.mapping().stack().end as *mut u8
    }

    fn range(&self) -> Range<usize> {
        self.mapping().stack()
    }

    fn guard_range(&self) -> Range<*mut u8> {
        let m = self.mapping();
        m.base..m.base.wrapping_add(page_size())
    }
}

/// An anonymous mapping: a guard page (no access), then the stack (read and write).
struct Mapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: a mapping is plain memory owned by one value at a time.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only reads its address and length.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(size: usize) -> std::io::Result<Mapping> {
        let page = page_size();
        let len = size
            .checked_add(page)
            .ok_or_else(|| std::io::Error::other("fiber stack size overflows"))?;
        // SAFETY: a new private anonymous mapping, touching no existing memory.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let mapping = Mapping {
            base: base.cast(),
            len,
        };
        // SAFETY: the range lies inside the mapping just made.
        let r = unsafe {
            libc::mprotect(
                base.cast::<u8>().add(page).cast(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(mapping)
    }

    /// The stack's addresses: the mapping less its guard page.
    fn stack(&self) -> Range<usize> {
        let start = self.base as usize + page_size();
        start..self.base as usize + self.len
    }

    fn stack_len(&self) -> usize {
        self.len - page_size()
    }

    /// Makes the stack as a new one: everything below the top [`KEEP`] bytes returned to the
    /// kernel (zero pages on the next touch), the top zeroed. False when the kernel refused,
    /// and the mapping is to be unmapped instead.
    fn clean(&self) -> bool {
        let stack = self.stack();
        let keep = KEEP.min(stack.len());
        let below = stack.len() - keep;
        // SAFETY: the stack is no fiber's any more (its `Stack` is being dropped); both ranges
        // lie inside the mapping, page-aligned.
        unsafe {
            if below > 0
                && libc::madvise(stack.start as *mut libc::c_void, below, libc::MADV_DONTNEED) != 0
            {
                return false;
            }
            std::ptr::write_bytes((stack.end - keep) as *mut u8, 0, keep);
        }
        true
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping is this value's own, and nothing uses it any more.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: sysconf reads a constant of the system.
    *PAGE.get_or_init(|| {
        usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_stack_is_reused_clean() {
        let stacks = Stacks::default();
        let size = 64 << 10;
        let first = stacks.new_stack(size, false).unwrap();
        let range = first.range();
        assert_eq!(range.len(), size);
        assert_eq!(first.guard_range().end as usize, range.start);
        // Dirty it all, as a deep guest would.
        // SAFETY: the range is the stack's, which nothing else uses.
        unsafe { std::ptr::write_bytes(range.start as *mut u8, 0xAB, range.len()) };
        drop(first);

        let second = stacks.new_stack(size, false).unwrap();
        assert_eq!(second.range(), range, "the freed stack is handed out again");
        // SAFETY: as above.
        let bytes = unsafe { std::slice::from_raw_parts(range.start as *const u8, range.len()) };
        assert!(bytes.iter().all(|&b| b == 0), "a reused stack is zeroed");

        // A second live stack is another mapping.
        let third = stacks.new_stack(size, false).unwrap();
        assert_ne!(third.range(), range);
    }

    #[test]
    fn the_free_list_is_bounded() {
        let stacks = Stacks::default();
        let live: Vec<_> = (0..FREE_MAX + 10)
            .map(|_| stacks.new_stack(16 << 10, false).unwrap())
            .collect();
        drop(live);
        assert_eq!(stacks.free.0.lock().unwrap().len(), FREE_MAX);
    }
}
