//! TopK: the k largest (or smallest) elements along an axis, best first, and their int64
//! indices, for every numeric dtype. Ties go to the lower index and NaN ranks above every
//! number, as on the CPU provider. K is an attribute before opset 10 and input 1 after (read
//! on the host: the kernel is capturable after one eager run); `largest`/`sorted` from 11
//! (the output is always sorted, which `sorted = 0` allows).
//!
//! One block per row: rows of up to 16384 elements are sorted in shared memory; longer rows
//! go through a radix select of the k-th key and an ordered compaction, then a sort of the k
//! winners (in shared memory up to 16384, in global memory beyond).

use super::*;
use onnx_runtime_ep_api::{CaptureSupport, Kernel, KernelRequest, TensorMut, TensorView};
use std::collections::HashMap;

pub(crate) fn module() -> ModuleSpec {
    ModuleSpec::new("topk", with_common!("../../kernels/topk.cu")).with_half()
}

/// `TopKParams` of topk.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TopKParams {
    pub rows: i64,
    pub len: i64,
    pub k: i64,
    pub rank: i32,
    pub largest: i32,
    pub dims: [i64; MAX_RANK],
    pub in_strides: [i64; MAX_RANK],
    pub val_strides: [i64; MAX_RANK],
    pub idx_strides: [i64; MAX_RANK],
    pub in_axis: i64,
    pub val_axis: i64,
    pub idx_axis: i64,
    pub n2: i64,
}

/// The kernels of topk.cu.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TopKKernel {
    Sort,
    Select,
    GlobalSort,
}

/// Plans TopK of `k` along `axis` of a tensor of `shape` (strides of the input, the values
/// and the indices).
pub(crate) fn plan_topk(
    shape: &[usize],
    strides: [&[usize]; 3],
    axis: usize,
    k: usize,
    largest: bool,
) -> Result<Vec<Launch<TopKKernel, TopKParams>>, String> {
    let len = shape[axis];
    let rows = shape
        .iter()
        .product::<usize>()
        .checked_div(len)
        .unwrap_or(0);
    if k == 0 || rows == 0 {
        return Ok(Vec::new());
    }
    if len > i32::MAX as usize {
        return Err(format!(
            "axis {axis} has {len} elements; the CUDA TopK takes rows of up to 2^31 - 1"
        ));
    }
    let mut dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    dims[axis] = 1;
    let [si, sv, sx] = strides;
    let mut p = TopKParams {
        rows: rows as i64,
        len: len as i64,
        k: k as i64,
        rank: shape.len() as i32,
        largest: largest as i32,
        in_axis: si[axis] as i64,
        val_axis: sv[axis] as i64,
        idx_axis: sx[axis] as i64,
        ..Default::default()
    };
    p.dims = fill(&dims);
    p.in_strides = fill(&istrides(si));
    p.val_strides = fill(&istrides(sv));
    p.idx_strides = fill(&istrides(sx));
    let grid = (grid_dim(rows as i64)?, 1, 1);
    let (len, k) = (len as i64, k as i64);
    if len <= SMEM_SORT_MAX {
        p.n2 = np2(len);
        return Ok(vec![Launch {
            kernel: TopKKernel::Sort,
            grid,
            block: ((p.n2 / 2).clamp(32, 1024) as u32, 1, 1),
            shared: (12 * p.n2) as u32,
            params: p,
        }]);
    }
    let in_smem = k <= SMEM_SORT_MAX;
    p.n2 = if in_smem { np2(k) } else { 0 };
    let mut launches = vec![Launch {
        kernel: TopKKernel::Select,
        grid,
        block: (1024, 1, 1),
        shared: (SELECT_HEADER + 12 * p.n2) as u32,
        params: p,
    }];
    if !in_smem {
        p.n2 = np2(k);
        launches.push(Launch {
            kernel: TopKKernel::GlobalSort,
            grid,
            block: (1024, 1, 1),
            shared: 0,
            params: p,
        });
    }
    Ok(launches)
}

/// The most elements sorted in shared memory (12 bytes each).
const SMEM_SORT_MAX: i64 = 16384;
/// Shared bytes of topk_select before the candidates (`SEL_KEYS` in topk.cu).
const SELECT_HEADER: i64 = 1184;

#[derive(Clone, Copy)]
struct TopKFns {
    sort: Function,
    select: Function,
    gsort: Function,
}

struct TopK {
    base: Base,
    host: HostReads,
    axis: i64,
    largest: bool,
    /// K from the attribute (opset 1); `None` when it comes from input 1.
    k_attr: Option<i64>,
    fns: HashMap<DataType, TopKFns>,
}

