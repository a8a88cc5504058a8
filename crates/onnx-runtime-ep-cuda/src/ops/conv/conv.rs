//! Conv and com.microsoft FusedConv on cuDNN's forward convolution.
//!
//! `Y = act(conv(X, W) + B + Z)`. With a bias, identity or ReLU, packed operands and an
//! algorithm that allows it, the whole expression is one `cudnnConvolutionBiasActivationForward`
//! call; otherwise `cudnnConvolutionForward` writes the output and one epilogue pass adds the
//! bias and Z and applies the activation. A 1-D convolution runs as a 2-D one over a trailing
//! axis of 1; asymmetric pads run as cuDNN's symmetric `min(begin, end)` on an input that a
//! packing pass pads by the difference.

use super::dnn::{self, ActDesc, Algo, ConvDesc, Dnn, FilterDesc, TensorDesc, Types};
use super::fused::Activation;
use super::{
    check_spatial, is_packed, parse_group, ConvGeom, Epilogue, Helpers, Scratch, Src, WindowAttrs,
    FLOATS,
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

/// Whether cuDNN's fused call worked for a plan.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fused {
    Untried,
    Works,
    Fails,
}

/// cuDNN descriptors, algorithm and buffers for one (dtype, X shape, W shape).
struct Plan {
    ty: Types,
    x: TensorDesc,
    w: FilterDesc,
    conv: ConvDesc,
    y: TensorDesc,
    bias: TensorDesc,
    relu: ActDesc,
    identity: ActDesc,
    algos: Vec<Algo<sys::cudnnConvolutionFwdAlgo_t>>,
    current: usize,
    ws: CuPtr,
    /// The input cuDNN reads (ONNX rank): X padded by the asymmetric part of the pads.
    xdims: Vec<usize>,
    /// Where X starts in it, per axis.
    xoff: Vec<i64>,
    padded: bool,
    out: Vec<usize>,
    fused: Fused,
    sx: Scratch,
    sw: Scratch,
    sy: Scratch,
}

type Key = (DataType, Vec<usize>, Vec<usize>);

struct ConvKernel {
    base: Base,
    wa: WindowAttrs,
    group: usize,
    act: Activation,
    /// FusedConv (takes Z) rather than Conv.
    fused_op: bool,
    dnn: Arc<Dnn>,
    helpers: HashMap<DataType, Helpers>,
    plans: Mutex<HashMap<Key, Arc<Mutex<Plan>>>>,
    warmed: AtomicBool,
}

/// A 1-D convolution's shapes as 2-D ones (a trailing axis of 1); others unchanged.
pub(super) fn as_cudnn(v: &[usize], spatial: usize, fill: usize) -> Vec<usize> {
    let mut v = v.to_vec();
    if spatial == 1 {
        v.push(fill);
    }
    v
}

/// The stride between consecutive values of a tensor holding `m` values along one axis
/// (B of shape [M], or [1, M, 1] and the like), or None when it is not one axis.
pub(super) fn vector_stride(v: &TensorView<'_>) -> Option<usize> {
    if v.numel() <= 1 {
        return Some(0);
    }
    let axes: Vec<usize> = (0..v.rank()).filter(|&k| v.shape[k] != 1).collect();
    match axes.as_slice() {
        [k] => Some(v.strides[*k]),
        _ => None,
    }
}

impl ConvKernel {
    /// Dtype, geometry and the optional inputs' checks shared by `output_types` and
    /// `execute`.
    fn validate(&self, inputs: &[TensorView<'_>]) -> EpResult<(DataType, ConvGeom)> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let w = base.req(inputs, 1)?;
        let dtype = x.dtype;
        if Types::of(dtype).is_none() {
            return Err(base.unsupported(
                dtype,
                "the CUDA convolutions take float32, float64, float16 and bfloat16",
            ));
        }
        let extra = [Some(w), base.input(inputs, 2), self.z(inputs)];
        for t in extra.into_iter().flatten() {
            if t.dtype != dtype {
                return Err(base.err(format!("inputs mix {dtype} and {}", t.dtype)));
            }
        }
        check_spatial(base, dtype, x.rank())?;
        let g = ConvGeom::new(base, &self.wa, self.group, x.shape, w.shape)?;
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
        if let Some(z) = self.z(inputs) {
            if z.shape != g.out_shape().as_slice() {
                return Err(base.err(format!(
                    "Z has shape {:?}; it must have the output's shape {:?}",
                    z.shape,
                    g.out_shape()
                )));
            }
        }
        Ok((dtype, g))
    }

    fn z<'a, 'b>(&self, inputs: &'b [TensorView<'a>]) -> Option<&'b TensorView<'a>> {
        if self.fused_op {
            self.base.input(inputs, 3)
        } else {
            None
        }
    }

