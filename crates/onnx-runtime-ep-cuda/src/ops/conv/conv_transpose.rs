//! ConvTranspose on cuDNN's backward-data convolution: X plays the gradient of a forward
//! convolution's output, W (`[C, M/group, k...]`) its filter, and the result is the gradient
//! of that convolution's input. cuDNN pads symmetrically, so it computes with
//! `p = min(pad_begin, pad_end)` into a buffer whose extent it accepts, and the epilogue crops
//! the ONNX output from it (at offset `pad_begin - p`; positions past what cuDNN wrote hold no
//! products, only the bias) and adds the bias. With symmetric pads the result lands in the
//! output directly.

use super::algo::Algo;
use super::conv::{as_cudnn, vector_stride};
use super::dnn::{self, ConvDesc, Dnn, FilterDesc, TensorDesc, Types};
use super::fused::Activation;
use super::{
    check_spatial, is_packed, parse_group, usize_list, AutoPad, Epilogue, Helpers, Scratch, Src,
    WindowAttrs, FLOATS,
};
use crate::ops::common::{mut_ptr_of, ptr_of, Base, OutputTypes};
use crate::runtime::{CuPtr, CudaRuntime};
use cudarc::cudnn::sys;
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The geometry of one call (the CPU provider's rules).
#[derive(Clone, Debug)]
struct Geom {
    n: usize,
    c: usize,
    m: usize,
    input: Vec<usize>,
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pad_begin: Vec<usize>,
    pad_end: Vec<usize>,
    out: Vec<usize>,
}

impl Geom {
    fn out_shape(&self) -> Vec<usize> {
        let mut s = vec![self.n, self.m];
        s.extend(&self.out);
        s
    }
}

struct Plan {
    ty: Types,
    dy: TensorDesc,
    w: FilterDesc,
    conv: ConvDesc,
    dx: TensorDesc,
    algos: Vec<Algo<sys::cudnnConvolutionBwdDataAlgo_t>>,
    current: usize,
    ws: CuPtr,
    /// What cuDNN writes (ONNX rank) and where the output starts in it.
    tdims: Vec<usize>,
    off: Vec<i64>,
    /// cuDNN writes the output itself (no crop).
    direct: bool,
    sx: Scratch,
    sw: Scratch,
    st: Scratch,
}

type Key = (DataType, Vec<usize>, Vec<usize>);

struct ConvTransposeKernel {
    base: Base,
    wa: WindowAttrs,
    group: usize,
    output_padding: Option<Vec<usize>>,
    output_shape: Option<Vec<usize>>,
    dnn: Arc<Dnn>,
    helpers: HashMap<DataType, Helpers>,
    plans: Mutex<HashMap<Key, Arc<Mutex<Plan>>>>,
    warmed: AtomicBool,
}

/// cuDNN's symmetric pad, the extent of the buffer it writes and where the output starts in
/// it, for one spatial axis of a transposed convolution (see the module doc).
fn cudnn_axis(
    input: usize,
    ek: usize,
    s: usize,
    pb: usize,
    pe: usize,
    out: usize,
) -> (usize, usize, i64) {
    let extent = |p: usize| -> Option<(usize, usize)> {
        // The extents whose forward convolution (pad p) gives back `input` positions.
        let lo = (s * (input.max(1) - 1) + ek) as i64 - 2 * p as i64;
        if lo < 1 {
            return None;
        }
        let lo = lo as usize;
        let needed = pb - p + out;
        let len = needed.clamp(lo, lo + s - 1);
        // Products reach buffer positions below lo + p; the needed ones must all fit.
        if needed.min(lo + p) > len {
            return None;
        }
        Some((lo, len))
    };
    let p = pb.min(pe);
    match extent(p) {
        Some((_, len)) => (p, len, (pb - p) as i64),
        None => {
            let (_, len) = extent(0).unwrap_or((1, 1));
            (0, len, pb as i64)
        }
    }
}

impl ConvTransposeKernel {
    fn geometry(&self, x: &[usize], w: &[usize]) -> EpResult<Geom> {
        let base = &self.base;
        if x.len() < 3 || x.len() > 10 || w.len() != x.len() {
            return Err(base.err(format!(
                "X {x:?} and W {w:?} must have one rank between 3 and 10"
            )));
        }
        let g = self.group;
        let (n, c) = (x[0], x[1]);
        if w[0] != c || c % g != 0 {
            return Err(base.err(format!(
                "W {w:?} must be [C={c}, M/group, k...] with C divisible by group={g}"
            )));
        }
        let m = w[1] * g;
        let r = x.len() - 2;
        let input = &x[2..];
        let kernel = w[2..].to_vec();
        if let Some(k) = &self.wa.kernel {
            if *k != kernel {
                return Err(base.err(format!("kernel_shape {k:?} does not match W {w:?}")));
            }
        }
        let get =
            |v: &Option<Vec<usize>>, name: &str, len: usize, d: usize| -> EpResult<Vec<usize>> {
                match v {
                    Some(v) if v.len() != len => {
                        Err(base.err(format!("{name} has {} values; want {len}", v.len())))
                    }
                    Some(v) => Ok(v.clone()),
                    None => Ok(vec![d; len]),
                }
            };
        let strides = get(&self.wa.strides, "strides", r, 1)?;
        let dilations = get(&self.wa.dilations, "dilations", r, 1)?;
        let out_pad = get(&self.output_padding, "output_padding", r, 0)?;
        let full: Vec<usize> = (0..r)
            .map(|i| {
                strides[i] * (input[i].max(1) - 1)
                    + out_pad[i]
                    + (kernel[i].max(1) - 1) * dilations[i]
                    + 1
            })
            .collect();
        let same = matches!(self.wa.auto_pad, AutoPad::SameUpper | AutoPad::SameLower);
        let (out, pb, pe) = if self.output_shape.is_some() || same {
            let target = match &self.output_shape {
                // output_shape may carry the N and C dims too.
                Some(s) if s.len() == r + 2 => s[2..].to_vec(),
                Some(s) if s.len() == r => s.clone(),
                Some(s) => {
                    return Err(
                        base.err(format!("output_shape {s:?} does not have {r} spatial dims"))
                    )
                }
                None => (0..r).map(|i| input[i] * strides[i]).collect(),
            };
            let mut pb = vec![0; r];
            let mut pe = vec![0; r];
            for i in 0..r {
                // A target beyond the full extent pads the end (negative total padding);
                // halves round toward -inf like the reference.
                let total = full[i] as i64 - target[i] as i64;
                let half = total.div_euclid(2);
                let (b, e) = if self.wa.auto_pad == AutoPad::SameUpper {
                    (half, total - half)
                } else {
                    (total - half, half)
                };
                if b < 0 {
                    return Err(base.err(format!(
                        "output_shape {target:?} needs negative begin padding against the \
                         full extent {full:?}"
                    )));
                }
                pb[i] = b as usize;
                pe[i] = e.max(0) as usize;
            }
            (target, pb, pe)
        } else {
            let pads = get(&self.wa.pads, "pads", 2 * r, 0)?;
            let mut out = vec![0; r];
            for i in 0..r {
                let p = pads[i] + pads[i + r];
                if full[i] < p {
                    return Err(base.err(format!(
                        "pads {pads:?} exceed the transposed extent {full:?}"
                    )));
                }
                out[i] = full[i] - p;
            }
            (out, pads[..r].to_vec(), pads[r..].to_vec())
        };
        Ok(Geom {
            n,
            c,
            m,
            input: input.to_vec(),
            kernel,
            strides,
            dilations,
            pad_begin: pb,
            pad_end: pe,
            out,
        })
    }

    fn validate(&self, inputs: &[TensorView<'_>]) -> EpResult<(DataType, Geom)> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let w = base.req(inputs, 1)?;
        let dtype = x.dtype;
        if Types::of(dtype, false).is_none() {
            return Err(base.unsupported(
                dtype,
                "the CUDA convolutions take float32, float64, float16 and bfloat16",
            ));
        }
        for t in [Some(w), base.input(inputs, 2)].into_iter().flatten() {
            if t.dtype != dtype {
                return Err(base.err(format!("inputs mix {dtype} and {}", t.dtype)));
            }
        }
        check_spatial(base, dtype, x.rank())?;
        let g = self.geometry(x.shape, w.shape)?;
        if let Some(b) = base.input(inputs, 2) {
            if b.numel() != g.m {
                return Err(base.err(format!("B has {} values; want M={}", b.numel(), g.m)));
            }
            if vector_stride(b).is_none() {
                return Err(base.err(format!(
                    "B of shape {:?} must hold its {} values along one axis",
                    b.shape, g.m
                )));
            }
        }
        Ok((dtype, g))
    }

    fn plan(
        &self,
        dtype: DataType,
        g: &Geom,
        x: &[usize],
        w: &[usize],
    ) -> EpResult<Arc<Mutex<Plan>>> {
        let key = (dtype, x.to_vec(), w.to_vec());
        if let Some(p) = self
            .plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(p.clone());
        }
        if self.base.rt.is_capturing() {
            return Err(EpError::Capture {
                node: self.base.node.clone(),
                message: format!(
                    "ConvTranspose chooses its cuDNN algorithm on the first eager run of each \
                     input shape; X {x:?} with W {w:?} was not run eagerly: run it once before \
                     capturing"
                ),
            });
        }
        let plan = Arc::new(Mutex::new(self.make_plan(dtype, g, w)?));
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        Ok(plans.entry(key).or_insert(plan).clone())
    }

    fn make_plan(&self, dtype: DataType, g: &Geom, w: &[usize]) -> EpResult<Plan> {
        let base = &self.base;
        let ty = Types::of(dtype, base.rt.tf32())
            .ok_or_else(|| base.unsupported(dtype, "not a float type cuDNN convolves"))?;
        let r = g.input.len();
        let mut pads = Vec::with_capacity(r);
        let mut tdims = vec![g.n, g.m];
        let mut off = vec![0i64, 0];
        for i in 0..r {
            let ek = (g.kernel[i].max(1) - 1) * g.dilations[i] + 1;
            let (p, len, o) = cudnn_axis(
                g.input[i],
                ek,
                g.strides[i],
                g.pad_begin[i],
                g.pad_end[i],
                g.out[i],
            );
            pads.push(p);
            tdims.push(len);
            off.push(o);
        }
        let direct = off.iter().all(|&o| o == 0) && tdims[2..] == g.out[..];
        let mut xdims = vec![g.n, g.c];
        xdims.extend(&g.input);
        let dy = TensorDesc::new(ty.data, &as_cudnn(&xdims, r, 1))?;
        let wd = FilterDesc::new(ty.data, &as_cudnn(w, r, 1))?;
        let conv = ConvDesc::new(
            &as_cudnn(&pads, r, 0),
            &as_cudnn(&g.strides, r, 1),
            &as_cudnn(&g.dilations, r, 1),
            self.group,
            ty,
        )?;
        let dxd = as_cudnn(&tdims, r, 1);
        let dx = TensorDesc::new(ty.data, &dxd)?;
        let back = dnn::forward_output_dims(&conv, &dx, &wd, dxd.len())?;
        let want = as_cudnn(&xdims, r, 1);
        if back != want {
            return Err(base.err(format!(
                "internal: cuDNN maps the buffer {tdims:?} back to {back:?}, not X {want:?} \
                 (pads {pads:?}, geometry {g:?})"
            )));
        }
        let algos = self.dnn.backward_data_algos(&wd, &dy, &conv, &dx, ty)?;
        let Some(first) = algos.first().copied() else {
            return Err(base.unsupported(
                dtype,
                format!(
                    "cuDNN {} has no backward-data algorithm for X {xdims:?}, W {w:?}, strides \
                     {:?}, dilations {:?}, group {}",
                    self.dnn.version, g.strides, g.dilations, self.group
                ),
            ));
        };
        let ws = self.dnn.workspace(&base.rt, first.workspace)?;
        Ok(Plan {
            ty,
            dy,
            w: wd,
            conv,
            dx,
            algos,
            current: 0,
            ws,
            tdims,
            off,
            direct,
            sx: Scratch::new(),
            sw: Scratch::new(),
            st: Scratch::new(),
        })
    }
}

impl Plan {
    fn backward_data(
        &mut self,
        k: &ConvTransposeKernel,
        x: CuPtr,
        w: CuPtr,
        dst: CuPtr,
    ) -> EpResult<()> {
        loop {
            let a = self.algos[self.current];
            let scale = self.ty.scale(1.0, 0.0);
            k.base.rt.bind_thread()?;
            let status = {
                let h = k.dnn.lock();
                // SAFETY: the descriptors describe the packed buffers `w`, `x` (dy) and `dst`
                // (dx, the plan's tdims); the workspace holds `a.workspace` bytes.
                unsafe {
                    sys::cudnnConvolutionBackwardData(
                        h.0,
                        scale.alpha(),
                        self.w.0,
                        dnn::dptr(w),
                        self.dy.0,
                        dnn::dptr(x),
                        self.conv.0,
                        a.algo,
                        dnn::dptr_mut(self.ws),
                        a.workspace,
                        scale.beta(),
                        self.dx.0,
                        dnn::dptr_mut(dst),
                    )
                }
            };
            match dnn::check(
                status,
                &format!("cudnnConvolutionBackwardData ({:?})", a.algo),
            ) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    if k.base.rt.is_capturing() || self.current + 1 >= self.algos.len() {
                        return Err(e);
                    }
                    self.current += 1;
                    let next = self.algos[self.current];
                    self.conv.set_math(next.math)?;
                    self.ws = k.dnn.workspace(&k.base.rt, next.workspace)?;
                }
            }
        }
    }

    fn run(
        &mut self,
        k: &ConvTransposeKernel,
        h: &Helpers,
        x: &TensorView<'_>,
        w: &TensorView<'_>,
        bias: Option<&TensorView<'_>>,
        out: &TensorMut<'_>,
    ) -> EpResult<()> {
        let base = &k.base;
        let width = x.dtype.element_size().unwrap_or(4);
        let xp = if is_packed(x.shape, x.strides) {
            ptr_of(x)
        } else {
            let p = self.sx.get(base, x.numel() * width, "packed input")?;
            let zeros = vec![0i64; x.rank()];
            h.pack(base, ptr_of(x), x.shape, x.strides, &zeros, x.shape, p)?;
            p
        };
        let wp = if is_packed(w.shape, w.strides) {
            ptr_of(w)
        } else {
            let p = self.sw.get(base, w.numel() * width, "packed weights")?;
            let zeros = vec![0i64; w.rank()];
            h.pack(base, ptr_of(w), w.shape, w.strides, &zeros, w.shape, p)?;
            p
        };
        let out_packed = is_packed(out.shape, out.strides);
        let in_place = self.direct && out_packed;
        let dst = if in_place {
            mut_ptr_of(out)
        } else {
            let bytes = self.tdims.iter().product::<usize>() * width;
            self.st.get(base, bytes, "uncropped output")?
        };
        self.backward_data(k, xp, wp, dst)?;
        if !in_place || bias.is_some() {
            h.finish(
                base,
                &Epilogue {
                    dims: out.shape,
                    dst: mut_ptr_of(out),
                    dst_strides: out.strides,
                    src: Some(Src {
                        ptr: dst,
                        dims: &self.tdims,
                        off: &self.off,
                    }),
                    bias: bias.map(|b| (ptr_of(b), vector_stride(b).unwrap_or(1))),
                    z: None,
                    act: Activation::None,
                },
            )?;
        }
        Ok(())
    }

    fn release(&self, base: &Base) {
        self.sx.release(base);
        self.sw.release(base);
        self.st.release(base);
    }
}

