//! A caching device allocator with size classes.
//!
//! Blocks are rounded up to a size class (steps of an eighth of the power of two below the
//! size, at least 512 bytes, so at most 12.5% is wasted);
//! a freed block goes back to its class's free list and is handed out again without calling
//! `cuMemAlloc`. All work runs on the provider's one stream, so a block freed on the host can be
//! reused at once by later work on that stream (stream order keeps earlier uses first).

use std::collections::{BTreeMap, HashMap};

/// Bookkeeping only; the runtime does the driver calls.
#[derive(Default)]
pub struct CachingAllocator {
    free: BTreeMap<usize, Vec<u64>>,
    live: HashMap<u64, usize>,
    cached_bytes: usize,
    live_bytes: usize,
    /// How many blocks came from the driver (for tests and stats).
    pub driver_allocs: usize,
}

/// The size class for a request of `size` bytes.
pub fn size_class(size: usize) -> usize {
    let s = size.max(512);
    let pow = s.checked_next_power_of_two().unwrap_or(s);
    let lower = if pow == s { s } else { pow / 2 };
    let step = (lower / 8).max(512);
    s.div_ceil(step).saturating_mul(step)
}

impl CachingAllocator {
    /// A cached block of `class` bytes, if one is free.
    pub fn take_cached(&mut self, class: usize) -> Option<u64> {
        let list = self.free.get_mut(&class)?;
        let ptr = list.pop()?;
        self.cached_bytes -= class;
        self.live.insert(ptr, class);
        self.live_bytes += class;
        Some(ptr)
    }

    /// Records a block fresh from the driver as live.
    pub fn record_new(&mut self, ptr: u64, class: usize) {
        self.driver_allocs += 1;
        self.live.insert(ptr, class);
        self.live_bytes += class;
    }

    /// Returns a live block to its free list; `None` when the pointer is not ours.
    pub fn release(&mut self, ptr: u64) -> Option<usize> {
        let class = self.live.remove(&ptr)?;
        self.live_bytes -= class;
        self.cached_bytes += class;
        self.free.entry(class).or_default().push(ptr);
        Some(class)
    }

    /// Empties the free lists, returning the blocks for the caller to give back to the driver.
    pub fn drain_cached(&mut self) -> Vec<u64> {
        self.cached_bytes = 0;
        std::mem::take(&mut self.free)
            .into_values()
            .flatten()
            .collect()
    }

    /// Every block, live or cached (for teardown).
    pub fn drain_all(&mut self) -> Vec<u64> {
        let mut all = self.drain_cached();
        all.extend(self.live.drain().map(|(p, _)| p));
        self.live_bytes = 0;
        all
    }

    pub fn cached_bytes(&self) -> usize {
        self.cached_bytes
    }

    pub fn live_bytes(&self) -> usize {
        self.live_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_round_up_within_an_eighth() {
        assert_eq!(size_class(0), 512);
        assert_eq!(size_class(1), 512);
        assert_eq!(size_class(512), 512);
        assert_eq!(size_class(513), 1024);
        assert_eq!(size_class(4096), 4096);
        assert_eq!(size_class(4097), 4608);
        for size in [1000usize, 12345, 1 << 20, (1 << 20) + 1, 3_000_000_000] {
            let c = size_class(size);
            assert!(c >= size);
            assert!(c - size <= (size / 8).max(512), "{size} -> {c}");
        }
    }

    #[test]
    fn reuse_without_new_driver_blocks() {
        let mut a = CachingAllocator::default();
        let class = size_class(1000);
        assert!(a.take_cached(class).is_none());
        a.record_new(0x1000, class);
        assert_eq!(a.release(0x1000), Some(class));
        assert_eq!(a.release(0x1000), None);
        assert_eq!(a.take_cached(class), Some(0x1000));
        assert_eq!(a.driver_allocs, 1);
        assert_eq!(a.live_bytes(), class);
        assert_eq!(a.drain_all(), vec![0x1000]);
    }
}
