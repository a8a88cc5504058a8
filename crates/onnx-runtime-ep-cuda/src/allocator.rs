//! A caching device allocator with size classes.
//!
//! Blocks are rounded up to a size class (steps of an eighth of the power of two below the
//! size, at least 512 bytes, so at most 12.5% is wasted);
//! a freed block goes back to its class's free list and is handed out again without calling
//! `cuMemAlloc`. All work runs on the provider's one stream, so a block freed on the host can be
//! reused at once by later work on that stream (stream order keeps earlier uses first).
//!
//! While a device graph is being captured, blocks go to that graph's private pool: a block the
//! capture frees is reused only by later work of the same capture, and after the capture the
//! pool's blocks stay reserved for the graph's replays until the graph is dropped.

use std::collections::{BTreeMap, HashMap, HashSet};

/// Bookkeeping only; the runtime does the driver calls.
#[derive(Default)]
pub struct CachingAllocator {
    free: BTreeMap<usize, Vec<u64>>,
    live: HashMap<u64, usize>,
    cached_bytes: usize,
    live_bytes: usize,
    /// How many blocks came from the driver (for tests and stats).
    pub driver_allocs: usize,
    pools: HashMap<u32, Pool>,
    /// The pool of the capture in progress.
    active_pool: Option<u32>,
    next_pool: u32,
    /// Which pool each pool block belongs to.
    owner: HashMap<u64, u32>,
}

/// A device graph's blocks: every one it was handed, and those its capture freed again.
#[derive(Default)]
struct Pool {
    blocks: HashMap<u64, usize>,
    free: BTreeMap<usize, Vec<u64>>,
    free_set: HashSet<u64>,
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

