//! Losses and a few stragglers: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss
//! (`nll`), CumProd (`cumprod`) and BitCast (`bitcast`).

mod bitcast;
mod cumprod;
mod nll;

use super::Registry;
use crate::compiler::ModuleSpec;

pub fn register(r: &mut Registry) {
    nll::register(r);
    cumprod::register(r);
    bitcast::register(r);
}

/// The loss kernels (typed by score and target type, with the final-reduction kernels).
pub(crate) fn loss_module() -> ModuleSpec {
    ModuleSpec::new("loss", include_str!("../../kernels/loss.cu")).with_half()
}

/// CumProd, typed.
pub(crate) fn cumprod_module() -> ModuleSpec {
    ModuleSpec::new("cumprod", include_str!("../../kernels/cumprod.cu")).with_half()
}

/// The NVRTC modules this family compiles (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    vec![loss_module(), cumprod_module()]
}
