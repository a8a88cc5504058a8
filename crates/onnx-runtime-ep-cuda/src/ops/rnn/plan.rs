//! The launch sequence of a recurrent node as plain data: which kernels of `rnn.cu` run, on
//! which grids, with which by-value parameters, and the layout of the workspace. It depends on
//! nothing but `std` (device addresses are plain `u64`s), so the sequence can be checked
//! without a GPU; [`super`] turns it into launches.

/// Hidden sizes up to this run the whole sequence in one launch (`rnn_fused_*`).
pub const FUSED_MAX_H: usize = 128;

/// Warps of a fused block at most (the hidden units are spread over them).
pub const FUSED_WARPS: usize = 16;

/// Threads of a step block (8 warps).
pub const STEP_THREADS: usize = 256;

/// Batch rows a warp multiplies at once: 1 for a single row, else 8 (rnn.cu's BCH).
pub fn batch_chunk(batch: usize) -> usize {
    if batch == 1 {
        1
    } else {
        8
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Rnn,
    Gru,
    Lstm,
}

impl Kind {
    pub fn gates(self) -> usize {
        match self {
            Kind::Rnn => 1,
            Kind::Gru => 3,
            Kind::Lstm => 4,
        }
    }

    /// Activations per direction (f; f, g; f, g, h).
    pub fn n_act(self) -> usize {
        match self {
            Kind::Rnn => 1,
            Kind::Gru => 2,
            Kind::Lstm => 3,
        }
    }

    pub fn max_outputs(self) -> usize {
        if self == Kind::Lstm {
            3
        } else {
            2
        }
    }

    /// RNN_KIND of rnn.cu.
    pub fn code(self) -> usize {
        match self {
            Kind::Rnn => 0,
            Kind::Gru => 1,
            Kind::Lstm => 2,
        }
    }

    pub fn tag(self) -> &'static str {
        match self {
            Kind::Rnn => "rnn",
            Kind::Gru => "gru",
            Kind::Lstm => "lstm",
        }
    }

    /// The per-step modes rnn.cu instantiates for the kind.
    pub fn step_modes(self) -> &'static [u8] {
        match self {
            Kind::Rnn => &[M_RNN],
            Kind::Gru => &[M_GRU1, M_GRUA, M_GRUB],
            Kind::Lstm => &[M_LSTM],
        }
    }

    /// The whole-sequence modes rnn.cu instantiates for the kind.
    pub fn fused_modes(self) -> &'static [u8] {
        match self {
            Kind::Rnn => &[M_RNN],
            Kind::Gru => &[M_GRU1, M_GRUA],
            Kind::Lstm => &[M_LSTM],
        }
    }
}

// Cell modes, as rnn.cu numbers them.
pub const M_RNN: u8 = 0;
/// GRU, linear_before_reset = 1 (one pass a step).
pub const M_GRU1: u8 = 1;
/// GRU, linear_before_reset = 0, phase A (z, r, r * H); as a fused mode: the two-phase GRU.
pub const M_GRUA: u8 = 2;
/// GRU, linear_before_reset = 0, phase B (the hidden gate).
pub const M_GRUB: u8 = 3;
pub const M_LSTM: u8 = 4;

/// An activation of the list: code (the order of `activate` in rnn.cu), alpha, beta.
pub type Act = (i32, f32, f32);

/// The node's attributes, as the kernels use them.
#[derive(Clone, Debug)]
pub struct Config {
    pub kind: Kind,
    pub hidden: usize,
    /// Per direction: true = reverse.
    pub dirs: Vec<bool>,
    /// `kind.n_act()` per direction.
    pub acts: Vec<Act>,
    pub clip: Option<f32>,
    pub layout: bool,
    pub linear_before_reset: bool,
    pub input_forget: bool,
}

/// A tensor of the call: device address, shape, element strides.
#[derive(Clone, Copy, Debug)]
pub struct Desc<'a> {
    pub ptr: u64,
    pub shape: &'a [usize],
    pub strides: &'a [usize],
}

impl Desc<'_> {
    fn s(&self, k: usize) -> i64 {
        self.strides[k] as i64
    }

    fn contiguous(&self) -> bool {
        if self.shape.contains(&0) {
            return true;
        }
        let mut expected = 1usize;
        for (&d, &s) in self.shape.iter().zip(self.strides).rev() {
            if d != 1 && s != expected {
                return false;
            }
            expected = expected.saturating_mul(d);
        }
        true
    }
}