    /// Returns a live block to its free list; `None` when the pointer is not ours. A pool
    /// block goes back to its pool during the pool's capture and stays reserved after it.
    pub fn release(&mut self, ptr: u64) -> Option<usize> {
        if let Some(&id) = self.owner.get(&ptr) {
            let active = self.active_pool == Some(id);
            let pool = self.pools.get_mut(&id)?;
            let class = *pool.blocks.get(&ptr)?;
            // Freed: reused by the capture's later work while it lasts; after it, only
            // marked, so dropping the graph returns the block to the cache.
            if pool.free_set.insert(ptr) && active {
                pool.free.entry(class).or_default().push(ptr);
            }
            return Some(class);
        }
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

    /// Every block, live, cached or in a pool (for teardown).
    pub fn drain_all(&mut self) -> Vec<u64> {
        let ids: Vec<u32> = self.pools.keys().copied().collect();
        for id in ids {
            self.drop_pool(id);
        }
        let mut all = self.drain_cached();
        all.extend(self.live.drain().map(|(p, _)| p));
        self.live_bytes = 0;
        all
    }

    pub fn cached_bytes(&self) -> usize {
        self.cached_bytes
    }

    /// Starts a private pool for a capture; later `take_for_pool` calls draw into it.
    pub fn begin_pool(&mut self) -> u32 {
        let id = self.next_pool;
        self.next_pool = self.next_pool.wrapping_add(1);
        self.pools.insert(id, Pool::default());
        self.active_pool = Some(id);
        id
    }

    /// The capture's pool, if one is active.
    pub fn active_pool(&self) -> Option<u32> {
        self.active_pool
    }

    /// A block of `class` bytes for the active pool: one its capture freed, else a cached
    /// block moved into the pool. `None` when neither exists (the caller must not call the
    /// driver during a capture).
    pub fn take_for_pool(&mut self, class: usize) -> Option<u64> {
        let id = self.active_pool?;
        let pool = self.pools.get_mut(&id)?;
        if let Some(ptr) = pool.free.get_mut(&class).and_then(Vec::pop) {
            pool.free_set.remove(&ptr);
            return Some(ptr);
        }
        let ptr = self.free.get_mut(&class)?.pop()?;
        self.cached_bytes -= class;
        let pool = self.pools.get_mut(&id)?;
        pool.blocks.insert(ptr, class);
        self.owner.insert(ptr, id);
        Some(ptr)
    }

    /// Records a block fresh from the driver as the active pool's (a capture that needed
    /// more than the cache held). False without an active pool.
    pub fn record_pool_new(&mut self, ptr: u64, class: usize) -> bool {
        let Some(id) = self.active_pool else {
            return false;
        };
        let Some(pool) = self.pools.get_mut(&id) else {
            return false;
        };
        self.driver_allocs += 1;
        pool.blocks.insert(ptr, class);
        self.owner.insert(ptr, id);
        true
    }

    /// Ends the active pool's capture: its blocks stay reserved (`finished` true) or, for an
    /// abandoned capture, go back to the shared cache at once or when their tensor frees them.
    pub fn end_pool(&mut self, finished: bool) -> Option<u32> {
        let id = self.active_pool.take()?;
        if !finished {
            self.drop_pool(id);
            return None;
        }
        Some(id)
    }

    /// Gives a graph's blocks back: freed ones to the cache, ones still held by a tensor
    /// become ordinary live blocks (their `release` caches them).
    pub fn drop_pool(&mut self, id: u32) {
        if self.active_pool == Some(id) {
            self.active_pool = None;
        }
        let Some(pool) = self.pools.remove(&id) else {
            return;
        };
        for (ptr, class) in pool.blocks {
            self.owner.remove(&ptr);
            if pool.free_set.contains(&ptr) {
                self.free.entry(class).or_default().push(ptr);
                self.cached_bytes += class;
            } else {
                self.live.insert(ptr, class);
                self.live_bytes += class;
            }
        }
    }

    /// Bytes reserved by device graphs.
    pub fn pool_bytes(&self) -> usize {
        self.pools.values().flat_map(|p| p.blocks.values()).sum()
    }

    /// Bytes of one pool.
    pub fn pool_size(&self, id: u32) -> usize {
        self.pools.get(&id).map_or(0, |p| p.blocks.values().sum())
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

    #[test]
    fn a_pool_reuses_inside_its_capture_and_reserves_after() {
        let mut a = CachingAllocator::default();
        let class = size_class(4096);
        for p in [0x1000, 0x2000] {
            a.record_new(p, class);
            a.release(p);
        }
        let id = a.begin_pool();
        let x = a.take_for_pool(class).unwrap();
        assert_eq!(a.release(x), Some(class));
        // Freed during the capture: the capture's next request of the class reuses it.
        assert_eq!(a.take_for_pool(class), Some(x));
        let y = a.take_for_pool(class).unwrap();
        assert_ne!(x, y);
        assert!(
            a.take_for_pool(class).is_none(),
            "the shared cache is empty"
        );
        assert_eq!(a.end_pool(true), Some(id));
        // After the capture the pool's blocks are the graph's: releasing keeps them out of
        // the shared cache.
        a.release(x);
        a.release(y);
        assert!(a.take_cached(class).is_none());
        assert_eq!(a.pool_bytes(), 2 * class);
        a.drop_pool(id);
        assert_eq!(a.pool_bytes(), 0);
        assert_eq!(
            a.cached_bytes(),
            2 * class,
            "both were released before the graph went"
        );
        assert_eq!(a.live_bytes(), 0);
        assert!(a.take_cached(class).is_some());
    }

    #[test]
    fn an_abandoned_pool_returns_its_blocks() {
        let mut a = CachingAllocator::default();
        let class = size_class(512);
        a.record_new(0x1000, class);
        a.release(0x1000);
        a.begin_pool();
        let x = a.take_for_pool(class).unwrap();
        assert_eq!(a.end_pool(false), None);
        // Still held by its tensor: an ordinary live block now.
        assert_eq!(a.release(x), Some(class));
        assert_eq!(a.take_cached(class), Some(x));
    }
}
