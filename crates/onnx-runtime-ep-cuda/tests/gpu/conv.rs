//! GPU tests of the conv family (placeholder).