    /// The plan for these shapes: made on first use (outside capture).
    fn plan(
        &self,
        dtype: DataType,
        g: &ConvGeom,
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
                    "{} chooses its cuDNN algorithm on the first eager run of each input shape; \
                     X {x:?} with W {w:?} was not run eagerly: run it once before capturing",
                    self.base.op
                ),
            });
        }
        let plan = Arc::new(Mutex::new(self.make_plan(dtype, g, w)?));
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        Ok(plans.entry(key).or_insert(plan).clone())
    }

    fn make_plan(&self, dtype: DataType, g: &ConvGeom, w: &[usize]) -> EpResult<Plan> {
        let base = &self.base;
        let ty = Types::of(dtype)
            .ok_or_else(|| base.unsupported(dtype, "not a float type cuDNN convolves"))?;
        let win = &g.win;
        let r = win.input.len();
        let sym: Vec<usize> = (0..r)
            .map(|i| win.pad_begin[i].min(win.pad_end[i]))
            .collect();
        let mut xdims = vec![g.n, g.c];
        let mut xoff = vec![0i64, 0];
        for (i, &p) in sym.iter().enumerate() {
            xdims.push(win.input[i] + win.pad_begin[i] + win.pad_end[i] - 2 * p);
            xoff.push((win.pad_begin[i] - p) as i64);
        }
        let padded = xoff.iter().any(|&o| o != 0) || xdims[2..] != win.input[..];
        let out = g.out_shape();
        let xd = TensorDesc::new(ty.data, &as_cudnn(&xdims, r, 1))?;
        let wd = FilterDesc::new(ty.data, &as_cudnn(w, r, 1))?;
        let conv = ConvDesc::new(
            &as_cudnn(&sym, r, 0),
            &as_cudnn(&win.strides, r, 1),
            &as_cudnn(&win.dilations, r, 1),
            g.group,
            ty,
        )?;
        let ydims = as_cudnn(&out, r, 1);
        let cudnn_out = dnn::forward_output_dims(&conv, &xd, &wd, ydims.len())?;
        if cudnn_out != ydims {
            return Err(base.err(format!(
                "internal: cuDNN computes output {cudnn_out:?} where the ONNX rules give \
                 {ydims:?} (input {xdims:?}, W {w:?}, window {win:?})"
            )));
        }
        let yd = TensorDesc::new(ty.data, &ydims)?;
        let mut bdims = vec![1; ydims.len()];
        bdims[1] = g.m;
        let bias = TensorDesc::new(ty.data, &bdims)?;
        let algos = self.dnn.forward_algos(&xd, &wd, &conv, &yd, ty)?;
        let Some(first) = algos.first().copied() else {
            return Err(base.unsupported(
                dtype,
                format!(
                    "cuDNN {} has no forward algorithm for X {xdims:?}, W {w:?}, strides {:?}, \
                     dilations {:?}, group {}",
                    self.dnn.version, win.strides, win.dilations, g.group
                ),
            ));
        };
        let ws = self.dnn.workspace(&base.rt, first.workspace)?;
        Ok(Plan {
            ty,
            x: xd,
            w: wd,
            conv,
            y: yd,
            bias,
            relu: ActDesc::new(true)?,
            identity: ActDesc::new(false)?,
            algos,
            current: 0,
            ws,
            xdims,
            xoff,
            padded,
            out,
            fused: Fused::Untried,
            sx: Scratch::new(),
            sw: Scratch::new(),
            sy: Scratch::new(),
        })
    }
}

/// The operands of one call, resolved to device addresses.
struct Call<'a> {
    x: CuPtr,
    w: CuPtr,
    y: CuPtr,
    bias: Option<(CuPtr, usize)>,
    z: Option<&'a TensorView<'a>>,
}

impl Plan {
    fn algo(&self) -> Algo<sys::cudnnConvolutionFwdAlgo_t> {
        self.algos[self.current]
    }

