//! (placeholder: the elementwise family is being written)

use super::Registry;
use crate::compiler::ModuleSpec;

pub fn register(_r: &mut Registry) {}

/// The NVRTC modules this family compiles (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    Vec::new()
}
