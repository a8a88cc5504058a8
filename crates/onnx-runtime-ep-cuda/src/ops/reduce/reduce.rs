//! ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceLogSum,
//! ReduceLogSumExp and ReduceSumSquare over any set of axes, for every numeric dtype (bool for
//! ReduceMax/ReduceMin, opset 20). Axes come from the `axes` attribute before opset 18 (13
//! for ReduceSum) and from the optional second input after, read on the host (the kernel is
//! capturable after one eager run). Without axes everything is reduced, or nothing with
//! `noop_with_empty_axes` (the element-wise part, such as the square, still applies, as on
//! the CPU provider). Empty reductions give the identity (0, 1, -inf/+inf, NaN for the mean).

use super::*;
use onnx_runtime_ep_api::{CaptureSupport, Kernel, KernelRequest, TensorMut, TensorView};
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::Sum,
        Kind::Mean,
        Kind::Max,
        Kind::Min,
        Kind::Prod,
        Kind::L1,
        Kind::L2,
        Kind::LogSum,
        Kind::LogSumExp,
        Kind::SumSquare,
    ];

    /// The ONNX op and the kind's struct template in reduce.cu.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Kind::Sum => ("ReduceSum", "KSum"),
            Kind::Mean => ("ReduceMean", "KMean"),
            Kind::Max => ("ReduceMax", "KMax"),
            Kind::Min => ("ReduceMin", "KMin"),
            Kind::Prod => ("ReduceProd", "KProd"),
            Kind::L1 => ("ReduceL1", "KL1"),
            Kind::L2 => ("ReduceL2", "KL2"),
            Kind::LogSum => ("ReduceLogSum", "KLogSum"),
            Kind::LogSumExp => ("ReduceLogSumExp", "KLogSumExp"),
            Kind::SumSquare => ("ReduceSumSquare", "KSumSquare"),
        }
    }

    /// The module of this kind: kernels for every numeric dtype.
    pub fn module(self) -> ModuleSpec {
        let (op, kind) = self.names();
        ModuleSpec::new(
            format!(
                "reduce_{}",
                op.trim_start_matches("Reduce").to_ascii_lowercase()
            ),
            with_common!("../../kernels/reduce.cu"),
        )
        .define("REDUCE_KIND", kind)
        .with_half()
    }

    /// The first opset whose axes are an input.
    fn axes_input_from(self) -> u64 {
        if self == Kind::Sum {
            13
        } else {
            18
        }
    }

    /// The since-versions of the op (as the CPU provider registers them).
    fn versions(self) -> &'static [u64] {
        match self {
            Kind::Sum => &[1, 11, 13],
            Kind::Max | Kind::Min => &[1, 11, 12, 13, 18, 20],
            _ => &[1, 11, 13, 18],
        }
    }
}

struct ReduceKernel {
    base: Base,
    host: HostReads,
    keepdims: bool,
    noop_empty: bool,
    /// Axes from the attribute (older opsets); `None` when they come from input 1.
    attr_axes: Option<Vec<i64>>,
    fns: HashMap<DataType, RedFns>,
    ws: Arc<Workspace>,
}

impl ReduceKernel {
    fn fns(&self, dtype: DataType) -> EpResult<&RedFns> {
        self.fns.get(&dtype).ok_or_else(|| {
            self.base.unsupported(
                dtype,
                format!(
                    "the CUDA {} takes float, double, float16, bfloat16 and integer types{}",
                    self.base.op,
                    if matches!(self.base.op.as_str(), "ReduceMax" | "ReduceMin") {
                        " and bool"
                    } else {
                        ""
                    }
                ),
            )
        })
    }

