//! GPU tests of the pool family (placeholder).