impl Kernel for ConvTransposeKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let (dtype, g) = self.validate(inputs)?;
        Ok(vec![(dtype, g.out_shape())])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let (dtype, g) = self.validate(inputs)?;
        base.expect_outputs(outputs, &[(dtype, g.out_shape())])?;
        let out = &outputs[0];
        if out.numel() == 0 {
            return Ok(());
        }
        let x = base.req(inputs, 0)?;
        let w = base.req(inputs, 1)?;
        let bias = base.input(inputs, 2);
        let h = self
            .helpers
            .get(&dtype)
            .ok_or_else(|| base.unsupported(dtype, "no epilogue kernels for this dtype"))?;
        if x.numel() == 0 || w.numel() == 0 {
            // No products: the output is the bias (or zeros).
            h.finish(
                base,
                &Epilogue {
                    dims: out.shape,
                    dst: mut_ptr_of(out),
                    dst_strides: out.strides,
                    src: None,
                    bias: bias.map(|b| (ptr_of(b), vector_stride(b).unwrap_or(1))),
                    z: None,
                    act: Activation::None,
                },
            )?;
            self.warmed.store(true, Ordering::Release);
            return Ok(());
        }
        let plan = self.plan(dtype, &g, x.shape, w.shape)?;
        let mut plan = plan.lock().unwrap_or_else(|e| e.into_inner());
        plan.run(self, h, x, w, bias, out)?;
        if !base.rt.is_capturing() {
            self.warmed.store(true, Ordering::Release);
        }
        Ok(())
    }

    fn capture_support(&self) -> CaptureSupport {
        if self.warmed.load(Ordering::Acquire) {
            CaptureSupport::Supported
        } else {
            CaptureSupport::Unsupported {
                reason: format!(
                    "{}: ConvTranspose chooses its cuDNN algorithm and workspace on its first \
                     eager run; run it once before capturing",
                    self.base.node
                ),
            }
        }
    }
}