/// The validated tensors of one call (shapes checked by the caller against the node).
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    pub seq: usize,
    pub batch: usize,
    pub input: usize,
    /// Element width of the tensors' dtype (2, 4 or 8).
    pub width: usize,
    /// Whether the dtype is double (the accumulator then is too).
    pub double: bool,
    pub x: Desc<'a>,
    pub w: Desc<'a>,
    pub r: Desc<'a>,
    pub b: Option<Desc<'a>>,
    /// sequence_lens and its ONNX dtype code.
    pub lens: Option<(Desc<'a>, i32)>,
    pub h0: Option<Desc<'a>>,
    pub c0: Option<Desc<'a>>,
    pub p: Option<Desc<'a>>,
    /// Y, Y_h, Y_c where written.
    pub y: Option<Desc<'a>>,
    pub yh: Option<Desc<'a>>,
    pub yc: Option<Desc<'a>>,
    /// The device error word and the kernel's id in it.
    pub err: u64,
    pub id: u32,
}

// ---- launch parameters (mirrors of the structs in rnn.cu) ----

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RnnParams {
    pub xw: u64,
    pub r: u64,
    pub hprev: u64,
    pub hnext: u64,
    pub c: u64,
    pub zbuf: u64,
    pub rh: u64,
    pub y: u64,
    pub yh: u64,
    pub yc: u64,
    pub lens: u64,
    pub p: u64,
    pub bias: u64,
    pub h0: u64,
    pub c0: u64,
    pub err: u64,
    pub y_s: [i64; 4],
    pub yh_s: [i64; 3],
    pub yc_s: [i64; 3],
    pub h0_s: [i64; 3],
    pub c0_s: [i64; 3],
    pub p_s: [i64; 2],
    pub b_s: [i64; 2],
    pub lens_stride: i64,
    pub lens_code: i32,
    pub t: i32,
    pub b: i32,
    pub h: i32,
    pub d: i32,
    pub step: i32,
    pub zero_prev: i32,
    pub final_write: i32,
    pub rev: [i32; 2],
    pub act: [i32; 6],
    pub alpha: [f32; 6],
    pub beta: [f32; 6],
    pub clip: f32,
    pub has_clip: i32,
    pub input_forget: i32,
    pub id: u32,
}

const _: () = assert!(std::mem::size_of::<RnnParams>() == 424);

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RnnProj {
    pub x: u64,
    pub w: u64,
    pub bias: u64,
    pub out: u64,
    pub x_s: [i64; 3],
    pub w_s: [i64; 3],
    pub b_s: [i64; 2],
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub nb: i32,
    pub add_rb: i32,
}

const _: () = assert!(std::mem::size_of::<RnnProj>() == 128);

/// One unit of device work, in order.
#[derive(Clone, Copy, Debug)]
pub enum Launch<'a> {
    /// Copy R (any strides) into the workspace, contiguous.
    PackR { src: Desc<'a>, dst: u64 },
    /// `rnn_proj` on a (x, y, z) grid of 256-thread blocks.
    Proj { grid: (u32, u32, u32), p: RnnProj },
    /// `rnn_init`, a grid-stride launch over `n` elements.
    Init { n: usize, p: RnnParams },
    /// `rnn_fused_m{mode}_b{bch}_v{vec}`.
    Fused {
        mode: u8,
        bch: usize,
        vec: bool,
        grid: (u32, u32, u32),
        threads: u32,
        shared: u32,
        p: RnnParams,
    },
    /// `rnn_step_m{mode}_b{bch}_v{vec}` on `blocks` blocks of [`STEP_THREADS`].
    Step {
        mode: u8,
        bch: usize,
        vec: bool,
        blocks: u32,
        p: RnnParams,
    },
}

/// Byte offsets of the workspace's parts (each 256-byte aligned) and its size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Workspace {
    pub xw: usize,
    /// h ping-pong (2), LSTM c, GRU (lbr 0) z and r * h; step path only.
    pub state: [Option<usize>; 5],
    pub pack: Option<usize>,
    pub bytes: usize,
}

