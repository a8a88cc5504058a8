//! Shapes whose dimensions are static sizes or named symbols, and stride helpers.

use std::fmt;

/// One dimension: a known size, or a symbol such as `batch` or `sequence_length`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    Static(usize),
    /// A named symbolic dimension (`dim_param`). An empty name means "unknown".
    Symbolic(String),
}

impl Dim {
    pub fn as_static(&self) -> Option<usize> {
        match self {
            Dim::Static(v) => Some(*v),
            Dim::Symbolic(_) => None,
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(v) => write!(f, "{v}"),
            Dim::Symbolic(s) if s.is_empty() => f.write_str("?"),
            Dim::Symbolic(s) => f.write_str(s),
        }
    }
}

/// A tensor shape of known rank.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    /// The sizes, if every dimension is static.
    pub fn to_static(&self) -> Option<Vec<usize>> {
        self.0.iter().map(Dim::as_static).collect()
    }

    pub fn is_static(&self) -> bool {
        self.0.iter().all(|d| matches!(d, Dim::Static(_)))
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl From<Vec<Dim>> for Shape {
    fn from(dims: Vec<Dim>) -> Self {
        Shape(dims)
    }
}

/// A shape whose every dimension is known.
pub fn static_shape(dims: impl IntoIterator<Item = usize>) -> Shape {
    Shape(dims.into_iter().map(Dim::Static).collect())
}

/// Row-major element strides for `shape` (the last axis has stride 1).
pub fn compute_contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1usize;
    for (stride, &dim) in strides.iter_mut().zip(shape).rev() {
        *stride = acc;
        acc = acc.saturating_mul(dim.max(1));
    }
    strides
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_strides() {
        assert_eq!(compute_contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(compute_contiguous_strides(&[]), Vec::<usize>::new());
        assert_eq!(compute_contiguous_strides(&[5]), vec![1]);
    }

    #[test]
    fn static_and_symbolic() {
        let s = Shape(vec![Dim::Symbolic("batch".into()), Dim::Static(3)]);
        assert!(!s.is_static());
        assert_eq!(s.to_string(), "[batch, 3]");
        assert_eq!(static_shape([2, 3]).to_static(), Some(vec![2, 3]));
    }
}