impl Drop for ConvTransposeKernel {
    fn drop(&mut self) {
        for plan in self
            .plans
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            plan.lock()
                .unwrap_or_else(|e| e.into_inner())
                .release(&self.base);
        }
    }
}

pub fn build(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let wa = WindowAttrs::parse(node)?;
    let group = parse_group(node)?;
    let output_padding = usize_list(node, "output_padding")?;
    let output_shape = usize_list(node, "output_shape")?;
    let base = Base::new(rt, node);
    let dnn = Dnn::get(rt)?;
    let mut helpers = HashMap::new();
    for (dtype, _) in FLOATS {
        helpers.insert(dtype, Helpers::load(&base, dtype)?);
    }
    Ok(Box::new(ConvTransposeKernel {
        base,
        wa,
        group,
        output_padding,
        output_shape,
        dnn,
        helpers,
        plans: Mutex::new(HashMap::new()),
        warmed: AtomicBool::new(false),
    }))
}

#[cfg(test)]
mod tests {
    use super::cudnn_axis;

    /// Brute force: the positions the transposed convolution's products reach, and which of
    /// the output's positions the plan's buffer covers.
    fn check(input: usize, k: usize, d: usize, s: usize, pb: usize, pe: usize, op: usize) {
        let ek = (k - 1) * d + 1;
        let full = s * (input - 1) + op + ek;
        if full < pb + pe {
            return;
        }
        let out = full - pb - pe;
        let (p, len, off) = cudnn_axis(input, ek, s, pb, pe, out);
        // cuDNN's forward convolution over `len` with pad p must give back `input`.
        assert!(len + 2 * p >= ek, "{input} {k} {d} {s} {pb} {pe} {op}");
        assert_eq!((len + 2 * p - ek) / s + 1, input, "extent {len} pad {p}");
        assert_eq!(off, (pb - p) as i64);
        // Every output position with a product lies inside the buffer.
        for o in 0..input {
            for t in 0..k {
                let j = (o * s + t * d) as i64 - pb as i64;
                if j < 0 || j >= out as i64 {
                    continue;
                }
                let buf = j + off;
                assert!(
                    buf >= 0 && (buf as usize) < len,
                    "{input} {k} {d} {s} {pb} {pe} {op}: output {j} at buffer {buf} of {len}"
                );
            }
        }
    }

    #[test]
    fn cudnn_extent_covers_every_product() {
        for input in 1..5 {
            for k in 1..4 {
                for d in 1..3 {
                    for s in 1..4 {
                        for pb in 0..4 {
                            for pe in 0..4 {
                                for op in 0..s.max(d) {
                                    check(input, k, d, s, pb, pe, op);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