fn take(end: &mut usize, elems: usize, width: usize) -> Result<usize, String> {
    let overflow = || "the recurrent workspace size overflows".to_string();
    let bytes = elems
        .checked_mul(width)
        .and_then(|b| b.checked_add(255))
        .ok_or_else(overflow)?
        & !255;
    let at = *end;
    *end = at.checked_add(bytes).ok_or_else(overflow)?;
    Ok(at)
}

impl Config {
    pub fn nd(&self) -> usize {
        self.dirs.len()
    }

    pub fn fused(&self) -> bool {
        self.hidden <= FUSED_MAX_H
    }

    fn gru0(&self) -> bool {
        self.kind == Kind::Gru && !self.linear_before_reset
    }

    /// (t, b, k) strides of X.
    fn x_strides(&self, x: &Desc<'_>) -> [i64; 3] {
        if self.layout {
            [x.s(1), x.s(0), x.s(2)]
        } else {
            [x.s(0), x.s(1), x.s(2)]
        }
    }

    /// (d, b, j) strides of a state tensor (initial_h / initial_c / Y_h / Y_c).
    fn state_strides(&self, t: &Desc<'_>) -> [i64; 3] {
        if self.layout {
            [t.s(1), t.s(0), t.s(2)]
        } else {
            [t.s(0), t.s(1), t.s(2)]
        }
    }

    /// (t, d, b, j) strides of Y.
    fn y_strides(&self, y: &Desc<'_>) -> [i64; 4] {
        if self.layout {
            [y.s(1), y.s(2), y.s(0), y.s(3)]
        } else {
            [y.s(0), y.s(1), y.s(2), y.s(3)]
        }
    }

    /// The workspace a call needs (nothing when it has no step or no batch row).
    pub fn workspace(&self, c: &Call<'_>) -> Result<Workspace, String> {
        let mut ws = Workspace::default();
        if c.batch == 0 || c.seq == 0 {
            return Ok(ws);
        }
        let (h, gh, nd) = (self.hidden, self.kind.gates() * self.hidden, self.nd());
        let aw = if c.double { 8 } else { 4 };
        let mut end = 0usize;
        let rows = c
            .seq
            .checked_mul(c.batch)
            .ok_or("seq_length * batch_size overflows")?;
        let xw_elems = rows
            .checked_mul(nd * gh)
            .ok_or("the projection workspace overflows")?;
        if gh.div_ceil(64) > 65535 || rows.div_ceil(64) > i32::MAX as usize {
            return Err(format!(
                "{} gate(s) x hidden_size {h} or seq_length x batch_size {rows} exceed the \
                 projection kernel's grid; run this node on the CPU provider",
                self.kind.gates()
            ));
        }
        let chunks = c.batch.div_ceil(batch_chunk(c.batch));
        if (nd * h * chunks).div_ceil(STEP_THREADS / 32) > i32::MAX as usize {
            return Err(
                "the recurrent step grid is too large; run this node on the CPU \
                        provider"
                    .into(),
            );
        }
        ws.xw = take(&mut end, xw_elems, aw)?;
        if !self.fused() {
            let states = nd * c.batch * h;
            let lstm = self.kind == Kind::Lstm;
            for (k, at) in ws.state.iter_mut().enumerate() {
                if k < 2 || (k == 2 && lstm) || (k >= 3 && self.gru0()) {
                    *at = Some(take(&mut end, states, aw)?);
                }
            }
        }
        if !c.r.contiguous() {
            ws.pack = Some(take(&mut end, nd * gh * h, c.width)?);
        }
        ws.bytes = end;
        Ok(ws)
    }

