//! The secure random generator every guest's WASI context draws from.

use std::convert::Infallible;

use rand::{Rng as _, TryRng};

/// `wasi:random/random` (and preview1's `random_get`) for a guest: the calling thread's own
/// CSPRNG (rand's `ThreadRng`: ChaCha12, reseeded from the operating system), taken at each call.
/// A context so keeps no generator of its own, where wasmtime-wasi's default is a `StdRng` per
/// context: 320 bytes of state, kept by every sleeping pod for its whole life.
pub(crate) struct ThreadRandom;

impl TryRng for ThreadRandom {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok(rand::rng().next_u32())
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(rand::rng().next_u64())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        rand::rng().fill_bytes(dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_fresh_bytes_at_each_call() {
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        ThreadRandom.try_fill_bytes(&mut a).unwrap();
        ThreadRandom.try_fill_bytes(&mut b).unwrap();
        assert_ne!(a, [0; 32]);
        assert_ne!(a, b);
        assert_ne!(ThreadRandom.try_next_u64(), ThreadRandom.try_next_u64());
    }
}