    /// Moves to the next algorithm after `current` failed at run time (eagerly only).
    fn next_algo(&mut self, k: &ConvKernel, failure: EpError) -> EpResult<()> {
        if k.base.rt.is_capturing() || self.current + 1 >= self.algos.len() {
            return Err(failure);
        }
        self.current += 1;
        let a = self.algo();
        self.conv.set_math(a.math)?;
        self.ws = k.dnn.workspace(&k.base.rt, a.workspace)?;
        Ok(())
    }

    /// `cudnnConvolutionForward` into `c.y`, falling back to the next algorithm when one
    /// refuses at run time.
    fn forward(&mut self, k: &ConvKernel, c: &Call<'_>) -> EpResult<()> {
        loop {
            let a = self.algo();
            let scale = self.ty.scale(1.0, 0.0);
            k.base.rt.bind_thread()?;
            let status = {
                let h = k.dnn.lock();
                // SAFETY: the descriptors describe the packed buffers `c.x`, `c.w`, `c.y`
                // (sizes from the plan's shapes); the workspace holds `a.workspace` bytes.
                unsafe {
                    sys::cudnnConvolutionForward(
                        h.0,
                        scale.alpha(),
                        self.x.0,
                        dnn::dptr(c.x),
                        self.w.0,
                        dnn::dptr(c.w),
                        self.conv.0,
                        a.algo,
                        dnn::dptr_mut(self.ws),
                        a.workspace,
                        scale.beta(),
                        self.y.0,
                        dnn::dptr_mut(c.y),
                    )
                }
            };
            match dnn::check(status, &format!("cudnnConvolutionForward ({:?})", a.algo)) {
                Ok(()) => return Ok(()),
                Err(e) => self.next_algo(k, e)?,
            }
        }
    }

