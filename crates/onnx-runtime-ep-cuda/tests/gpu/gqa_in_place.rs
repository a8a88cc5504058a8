//! GroupQueryAttention with present_key / present_value written into the memory of
//! past_key / past_value (the shared max-length buffer bound in place, as the session does for
//! `OutputOn::Into`): the attention output is the same bytes as with separate present buffers,
//! the buffer's rows up to each batch's valid length equal the separate presents, and the
//! rows after them keep what they held (only the new rows are written). Decode and prompt
//! steps, with and without rotary, float16 and float32.

use super::harness::*;
use onnx_runtime_ep_api::{DevicePtr, DevicePtrMut, ExecutionProvider, TensorMut, TensorView};
use onnx_runtime_ep_cuda::runtime::cuptr;
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{compute_contiguous_strides, Attribute, DataType, Node};

fn gqa(rotary: bool) -> Node {
    let mut a = vec![
        ("num_heads", Attribute::Int(8)),
        ("kv_num_heads", Attribute::Int(2)),
    ];
    if rotary {
        a.push(("do_rotary", Attribute::Int(1)));
    }
    let mut n = node("GroupQueryAttention", if rotary { 9 } else { 7 }, 3, &a);
    n.domain = "com.microsoft".into();
    n
}

fn bytes_of(ep: &CudaExecutionProvider, ptr: *const std::ffi::c_void, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    unsafe { ep.runtime().dtoh(&mut v, cuptr(ptr)).unwrap() };
    v
}

#[test]
fn gqa_present_in_the_past_buffer_writes_only_the_new_rows() {
    let ep = gpu();
    let mut rng = Rng::new(61);
    let (d, pbuf) = (64usize, 144usize);
    // (batch, new rows, valid keys per batch after the step, rotary)
    for (b, s, valid, rotary, dtype) in [
        (1usize, 1usize, vec![65usize], true, DataType::Float16),
        (2, 1, vec![65, 144], false, DataType::Float16),
        (2, 1, vec![1, 30], true, DataType::Float32),
        (1, 16, vec![16], true, DataType::Float16), // the prompt step (first_prompt)
        (2, 3, vec![40, 7], false, DataType::BFloat16),
    ] {
        let what = format!("GQA in place b {b} s {s} valid {valid:?} rotary {rotary} {dtype}");
        let q = uniform(&mut rng, dtype, &[b, s, 8 * d], -1.0, 1.0);
        let k = uniform(&mut rng, dtype, &[b, s, 2 * d], -1.0, 1.0);
        let v = uniform(&mut rng, dtype, &[b, s, 2 * d], -1.0, 1.0);
        let pk = uniform(&mut rng, dtype, &[b, 2, pbuf, d], -1.0, 1.0);
        let pv = uniform(&mut rng, dtype, &[b, 2, pbuf, d], -1.0, 1.0);
        let seqlens: Vec<i32> = valid.iter().map(|&n| n as i32 - 1).collect();
        let prompt = s > 1 && valid.iter().all(|&n| n == s);
        let total = if prompt { s } else { pbuf };
        let mut inputs = vec![
            q,
            k,
            v,
            pk,
            pv,
            i32s(&[b], &seqlens),
            i32s(&[1], &[total as i32]),
        ];
        if rotary {
            inputs.push(uniform(&mut rng, dtype, &[pbuf, d / 2], -1.0, 1.0));
            inputs.push(uniform(&mut rng, dtype, &[pbuf, d / 2], -1.0, 1.0));
        }
        let n = gqa(rotary);
        let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
        let kernel = ep.get_kernel(&n, &shapes, 1).unwrap();

        // Separate present buffers: the reference.
        let mut sep = Bound::new(&ep, &inputs, &[]);
        let types = sep.output_types(kernel.as_ref()).unwrap();
        assert_eq!(
            types[1].1,
            vec![b, 2, pbuf, d],
            "{what}: present is the buffer's size"
        );
        sep.set_outputs(&types);
        sep.execute(kernel.as_ref()).unwrap();
        let want = sep.read().unwrap();

        // present_k / present_v in the past buffers' memory.
        let mut inp = Bound::new(&ep, &inputs, &types[..1]);
        let device = ep.device_id();
        let views: Vec<TensorView<'_>> = inp
            .inputs
            .iter()
            .map(|(t, buf, st)| {
                TensorView::new(DevicePtr(buf.as_ptr()), t.dtype, &t.shape, st, device)
            })
            .collect();
        let cache_shape = vec![b, 2, pbuf, d];
        let cache_strides = compute_contiguous_strides(&cache_shape);
        assert_eq!(inp.inputs[3].2, cache_strides, "{what}: contiguous past");
        let (out_buf, pk_ptr, pv_ptr) = (
            inp.outputs[0].2.as_mut_ptr(),
            inp.inputs[3].1.as_ptr() as *mut std::ffi::c_void,
            inp.inputs[4].1.as_ptr() as *mut std::ffi::c_void,
        );
        let out_strides = compute_contiguous_strides(&types[0].1);
        let mut outs = vec![
            TensorMut::new(
                DevicePtrMut(out_buf),
                dtype,
                &types[0].1,
                &out_strides,
                device,
            ),
            TensorMut::new(
                DevicePtrMut(pk_ptr),
                dtype,
                &cache_shape,
                &cache_strides,
                device,
            ),
            TensorMut::new(
                DevicePtrMut(pv_ptr),
                dtype,
                &cache_shape,
                &cache_strides,
                device,
            ),
        ];
        assert_eq!(kernel.in_place_input(1), Some(3));
        assert_eq!(kernel.in_place_input(2), Some(4));
        kernel.execute(&views, &mut outs).unwrap();
        drop(outs);
        drop(views);
        ep.synchronize().unwrap();
        let got = inp.read().unwrap();
        assert_eq!(got[0].bytes, want[0].bytes, "{what}: attention output");
        let w = dtype.storage_bytes(1);
        let row = d * w;
        let n_cache = b * 2 * pbuf * d * w;
        for (idx, ptr) in [(3usize, pk_ptr), (4, pv_ptr)] {
            let now = bytes_of(&ep, ptr, n_cache);
            let before = &inputs[idx].bytes;
            let present = &want[idx - 2].bytes;
            for bi in 0..b {
                for h in 0..2 {
                    for j in 0..pbuf {
                        let at = ((bi * 2 + h) * pbuf + j) * row;
                        let (got_row, label) = (
                            &now[at..at + row],
                            if j < valid[bi] { "present" } else { "old" },
                        );
                        let want_row = if j < valid[bi] {
                            &present[at..at + row]
                        } else {
                            &before[at..at + row]
                        };
                        assert_eq!(
                            got_row, want_row,
                            "{what}: cache {idx} batch {bi} head {h} row {j} ({label})"
                        );
                    }
                }
            }
        }
    }
}
