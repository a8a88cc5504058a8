//! GPU tests of the CUDA provider: every kernel against a plain Rust reference on random
//! inputs (several dtypes, strided and broadcast inputs, negative axes), and eager-vs-replay
//! equality under CUDA graph capture. Built only with `--features gpu-tests`, so a CI machine
//! without a GPU neither runs nor reports them. Run with `scripts/gpu-test`.
#![cfg(feature = "gpu-tests")]
// Tests read best with explicit index loops and cloned one-element input lists.
#![allow(clippy::cloned_ref_to_slice_refs, clippy::needless_range_loop)]

#[path = "gpu/harness.rs"]
mod harness;

#[path = "gpu/attention.rs"]
mod attention;
#[path = "gpu/bench.rs"]
mod bench;
#[path = "gpu/capture.rs"]
mod capture;
#[path = "gpu/cast.rs"]
mod cast;
#[path = "gpu/causal_conv.rs"]
mod causal_conv;
#[path = "gpu/construct.rs"]
mod construct;
#[path = "gpu/conv.rs"]
mod conv;
#[path = "gpu/conv_common.rs"]
mod conv_common;
#[path = "gpu/conv_graph.rs"]
mod conv_graph;
#[path = "gpu/conv_pointwise.rs"]
mod conv_pointwise;
#[path = "gpu/conv_quant.rs"]
mod conv_quant;
#[path = "gpu/conv_transpose.rs"]
mod conv_transpose;
#[path = "gpu/deform_conv.rs"]
mod deform_conv;
#[path = "gpu/detection.rs"]
mod detection;
#[path = "gpu/dft.rs"]
mod dft;
#[path = "gpu/einsum.rs"]
mod einsum;
#[path = "gpu/elementwise.rs"]
mod elementwise;
#[path = "gpu/fused.rs"]
mod fused;
#[path = "gpu/gemm.rs"]
mod gemm;
#[path = "gpu/gemv.rs"]
mod gemv;
#[path = "gpu/gqa_in_place.rs"]
mod gqa_in_place;
#[path = "gpu/index.rs"]
mod index;
#[path = "gpu/linalg.rs"]
mod linalg;
#[path = "gpu/linear_attention.rs"]
mod linear_attention;
#[path = "gpu/loss.rs"]
mod loss;
#[path = "gpu/movement.rs"]
mod movement;
#[path = "gpu/nbits.rs"]
mod nbits;
#[path = "gpu/nbits_norm.rs"]
mod nbits_norm;
#[path = "gpu/nms.rs"]
mod nms;
#[path = "gpu/norm.rs"]
mod norm;
#[path = "gpu/output_types.rs"]
mod output_types;
#[path = "gpu/pool.rs"]
mod pool;
#[path = "gpu/quant.rs"]
mod quant;
#[path = "gpu/reduce.rs"]
mod reduce;
#[path = "gpu/reduce_common.rs"]
mod reduce_common;
#[path = "gpu/rnn.rs"]
mod rnn;
#[path = "gpu/signal.rs"]
mod signal;
#[path = "gpu/softmax.rs"]
mod softmax;
#[path = "gpu/tensor_misc.rs"]
mod tensor_misc;
#[path = "gpu/tensor_scatter.rs"]
mod tensor_scatter;
#[path = "gpu/topk.rs"]
mod topk;
#[path = "gpu/unique.rs"]
mod unique;
#[path = "gpu/unpool.rs"]
mod unpool;
