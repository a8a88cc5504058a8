//! GPU tests of the norm family (placeholder).