    /// The parameters every cell launch shares.
    fn params(&self, c: &Call<'_>) -> RnnParams {
        let nd = self.nd();
        let mut p = RnnParams {
            t: c.seq as i32,
            b: c.batch as i32,
            h: self.hidden as i32,
            d: nd as i32,
            err: c.err,
            id: c.id,
            input_forget: i32::from(self.input_forget),
            ..Default::default()
        };
        if let Some(v) = self.clip {
            p.clip = v;
            p.has_clip = 1;
        }
        let n_act = self.kind.n_act();
        for d in 0..nd {
            p.rev[d] = i32::from(self.dirs[d]);
            for k in 0..n_act {
                let (code, a, b) = self.acts[d * n_act + k];
                p.act[d * 3 + k] = code;
                p.alpha[d * 3 + k] = a;
                p.beta[d * 3 + k] = b;
            }
        }
        if let Some(y) = &c.y {
            p.y = y.ptr;
            p.y_s = self.y_strides(y);
        }
        if let Some(t) = &c.yh {
            p.yh = t.ptr;
            p.yh_s = self.state_strides(t);
        }
        if let Some(t) = &c.yc {
            p.yc = t.ptr;
            p.yc_s = self.state_strides(t);
        }
        if let Some((l, code)) = &c.lens {
            p.lens = l.ptr;
            p.lens_code = *code;
            p.lens_stride = l
                .shape
                .iter()
                .zip(l.strides)
                .find(|(&d, _)| d > 1)
                .map_or(0, |(_, &s)| s as i64);
        }
        if let Some(b) = &c.b {
            p.bias = b.ptr;
            p.b_s = [b.s(0), b.s(1)];
        }
        if let Some(t) = &c.p {
            p.p = t.ptr;
            p.p_s = [t.s(0), t.s(1)];
        }
        if let Some(t) = &c.h0 {
            p.h0 = t.ptr;
            p.h0_s = self.state_strides(t);
        }
        if let Some(t) = &c.c0 {
            p.c0 = t.ptr;
            p.c0_s = self.state_strides(t);
        }
        p
    }

