//! com.microsoft FusedConv's activation (`activation`, `activation_params`), as the CPU
//! provider parses it (the session's optimizer writes the same node form: Relu, Tanh,
//! Sigmoid, LeakyRelu, Clip, HardSigmoid, HardSwish, QuickGelu, Identity), and what cuDNN's
//! fused convolution can apply itself.

use super::super::common::attr_string;
use onnx_runtime_ep_api::{EpError, EpResult};
use onnx_runtime_ir::{Attribute, Node};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    None,
    Relu,
    Tanh,
    Sigmoid,
    LeakyRelu {
        alpha: f64,
    },
    Clip {
        min: f64,
        max: f64,
    },
    HardSigmoid {
        alpha: f64,
        beta: f64,
    },
    /// `x * clamp(x / 6 + 1/2, 0, 1)`.
    HardSwish,
    /// `x * sigmoid(alpha * x)` (SiLU with alpha 1).
    QuickGelu {
        alpha: f64,
    },
}

fn floats(node: &Node, name: &str) -> EpResult<Vec<f64>> {
    match node.attribute(name) {
        None => Ok(Vec::new()),
        Some(Attribute::Floats(v)) => Ok(v.iter().map(|&x| x as f64).collect()),
        Some(Attribute::Float(v)) => Ok(vec![*v as f64]),
        Some(other) => Err(EpError::invalid_attribute(
            node,
            name,
            format!("expected a list of floats, got {:?}", other.kind()),
        )),
    }
}

impl Activation {
    /// Reads FusedConv's `activation` and `activation_params`.
    pub fn parse(node: &Node) -> EpResult<Activation> {
        let name = attr_string(node, "activation")?.unwrap_or_default();
        let params = floats(node, "activation_params")?;
        let want = |n: usize| -> EpResult<()> {
            if params.len() == n {
                Ok(())
            } else {
                Err(EpError::invalid_attribute(
                    node,
                    "activation_params",
                    format!(
                        "activation '{name}' takes {n} parameter(s), got {}",
                        params.len()
                    ),
                ))
            }
        };
        Ok(match name.as_str() {
            "" | "Identity" => Activation::None,
            "Relu" => Activation::Relu,
            "Tanh" => Activation::Tanh,
            "Sigmoid" => Activation::Sigmoid,
            "HardSwish" => Activation::HardSwish,
            "LeakyRelu" => {
                want(1)?;
                Activation::LeakyRelu { alpha: params[0] }
            }
            "Clip" => {
                want(2)?;
                Activation::Clip {
                    min: params[0],
                    max: params[1],
                }
            }
            "HardSigmoid" => {
                want(2)?;
                Activation::HardSigmoid {
                    alpha: params[0],
                    beta: params[1],
                }
            }
            "QuickGelu" => {
                want(1)?;
                Activation::QuickGelu { alpha: params[0] }
            }
            other => {
                return Err(EpError::invalid_attribute(
                    node,
                    "activation",
                    format!(
                        "'{other}' is not one of Relu, Tanh, Sigmoid, LeakyRelu, Clip, \
                         HardSigmoid, HardSwish or QuickGelu (Gelu and FastGelu are not \
                         FusedConv activations)"
                    ),
                ))
            }
        })
    }

    /// The epilogue kernel's code and parameters (kernels/conv.cu `conv_act`).
    pub fn code(self) -> (i32, f64, f64) {
        match self {
            Activation::None => (0, 0.0, 0.0),
            Activation::Relu => (1, 0.0, 0.0),
            Activation::Tanh => (2, 0.0, 0.0),
            Activation::Sigmoid => (3, 0.0, 0.0),
            Activation::LeakyRelu { alpha } => (4, alpha, 0.0),
            Activation::Clip { min, max } => (5, min, max),
            Activation::HardSigmoid { alpha, beta } => (6, alpha, beta),
            Activation::HardSwish => (7, 0.0, 0.0),
            Activation::QuickGelu { alpha } => (8, alpha, 0.0),
        }
    }

    /// Whether cuDNN's fused convolution (`cudnnConvolutionBiasActivationForward`) applies
    /// this activation itself: only identity and ReLU.
    pub fn cudnn_fusable(self) -> bool {
        matches!(self, Activation::None | Activation::Relu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onnx_runtime_ir::{NodeId, ValueId};

    fn node(act: &str, params: &[f32]) -> Node {
        let mut n = Node::new(
            NodeId(1),
            "FusedConv",
            vec![Some(ValueId(0)), Some(ValueId(1))],
            vec![ValueId(2)],
        );
        n.attributes
            .insert("activation".into(), Attribute::String(act.into()));
        if !params.is_empty() {
            n.attributes.insert(
                "activation_params".into(),
                Attribute::Floats(params.to_vec()),
            );
        }
        n
    }

    #[test]
    fn parses_every_activation_and_checks_parameter_counts() {
        assert_eq!(
            Activation::parse(&node("Relu", &[])).unwrap(),
            Activation::Relu
        );
        assert_eq!(
            Activation::parse(&node("Identity", &[])).unwrap(),
            Activation::None
        );
        assert_eq!(
            Activation::parse(&node("Clip", &[0.0, 6.0])).unwrap(),
            Activation::Clip { min: 0.0, max: 6.0 }
        );
        assert_eq!(
            Activation::parse(&node("QuickGelu", &[1.0]))
                .unwrap()
                .code()
                .0,
            8
        );
        assert!(Activation::parse(&node("LeakyRelu", &[])).is_err());
        assert!(Activation::parse(&node("Gelu", &[])).is_err());
        assert!(Activation::parse(&node("Softplus", &[])).is_err());
        assert!(Activation::Relu.cudnn_fusable() && !Activation::Tanh.cudnn_fusable());
    }
}
