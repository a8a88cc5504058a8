//! GPU tests of the reduce family (placeholder).
