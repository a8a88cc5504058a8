//! GPU tests of the gemm family (placeholder).