    /// Which axes are reduced and the output shape, for this input and host-read axes.
    fn resolve(&self, x: &TensorView<'_>, host: &HostValues) -> EpResult<(Vec<bool>, Vec<usize>)> {
        let base = &self.base;
        let axes: Vec<i64> = match &self.attr_axes {
            Some(a) => a.clone(),
            None => host.get(1).cloned().flatten().unwrap_or_default(),
        };
        let rank = x.rank();
        let mut reduced = vec![axes.is_empty() && !self.noop_empty; rank];
        for &a in &axes {
            let k = base.axis(a, rank, "axis")?;
            if std::mem::replace(&mut reduced[k], true) {
                return Err(base.err(format!("axis {a} is repeated in axes {axes:?}")));
            }
        }
        let shape = x
            .shape
            .iter()
            .zip(&reduced)
            .filter_map(|(&d, &r)| match (r, self.keepdims) {
                (false, _) => Some(d),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect();
        Ok((reduced, shape))
    }
}

impl Kernel for ReduceKernel {
    fn host_inputs(&self) -> Vec<usize> {
        self.host.positions()
    }

    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        check_view_rank(base, x.shape)?;
        self.fns(x.dtype)?;
        let (_, shape) = self.resolve(x, &self.host.peek(base, inputs)?)?;
        Ok(vec![(x.dtype, shape)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let x = base.req(inputs, 0)?;
        check_view_rank(base, x.shape)?;
        let fns = self.fns(x.dtype)?;
        let host = self.host.values(base, inputs, outputs)?;
        let (reduced, shape) = self.resolve(x, &host)?;
        base.expect_outputs(outputs, &[(x.dtype, shape)])?;
        let out = &outputs[0];
        // The output stride of each input axis (reduced axes have none).
        let mut out_strides = vec![0i64; x.rank()];
        let mut j = 0;
        for k in 0..x.rank() {
            if !reduced[k] {
                out_strides[k] = out.strides[j] as i64;
            }
            if !reduced[k] || self.keepdims {
                j += 1;
            }
        }
        let count: i64 = x
            .shape
            .iter()
            .zip(&reduced)
            .filter(|(_, &r)| r)
            .map(|(&d, _)| d as i64)
            .product();
        let r = Reduction {
            shape: x.shape,
            in_strides: istrides(x.strides),
            out_strides,
            reduced,
            count,
            flags: 0,
            elem: base.width(x.dtype)?,
        };
        launch_reduction(base, fns, &self.ws, &r, ptr_of(x), mut_ptr_of(out))
    }

    fn capture_support(&self) -> CaptureSupport {
        self.host.capture_support(&self.base)
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.host.set_constant(constant);
    }
}

fn build(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>, kind: Kind) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let base = Base::new(rt, node);
    let module = base.module(&kind.module())?;
    let mut fns = HashMap::new();
    for (dtype, tag) in numeric() {
        fns.insert(dtype, RedFns::load(&module, tag)?);
    }
    if matches!(kind, Kind::Max | Kind::Min) {
        // bool is one byte of 0 or 1: the uint8 maximum / minimum.
        let u8_fns = fns[&DataType::Uint8];
        fns.insert(DataType::Bool, u8_fns);
    }
    let attr_axes = if req.opset < kind.axes_input_from() {
        Some(attr_ints(node, "axes")?.unwrap_or_default())
    } else {
        None
    };
    let positions: &[usize] = if attr_axes.is_some() { &[] } else { &[1] };
    let host = HostReads::new(&base, positions, "axes input");
    Ok(Box::new(ReduceKernel {
        host,
        keepdims: attr_int(node, "keepdims")?.unwrap_or(1) != 0,
        noop_empty: attr_int(node, "noop_with_empty_axes")?.unwrap_or(0) != 0,
        attr_axes,
        fns,
        ws: workspace(rt)?,
        base,
    }))
}

macro_rules! factory {
    ($name:ident, $kind:expr) => {
        fn $name(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
            build(rt, req, $kind)
        }
    };
}
factory!(sum, Kind::Sum);
factory!(mean, Kind::Mean);
factory!(max, Kind::Max);
factory!(min, Kind::Min);
factory!(prod, Kind::Prod);
factory!(l1, Kind::L1);
factory!(l2, Kind::L2);
factory!(log_sum, Kind::LogSum);
factory!(log_sum_exp, Kind::LogSumExp);
factory!(sum_square, Kind::SumSquare);

pub fn register(r: &mut Registry) {
    let factories: [(Kind, super::super::Factory); 10] = [
        (Kind::Sum, sum),
        (Kind::Mean, mean),
        (Kind::Max, max),
        (Kind::Min, min),
        (Kind::Prod, prod),
        (Kind::L1, l1),
        (Kind::L2, l2),
        (Kind::LogSum, log_sum),
        (Kind::LogSumExp, log_sum_exp),
        (Kind::SumSquare, sum_square),
    ];
    for (kind, f) in factories {
        for &since in kind.versions() {
            r.register("", kind.names().0, since, f);
        }
    }
}
