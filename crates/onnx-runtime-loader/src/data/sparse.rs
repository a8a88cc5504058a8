//! Sparse tensors: `SparseTensorProto` <-> [`SparseTensorData`], and densification.

use super::tensor::{checked_dims, tensor_from_proto, tensor_to_proto};
use crate::error::Within;
use crate::external::ExternalFiles;
use crate::proto;
use crate::LoadError;
use onnx_runtime_ir::{DataType, SparseTensorData, TensorBytes, TensorData};

pub(crate) fn sparse_from_proto(
    s: proto::SparseTensorProto,
    files: &ExternalFiles,
) -> Result<SparseTensorData, LoadError> {
    let values = s
        .values
        .ok_or_else(|| LoadError::invalid("sparse tensor without 'values'"))?;
    let indices = s
        .indices
        .ok_or_else(|| LoadError::invalid("sparse tensor without 'indices'"))?;
    checked_dims(&s.dims).within(|| "sparse tensor dims".into())?;
    Ok(SparseTensorData {
        values: tensor_from_proto(values, files).within(|| "values".into())?,
        indices: tensor_from_proto(indices, files).within(|| "indices".into())?,
        dims: s.dims,
    })
}

pub(crate) fn sparse_to_proto(s: &SparseTensorData) -> proto::SparseTensorProto {
    proto::SparseTensorProto {
        values: Some(tensor_to_proto(&s.values)),
        indices: Some(tensor_to_proto(&s.indices)),
        dims: s.dims.clone(),
    }
}

/// The dense tensor a sparse one stands for (zeros, or empty strings, where no value is given).
///
/// Indices are INT64, either `[NNZ]` linear positions or `[NNZ, rank]` coordinates, as ONNX
/// defines them. The dense size is refused above `max_bytes`.
pub fn densify(s: &SparseTensorData, max_bytes: usize) -> Result<TensorData, LoadError> {
    let (shape, numel) = checked_dims(&s.dims)?;
    let dtype = s.values.dtype;
    let nnz = s.values.numel();
    if s.values.shape.len() != 1 {
        return Err(LoadError::invalid(format!(
            "sparse values must be 1-D, got dims {:?}",
            s.values.shape
        )));
    }
    if s.indices.dtype != DataType::Int64 {
        return Err(LoadError::invalid(format!(
            "sparse indices must be int64, got {}",
            s.indices.dtype
        )));
    }
    let idx = s.indices.to_i64_vec().unwrap_or_default();
    let rank = shape.len();
    let linear: Vec<usize> = match s.indices.shape.as_slice() {
        [n] if *n == nnz => idx
            .iter()
            .map(|&i| usize::try_from(i).ok().filter(|&i| i < numel))
            .collect::<Option<_>>(),
        [n, r] if *n == nnz && *r == rank => idx
            .chunks_exact(rank.max(1))
            .map(|c| {
                c.iter().zip(&shape).try_fold(0usize, |acc, (&i, &d)| {
                    let i = usize::try_from(i).ok().filter(|&i| i < d)?;
                    Some(acc * d + i)
                })
            })
            .collect::<Option<_>>(),
        other => {
            return Err(LoadError::invalid(format!(
                "sparse indices have dims {other:?}; expected [{nnz}] or [{nnz}, {rank}]"
            )))
        }
    }
    .ok_or_else(|| {
        LoadError::invalid(format!(
            "a sparse index is outside the dense dims {shape:?}"
        ))
    })?;
    let mut dense = TensorData {
        name: s.values.name.clone(),
        dtype,
        shape,
        data: TensorBytes::Owned(Vec::new()),
        doc_string: s.values.doc_string.clone(),
    };
    if dtype == DataType::String {
        let values = s.values.strings().unwrap_or_default();
        if numel > max_bytes / std::mem::size_of::<String>() {
            return Err(too_big(numel, max_bytes));
        }
        let mut out = vec![String::new(); numel];
        for (&p, v) in linear.iter().zip(values) {
            out[p].clone_from(v);
        }
        dense.data = TensorBytes::Strings(out);
        return Ok(dense);
    }
    let Some(size) = dtype.element_size() else {
        return Err(LoadError::invalid(format!(
            "sparse tensors of {dtype} are not supported"
        )));
    };
    let nbytes = numel
        .checked_mul(size)
        .filter(|&n| n <= max_bytes)
        .ok_or_else(|| too_big(numel, max_bytes))?;
    let mut out = vec![0u8; nbytes];
    let src = s.values.bytes();
    if src.len() != nnz * size {
        return Err(LoadError::invalid(format!(
            "sparse values hold {} bytes, not {nnz} elements of {dtype}",
            src.len()
        )));
    }
    for (k, &p) in linear.iter().enumerate() {
        out[p * size..(p + 1) * size].copy_from_slice(&src[k * size..(k + 1) * size]);
    }
    dense.data = TensorBytes::Owned(out);
    Ok(dense)
}

fn too_big(numel: usize, max_bytes: usize) -> LoadError {
    LoadError::invalid(format!(
        "the dense form of this sparse tensor has {numel} elements, more than the {max_bytes} \
         bytes allowed (LoadOptions::max_dense_sparse_bytes, shared by all sparse initializers \
         of a model); raise it if the model is trusted"
    ))
}
