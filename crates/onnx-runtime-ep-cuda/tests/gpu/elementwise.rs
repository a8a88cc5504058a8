//! GPU tests of the elementwise family (placeholder).