    /// `cudnnConvolutionBiasActivationForward`: `y = act(conv + z + bias)` in one call.
    fn forward_fused(&mut self, k: &ConvKernel, c: &Call<'_>, z: Option<CuPtr>) -> EpResult<()> {
        let a = self.algo();
        let scale = self.ty.scale(1.0, if z.is_some() { 1.0 } else { 0.0 });
        let act = if k.act == Activation::Relu {
            &self.relu
        } else {
            &self.identity
        };
        let bias = c.bias.map_or(0, |b| b.0);
        k.base.rt.bind_thread()?;
        let h = k.dnn.lock();
        // SAFETY: as in `forward`; Z (or Y, scaled by 0) has Y's packed shape and the bias
        // holds M packed values.
        let status = unsafe {
            sys::cudnnConvolutionBiasActivationForward(
                h.0,
                scale.alpha(),
                self.x.0,
                dnn::dptr(c.x),
                self.w.0,
                dnn::dptr(c.w),
                self.conv.0,
                a.algo,
                dnn::dptr_mut(self.ws),
                a.workspace,
                scale.beta(),
                self.y.0,
                dnn::dptr(z.unwrap_or(c.y)),
                self.bias.0,
                dnn::dptr(bias),
                act.0,
                self.y.0,
                dnn::dptr_mut(c.y),
            )
        };
        dnn::check(status, "cudnnConvolutionBiasActivationForward")
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        k: &ConvKernel,
        h: &Helpers,
        x: &TensorView<'_>,
        w: &TensorView<'_>,
        bias: Option<&TensorView<'_>>,
        z: Option<&TensorView<'_>>,
        out: &TensorMut<'_>,
    ) -> EpResult<()> {
        let base = &k.base;
        let width = x.dtype.element_size().unwrap_or(4);
        let xp = if !self.padded && is_packed(x.shape, x.strides) {
            ptr_of(x)
        } else {
            let bytes = self.xdims.iter().product::<usize>() * width;
            let p = self.sx.get(base, bytes, "padded input")?;
            h.pack(
                base,
                ptr_of(x),
                x.shape,
                x.strides,
                &self.xoff,
                &self.xdims,
                p,
            )?;
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
        let yp = if out_packed {
            mut_ptr_of(out)
        } else {
            let bytes = self.out.iter().product::<usize>() * width;
            self.sy.get(base, bytes, "output")?
        };
        let call = Call {
            x: xp,
            w: wp,
            y: yp,
            bias: bias.map(|b| (ptr_of(b), vector_stride(b).unwrap_or(1))),
            z,
        };
        let capturing = base.rt.is_capturing();
        let z_packed = call.z.is_none_or(|z| is_packed(z.shape, z.strides));
        let fusable = k.act.cudnn_fusable()
            && call.bias.is_some_and(|b| b.1 == 1 || self.out[1] == 1)
            && z_packed
            && (k.act == Activation::Relu
                || self.algo().algo
                    == sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
            && match self.fused {
                Fused::Works => true,
                Fused::Untried => !capturing,
                Fused::Fails => false,
            };
        if fusable {
            match self.forward_fused(k, &call, call.z.map(ptr_of)) {
                Ok(()) => {
                    self.fused = Fused::Works;
                    if !out_packed {
                        // Only the strided store is left.
                        h.finish(
                            base,
                            &Epilogue {
                                dims: out.shape,
                                dst: mut_ptr_of(out),
                                dst_strides: out.strides,
                                src: Some(Src {
                                    ptr: yp,
                                    dims: &self.out,
                                    off: &[0; super::CONV_RANK][..out.rank()],
                                }),
                                bias: None,
                                z: None,
                                act: Activation::None,
                            },
                        )?;
                    }
                    return Ok(());
                }
                Err(e) if capturing => return Err(e),
                Err(_) => self.fused = Fused::Fails,
            }
        }
        self.forward(k, &call)?;
        if call.bias.is_some() || call.z.is_some() || k.act != Activation::None || !out_packed {
            h.finish(
                base,
                &Epilogue {
                    dims: out.shape,
                    dst: mut_ptr_of(out),
                    dst_strides: out.strides,
                    src: Some(Src {
                        ptr: yp,
                        dims: &self.out,
                        off: &[0; super::CONV_RANK][..out.rank()],
                    }),
                    bias: call.bias,
                    z: call.z.map(|z| (ptr_of(z), z.strides)),
                    act: k.act,
                },
            )?;
        }
        Ok(())
    }

    fn release(&self, base: &Base) {
        self.sx.release(base);
        self.sw.release(base);
        self.sy.release(base);
    }
}

impl Kernel for ConvKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let (dtype, g) = self.validate(inputs)?;
        Ok(vec![(dtype, g.out_shape())])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let (dtype, g) = self.validate(inputs)?;
        let out_shape = g.out_shape();
        base.expect_outputs(outputs, &[(dtype, out_shape.clone())])?;
        let out = &outputs[0];
        if out.numel() == 0 {
            return Ok(());
        }
        let x = base.req(inputs, 0)?;
        let w = base.req(inputs, 1)?;
        let bias = base.input(inputs, 2);
        let z = self.z(inputs);
        let h = self
            .helpers
            .get(&dtype)
            .ok_or_else(|| base.unsupported(dtype, "no epilogue kernels for this dtype"))?;
        if x.numel() == 0 || w.numel() == 0 {
            // No input channels or an empty input: every product is zero (or padding).
            h.finish(
                base,
                &Epilogue {
                    dims: out.shape,
                    dst: mut_ptr_of(out),
                    dst_strides: out.strides,
                    src: None,
                    bias: bias.map(|b| (ptr_of(b), vector_stride(b).unwrap_or(1))),
                    z: z.map(|z| (ptr_of(z), z.strides)),
                    act: self.act,
                },
            )?;
            self.warmed.store(true, Ordering::Release);
            return Ok(());
        }
        let plan = self.plan(dtype, &g, x.shape, w.shape)?;
        let mut plan = plan.lock().unwrap_or_else(|e| e.into_inner());
        plan.run(self, h, x, w, bias, z, out)?;
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
                    "{}: {} chooses its cuDNN algorithm and workspace on its first eager run; \
                     run it once before capturing",
                    self.base.node, self.base.op
                ),
            }
        }
    }
}

impl Drop for ConvKernel {
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

fn build(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
    fused_op: bool,
) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let wa = WindowAttrs::parse(node)?;
    let group = parse_group(node)?;
    let act = if fused_op {
        Activation::parse(node)?
    } else {
        Activation::None
    };
    let base = Base::new(rt, node);
    let dnn = Dnn::get(rt)?;
    let mut helpers = HashMap::new();
    for (dtype, _) in FLOATS {
        helpers.insert(dtype, Helpers::load(&base, dtype)?);
    }
    Ok(Box::new(ConvKernel {
        base,
        wa,
        group,
        act,
        fused_op,
        dnn,
        helpers,
        plans: Mutex::new(HashMap::new()),
        warmed: AtomicBool::new(false),
    }))
}

pub fn build_conv(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, false)
}

pub fn build_fused(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, true)
}
