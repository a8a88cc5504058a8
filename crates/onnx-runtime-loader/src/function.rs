//! Model-local functions (`ModelProto.functions`).

use onnx_runtime_ir::{Attribute, Graph};

/// A model-local function as the model declares it. Its body is a graph whose inputs and
/// outputs are the function's formal parameters; attributes of body nodes that refer to the
/// caller's attributes are [`Attribute::Ref`].
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    pub name: String,
    pub domain: String,
    /// Distinguishes functions of the same name and domain (`FunctionProto.overload`).
    pub overload: String,
    /// Attributes the caller may set that have no default.
    pub attributes: Vec<String>,
    /// Attributes with a default value, in file order.
    pub attribute_defaults: Vec<(String, Attribute)>,
    /// The body: `name`, `doc_string`, `opset_imports` (the function's own), `metadata`,
    /// formal `inputs`/`outputs`, `nodes` and `value_info`.
    pub body: Graph,
}

impl Function {
    /// Whether a node of `domain::op_type` with `overload` calls this function.
    pub fn matches(&self, domain: &str, op_type: &str, overload: &str) -> bool {
        self.name == op_type && self.domain == domain && self.overload == overload
    }
}
