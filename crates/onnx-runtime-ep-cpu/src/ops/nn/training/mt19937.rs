//! The Mersenne Twister MT19937 (Matsumoto and Nishimura, 1998), seeded and turned into
//! doubles as numpy's legacy `RandomState` does (`np.random.seed(s)` then
//! `np.random.uniform`), which is how the ONNX reference draws training-mode Dropout masks.
//! A seeded Dropout therefore drops the same elements as the reference on its first run.

const N: usize = 624;
const M: usize = 397;

pub struct Mt19937 {
    state: [u32; N],
    pos: usize,
}

impl Mt19937 {
    /// The generator numpy's `RandomState(seed)` builds for an integer seed below 2^32.
    pub fn new(seed: u32) -> Self {
        let mut state = [0u32; N];
        state[0] = seed;
        for i in 1..N {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 { state, pos: N }
    }

    /// Regenerates the whole state block.
    fn twist(&mut self) {
        for i in 0..N {
            let y = (self.state[i] & 0x8000_0000) | (self.state[(i + 1) % N] & 0x7fff_ffff);
            let mut next = self.state[(i + M) % N] ^ (y >> 1);
            if y & 1 != 0 {
                next ^= 0x9908_b0df;
            }
            self.state[i] = next;
        }
        self.pos = 0;
    }

    pub fn next_u32(&mut self) -> u32 {
        if self.pos >= N {
            self.twist();
        }
        let mut y = self.state[self.pos];
        self.pos += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// A double in [0, 1) with 53 random bits: 27 from one draw and 26 from the next.
    pub fn next_f64(&mut self) -> f64 {
        let a = (self.next_u32() >> 5) as f64;
        let b = (self.next_u32() >> 6) as f64;
        (a * 67_108_864.0 + b) / 9_007_199_254_740_992.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values printed by numpy 2 (`np.random.seed(s); np.random.uniform(0, 1, n)`), as hex
    /// floats so the comparison is exact; the second seed crosses the 624-word state block.
    #[test]
    fn matches_numpy_random_state() {
        let mut g = Mt19937::new(0);
        let got: Vec<f64> = (0..3).map(|_| g.next_f64()).collect();
        let want = [0.5488135039273248, 0.7151893663724195, 0.6027633760716439];
        assert_eq!(got, want);
        let mut g = Mt19937::new(1_234_567);
        let v: Vec<f64> = (0..700).map(|_| g.next_f64()).collect();
        let picks = [v[0], v[623], v[624], v[699]];
        let want = [
            0.23702916849534994,
            0.4861214549786258,
            0.16376403041251808,
            0.16490210210136902,
        ];
        assert_eq!(picks, want);
    }
}
