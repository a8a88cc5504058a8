//! Per-core data cache sizes of this CPU (CPUID's deterministic cache parameters: leaf 4 on
//! Intel, 0x8000_001D on AMD), for kernels that size their blocks to the caches.

use std::sync::OnceLock;

/// L1 data and L2 sizes in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caches {
    pub l1d: usize,
    pub l2: usize,
}

/// Sizes assumed where CPUID does not say: the smallest of current x86 server cores.
const FALLBACK: Caches = Caches {
    l1d: 32 << 10,
    l2: 1 << 20,
};

/// This CPU's caches (detected once).
pub fn caches() -> Caches {
    static C: OnceLock<Caches> = OnceLock::new();
    *C.get_or_init(|| detect().unwrap_or(FALLBACK))
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Option<Caches> {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    let (max, ext_max) = (__cpuid(0).eax, __cpuid(0x8000_0000).eax);
    let leaf = if max >= 4 && __cpuid_count(4, 0).eax & 0x1F != 0 {
        4
    } else if ext_max >= 0x8000_001D {
        0x8000_001D
    } else {
        return None;
    };
    let (mut l1d, mut l2) = (0, 0);
    for sub in 0..16 {
        let r = __cpuid_count(leaf, sub);
        let kind = r.eax & 0x1F;
        if kind == 0 {
            break;
        }
        let level = (r.eax >> 5) & 0x7;
        let line = (r.ebx & 0xFFF) as usize + 1;
        let parts = ((r.ebx >> 12) & 0x3FF) as usize + 1;
        let ways = ((r.ebx >> 22) & 0x3FF) as usize + 1;
        let sets = r.ecx as usize + 1;
        let size = line * parts * ways * sets;
        match (level, kind) {
            (1, 1) => l1d = size,
            (2, 1 | 3) => l2 = size,
            _ => {}
        }
    }
    (l1d > 0 && l2 > 0).then_some(Caches { l1d, l2 })
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Option<Caches> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_plausible() {
        let c = caches();
        assert!((16 << 10..=256 << 10).contains(&c.l1d), "{c:?}");
        assert!(
            (256 << 10..=64 << 20).contains(&c.l2) && c.l2 > c.l1d,
            "{c:?}"
        );
    }
}