impl TopK {
    /// The normalized axis, k and the outputs' dtypes and shapes.
    fn resolve(
        &self,
        x: &TensorView<'_>,
        host: &HostValues,
    ) -> EpResult<(usize, usize, OutputTypes)> {
        let base = &self.base;
        if !self.fns.contains_key(&x.dtype) {
            return Err(base.unsupported(x.dtype, "TopK takes numeric types"));
        }
        let k = match self.k_attr {
            Some(k) => k,
            None => match host.get(1).cloned().flatten().as_deref() {
                Some([k]) => *k,
                Some(other) => {
                    return Err(base.err(format!("K must hold one value, got {other:?}")))
                }
                None => return Err(base.err("the K input is missing")),
            },
        };
        if x.rank() == 0 {
            return Err(base.err("TopK needs an input of rank 1 or more"));
        }
        let a = base.axis(self.axis, x.rank(), "axis")?;
        let len = x.shape[a];
        if k < 0 || k as usize > len {
            return Err(base.err(format!(
                "K = {k} is out of range for axis {a} of size {len} (accepted: [0, {len}])"
            )));
        }
        let mut shape = x.shape.to_vec();
        shape[a] = k as usize;
        Ok((
            a,
            k as usize,
            vec![(x.dtype, shape.clone()), (DataType::Int64, shape)],
        ))
    }
}

impl Kernel for TopK {
    fn host_inputs(&self) -> Vec<usize> {
        self.host.positions()
    }

    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        check_view_rank(base, x.shape)?;
        Ok(self.resolve(x, &self.host.peek(base, inputs)?)?.2)
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 2)?;
        let x = base.req(inputs, 0)?;
        check_view_rank(base, x.shape)?;
        let host = self.host.values(base, inputs, outputs)?;
        let (axis, k, types) = self.resolve(x, &host)?;
        base.expect_outputs(outputs, &types)?;
        let (vals, idx) = (&outputs[0], &outputs[1]);
        let launches = plan_topk(
            x.shape,
            [x.strides, vals.strides, idx.strides],
            axis,
            k,
            self.largest,
        )
        .map_err(|e| base.err(e))?;
        let fns = self.fns[&x.dtype];
        for l in launches {
            let f = match l.kernel {
                TopKKernel::Sort => fns.sort,
                TopKKernel::Select => fns.select,
                TopKKernel::GlobalSort => fns.gsort,
            };
            let (mut pi, mut pv, mut px) = (ptr_of(x), mut_ptr_of(vals), mut_ptr_of(idx));
            let mut p = l.params;
            let mut args = [arg(&mut pi), arg(&mut pv), arg(&mut px), arg(&mut p)];
            // SAFETY: the kernels read each row inside the input view and write k values and
            // indices per row inside the outputs' views; shared memory holds what `shared`
            // says (the sorted pairs after the select header).
            unsafe {
                base.rt
                    .launch_cfg(f, l.grid, l.block, l.shared, &mut args)?
            };
        }
        Ok(())
    }

    fn capture_support(&self) -> CaptureSupport {
        self.host.capture_support(&self.base)
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.host.set_constant(constant);
    }
}

fn topk(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let base = Base::new(rt, node);
    let module = base.module(&module())?;
    let mut fns = HashMap::new();
    for (dtype, tag) in numeric() {
        fns.insert(
            dtype,
            TopKFns {
                sort: module.function(&format!("topk_sort_{tag}"))?,
                select: module.function(&format!("topk_select_{tag}"))?,
                gsort: module.function(&format!("topk_gsort_{tag}"))?,
            },
        );
    }
    let k_attr = if req.opset < 10 {
        Some(attr_int(node, "k")?.ok_or_else(|| {
            onnx_runtime_ep_api::EpError::invalid_attribute(node, "k", "TopK-1 needs k")
        })?)
    } else {
        None
    };
    let positions: &[usize] = if k_attr.is_some() { &[] } else { &[1] };
    let host = HostReads::new(&base, positions, "K input");
    Ok(Box::new(TopK {
        host,
        axis: attr_int(node, "axis")?.unwrap_or(-1),
        largest: attr_int(node, "largest")?.unwrap_or(1) != 0,
        k_attr,
        fns,
        base,
    }))
}

pub fn register(r: &mut Registry) {
    for since in [1, 10, 11, 24] {
        r.register("", "TopK", since, topk);
    }
}