    /// Emits the call's launches in order; `base` is the address of the workspace laid out by
    /// [`Config::workspace`] (which also checks the grid limits).
    pub fn launches<'a, E>(
        &self,
        c: &Call<'a>,
        ws: &Workspace,
        base: u64,
        mut emit: impl FnMut(Launch<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        let (seq, batch) = (c.seq, c.batch);
        let (h, g, nd) = (self.hidden, self.kind.gates(), self.nd());
        let gh = g * h;
        if batch == 0 {
            return Ok(());
        }
        let mut p = self.params(c);
        let states = nd * batch * h;
        if seq == 0 {
            // No step: the final states are the initial ones.
            p.final_write = 1;
            return emit(Launch::Init { n: states, p });
        }
        let at = |off: usize| base + off as u64;
        let r_ptr = match ws.pack {
            Some(off) => {
                emit(Launch::PackR {
                    src: c.r,
                    dst: at(off),
                })?;
                at(off)
            }
            None => c.r.ptr,
        };
        // 1. The input projections (+ biases) of every step.
        let rows = seq * batch;
        let n_tiles = gh.div_ceil(64);
        let m_tiles = rows.div_ceil(64);
        emit(Launch::Proj {
            grid: (m_tiles as u32, n_tiles as u32, nd as u32),
            p: RnnProj {
                x: c.x.ptr,
                w: c.w.ptr,
                bias: p.bias,
                out: at(ws.xw),
                x_s: self.x_strides(&c.x),
                w_s: [c.w.s(0), c.w.s(1), c.w.s(2)],
                b_s: p.b_s,
                m: rows as i64,
                n: gh as i64,
                k: c.input as i64,
                nb: batch as i32,
                add_rb: if self.kind == Kind::Gru { 2 * h } else { gh } as i32,
            },
        })?;
        p.xw = at(ws.xw);
        p.r = r_ptr;
        let vec = h % (16 / c.width) == 0 && r_ptr % 16 == 0;
        let bch = batch_chunk(batch);
        let chunks = batch.div_ceil(bch);
        let aw = if c.double { 8 } else { 4 };
        // 2. The recurrence.
        if self.fused() {
            let mode = match self.kind {
                Kind::Rnn => M_RNN,
                Kind::Gru if self.linear_before_reset => M_GRU1,
                Kind::Gru => M_GRUA,
                Kind::Lstm => M_LSTM,
            };
            let tiles = 2 + usize::from(self.kind == Kind::Lstm) + 2 * usize::from(self.gru0());
            return emit(Launch::Fused {
                mode,
                bch,
                vec,
                grid: (chunks as u32, nd as u32, 1),
                threads: 32 * h.min(FUSED_WARPS) as u32,
                shared: (tiles * bch * h * aw) as u32,
                p,
            });
        }
        // Laid out by `workspace` under the same conditions.
        let slot = |k: usize| ws.state[k].map_or(0, at);
        let hbuf = [slot(0), slot(1)];
        if self.kind == Kind::Lstm {
            p.c = slot(2);
        }
        if self.gru0() {
            p.zbuf = slot(3);
            p.rh = slot(4);
        }
        let has_init = c.h0.is_some() || c.c0.is_some();
        if has_init {
            let mut q = p;
            q.hnext = hbuf[0];
            emit(Launch::Init { n: states, p: q })?;
        }
        let blocks = (nd * h * chunks).div_ceil(STEP_THREADS / 32);
        let modes: &[u8] = match self.kind {
            Kind::Rnn => &[M_RNN],
            Kind::Gru if self.linear_before_reset => &[M_GRU1],
            Kind::Gru => &[M_GRUA, M_GRUB],
            Kind::Lstm => &[M_LSTM],
        };
        for step in 0..seq {
            p.step = step as i32;
            p.hprev = hbuf[step % 2];
            p.hnext = hbuf[(step + 1) % 2];
            p.zero_prev = i32::from(step == 0 && !has_init);
            p.final_write = i32::from(step + 1 == seq);
            for &mode in modes {
                emit(Launch::Step {
                    mode,
                    bch,
                    vec,
                    blocks: blocks as u32,
                    p,
                })?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(kind: Kind, hidden: usize, dirs: usize, lbr: bool, layout: bool) -> Config {
        Config {
            kind,
            hidden,
            dirs: [false, true][..dirs].to_vec(),
            acts: vec![(2, 0.0, 0.0); kind.n_act() * dirs],
            clip: None,
            layout,
            linear_before_reset: lbr,
            input_forget: false,
        }
    }

    /// Shapes and contiguous strides of a call's tensors, kept alive for its descriptors.
    struct Shapes {
        x: (Vec<usize>, Vec<usize>),
        w: (Vec<usize>, Vec<usize>),
        r: (Vec<usize>, Vec<usize>),
        state: (Vec<usize>, Vec<usize>),
        y: (Vec<usize>, Vec<usize>),
    }

    fn dense(shape: Vec<usize>) -> (Vec<usize>, Vec<usize>) {
        let mut strides = vec![1usize; shape.len()];
        for k in (0..shape.len().saturating_sub(1)).rev() {
            strides[k] = strides[k + 1] * shape[k + 1];
        }
        (shape, strides)
    }

    fn shapes(c: &Config, seq: usize, batch: usize, input: usize) -> Shapes {
        let (nd, h, gh) = (c.nd(), c.hidden, c.kind.gates() * c.hidden);
        let (x, state, y) = if c.layout {
            (
                vec![batch, seq, input],
                vec![batch, nd, h],
                vec![batch, seq, nd, h],
            )
        } else {
            (
                vec![seq, batch, input],
                vec![nd, batch, h],
                vec![seq, nd, batch, h],
            )
        };
        Shapes {
            x: dense(x),
            w: dense(vec![nd, gh, input]),
            r: dense(vec![nd, gh, h]),
            state: dense(state),
            y: dense(y),
        }
    }

    fn d(t: &(Vec<usize>, Vec<usize>), ptr: u64) -> Desc<'_> {
        Desc {
            ptr,
            shape: &t.0,
            strides: &t.1,
        }
    }

    fn call<'a>(s: &'a Shapes, seq: usize, batch: usize, input: usize, h0: bool) -> Call<'a> {
        Call {
            seq,
            batch,
            input,
            width: 4,
            double: false,
            x: d(&s.x, 0x1000),
            w: d(&s.w, 0x2000),
            r: d(&s.r, 0x3000),
            b: None,
            lens: None,
            h0: h0.then(|| d(&s.state, 0x4000)),
            c0: None,
            p: None,
            y: Some(d(&s.y, 0x5000)),
            yh: Some(d(&s.state, 0x6000)),
            yc: None,
            err: 0x7000,
            id: 1,
        }
    }

    fn plan(c: &Config, call: &Call<'_>) -> (Workspace, Vec<String>, Vec<RnnParams>) {
        let ws = c.workspace(call).unwrap();
        let mut names = Vec::new();
        let mut steps = Vec::new();
        c.launches::<()>(call, &ws, 0x10_0000, |l| {
            names.push(match l {
                Launch::PackR { .. } => "pack".to_string(),
                Launch::Proj { .. } => "proj".into(),
                Launch::Init { .. } => "init".into(),
                Launch::Fused { mode, .. } => format!("fused{mode}"),
                Launch::Step { mode, p, .. } => {
                    steps.push(p);
                    format!("step{mode}")
                }
            });
            Ok(())
        })
        .unwrap();
        (ws, names, steps)
    }

    #[test]
    fn small_hidden_sizes_run_in_one_fused_launch() {
        let c = cfg(Kind::Lstm, 16, 2, false, false);
        let s = shapes(&c, 5, 3, 4);
        let (ws, names, _) = plan(&c, &call(&s, 5, 3, 4, true));
        assert_eq!(names, ["proj", "fused4"]);
        assert_eq!(ws.state, [None; 5]);
        assert_eq!(ws.bytes, (5 * 3 * 2 * 64 * 4usize).div_ceil(256) * 256);
    }

    #[test]
    fn large_hidden_sizes_step_with_ping_pong_states() {
        // GRU with linear_before_reset 0: two launches a step, after the initial states.
        let c = cfg(Kind::Gru, 200, 1, false, false);
        let s = shapes(&c, 3, 2, 4);
        let (ws, names, steps) = plan(&c, &call(&s, 3, 2, 4, true));
        assert_eq!(
            names,
            ["proj", "init", "step2", "step3", "step2", "step3", "step2", "step3"]
        );
        assert!(ws.state[0].is_some() && ws.state[1].is_some() && ws.state[2].is_none());
        assert!(ws.state[3].is_some() && ws.state[4].is_some());
        for (k, p) in steps.iter().enumerate() {
            let step = k / 2;
            assert_eq!(p.step as usize, step);
            assert_eq!(p.zero_prev, 0, "initial states given");
            assert_eq!(p.final_write, i32::from(step == 2));
            let h = |i: usize| 0x10_0000 + ws.state[i].unwrap() as u64;
            assert_eq!((p.hprev, p.hnext), (h(step % 2), h((step + 1) % 2)));
        }
        // Without initial states the first step starts from zeros and nothing initializes.
        let c = cfg(Kind::Lstm, 200, 2, false, false);
        let s = shapes(&c, 2, 9, 4);
        let (_, names, steps) = plan(&c, &call(&s, 2, 9, 4, false));
        assert_eq!(names, ["proj", "step4", "step4"]);
        assert_eq!((steps[0].zero_prev, steps[1].zero_prev), (1, 0));
        assert!(steps[0].c != 0);
    }

    #[test]
    fn empty_sequences_only_write_the_final_states() {
        let c = cfg(Kind::Rnn, 300, 1, false, false);
        let s = shapes(&c, 0, 2, 4);
        let (ws, names, _) = plan(&c, &call(&s, 0, 2, 4, true));
        assert_eq!(ws.bytes, 0);
        assert_eq!(names, ["init"]);
        let s = shapes(&c, 3, 0, 4);
        let (_, names, _) = plan(&c, &call(&s, 3, 0, 4, true));
        assert!(names.is_empty());
    }

    #[test]
    fn layout_1_permutes_strides_and_strided_r_is_packed() {
        let c = cfg(Kind::Rnn, 8, 2, false, true);
        let s = shapes(&c, 5, 3, 4);
        let mut k = call(&s, 5, 3, 4, true);
        let p = c.params(&k);
        // Y [B, T, D, H] contiguous = strides (80, 16, 8, 1); by (t, d, b, j).
        assert_eq!(p.y_s, [16, 8, 80, 1]);
        // Y_h [B, D, H] = strides (16, 8, 1); by (d, b, j).
        assert_eq!(p.yh_s, [8, 16, 1]);
        assert_eq!(c.x_strides(&k.x), [4, 20, 1]);
        let reversed = vec![1, 2, 16];
        k.r = Desc {
            ptr: 0x3000,
            shape: &s.r.0,
            strides: &reversed,
        };
        let (ws, names, _) = plan(&c, &k);
        assert!(ws.pack.is_some());
        assert_eq!(names, ["pack", "proj", "fused0"]);
    }
}
