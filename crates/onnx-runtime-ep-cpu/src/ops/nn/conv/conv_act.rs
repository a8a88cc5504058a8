//! The epilogue a convolution applies to each block of output rows while it is in cache:
//! per-channel bias, an optional residual `Z` (com.microsoft FusedConv) and an activation.

use crate::attrs;
use crate::ops::math::vecmath::{self, as_f32_mut};
use crate::ops::nn::common::{c, Real};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::Node;

/// An activation fused into a convolution (com.microsoft FusedConv's `activation`).
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
    /// `x * max(0, min(1, x / 6 + 1/2))` (ONNX HardSwish).
    HardSwish,
    /// `x * sigmoid(alpha * x)` (com.microsoft QuickGelu; SiLU/Swish with alpha 1).
    QuickGelu {
        alpha: f64,
    },
    /// `x/2 * (1 + erf(x / sqrt 2))`; only the optimizer's fused MatMul takes it.
    Gelu,
    /// `x/2 * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`; only the fused MatMul takes it.
    FastGelu,
}

impl Activation {
    /// Reads FusedConv's `activation` and `activation_params` attributes.
    pub fn parse(node: &Node) -> Result<Activation, EpError> {
        match Self::parse_any(node)? {
            Activation::Gelu | Activation::FastGelu => Err(EpError::invalid_attribute(
                node,
                "activation",
                "Gelu and FastGelu are not FusedConv activations; use Relu, Tanh, Sigmoid, \
                 LeakyRelu, Clip, HardSigmoid, HardSwish or QuickGelu",
            )),
            a => Ok(a),
        }
    }

    /// Reads `activation` and `activation_params` with the GELU forms allowed (the
    /// optimizer's fused MatMul).
    pub fn parse_any(node: &Node) -> Result<Activation, EpError> {
        let name = attrs::string(node, "activation", "")?;
        let params: Vec<f64> = attrs::opt_floats(node, "activation_params")?
            .unwrap_or_default()
            .into_iter()
            .map(|v| v as f64)
            .collect();
        let want = |n: usize| -> Result<(), EpError> {
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
            "Gelu" => Activation::Gelu,
            "FastGelu" => Activation::FastGelu,
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
                         HardSigmoid, HardSwish, QuickGelu, Gelu or FastGelu"
                    ),
                ))
            }
        })
    }

    /// Applies the activation to every element of `row` (f32 rows with the vectorized
    /// approximations and AVX2 when the CPU has it).
    #[inline]
    pub fn apply<T: Real>(self, row: &mut [T]) {
        if self == Activation::None {
            return;
        }
        if let Some(r) = as_f32_mut(row) {
            let act = self;
            vecmath::with_avx2(
                #[inline(always)]
                || {
                    act.apply_to(
                        r,
                        vecmath::tanh,
                        vecmath::sigmoid,
                        vecmath::erf,
                        vecmath::gelu_tanh,
                    )
                },
            );
        } else {
            let erf = |v: T| c(libm::erf(v.to_f64c()));
            self.apply_to(row, |v: T| v.tanh(), sigmoid, erf, gelu_tanh);
        }
    }

    /// The activation as branch-free selects (so loops vectorize); NaN stays NaN.
    #[inline(always)]
    fn apply_to<T: Real>(
        self,
        row: &mut [T],
        tanh: impl Fn(T) -> T,
        sigm: impl Fn(T) -> T,
        erf: impl Fn(T) -> T,
        gelu_tanh: impl Fn(T) -> T,
    ) {
        let zero = T::zero();
        match self {
            Activation::None => {}
            Activation::Relu => row
                .iter_mut()
                .for_each(|v| *v = if *v < zero { zero } else { *v }),
            Activation::Tanh => row.iter_mut().for_each(|v| *v = tanh(*v)),
            Activation::Sigmoid => row.iter_mut().for_each(|v| *v = sigm(*v)),
            Activation::LeakyRelu { alpha } => {
                let a: T = c(alpha);
                row.iter_mut()
                    .for_each(|v| *v = if *v < zero { *v * a } else { *v })
            }
            Activation::Clip { min, max } => {
                let (lo, hi): (T, T) = (c(min), c(max));
                row.iter_mut().for_each(|v| {
                    let x = if *v < lo { lo } else { *v };
                    *v = if x > hi { hi } else { x };
                })
            }
            Activation::HardSigmoid { alpha, beta } => {
                let (a, b): (T, T) = (c(alpha), c(beta));
                row.iter_mut().for_each(|v| *v = clamp01(*v * a + b))
            }
            Activation::HardSwish => {
                let (a, b): (T, T) = (c(1.0 / 6.0), c(0.5));
                row.iter_mut().for_each(|v| *v = *v * clamp01(*v * a + b))
            }
            Activation::QuickGelu { alpha } => {
                let a: T = c(alpha);
                row.iter_mut().for_each(|v| *v = *v * sigm(a * *v))
            }
            Activation::Gelu => {
                let (h, s): (T, T) = (c(0.5), c(std::f64::consts::FRAC_1_SQRT_2));
                row.iter_mut()
                    .for_each(|v| *v = h * *v * (T::one() + erf(*v * s)))
            }
            Activation::FastGelu => row.iter_mut().for_each(|v| *v = gelu_tanh(*v)),
        }
    }
}

#[inline]
fn clamp01<T: Real>(x: T) -> T {
    let x = if x < T::zero() { T::zero() } else { x };
    if x > T::one() {
        T::one()
    } else {
        x
    }
}

/// The tanh-approximated GELU for the types without a float32 approximation.
#[inline]
fn gelu_tanh<T: Real>(x: T) -> T {
    let (h, k, a): (T, T, T) = (c(0.5), c((2.0 / std::f64::consts::PI).sqrt()), c(0.044715));
    h * x * (T::one() + (k * (x + a * x * x * x)).tanh())
}

#[inline]
fn sigmoid<T: Real>(x: T) -> T {
    // Split by sign so exp never overflows.
    if x >= T::zero() {
        T::one() / (T::one() + (-x).exp())
    } else {
        let e = x.exp();
        e / (T::one() + e)
    }
}

/// What a convolution adds and applies to its output rows.
#[derive(Clone, Copy)]
pub struct Epilogue<'a, T> {
    /// One value per output channel.
    pub bias: Option<&'a [T]>,
    /// A tensor of the output's shape added before the activation.
    pub z: Option<&'a [T]>,
    pub act: Activation,
}

impl<'a, T: Real> Epilogue<'a, T> {
    pub fn bias_only(bias: Option<&'a [T]>) -> Self {
        Epilogue {
            bias,
            z: None,
            act: Activation::None,
        }
    }

    /// The value an output row of `channel` starts from before the products are added.
    #[inline]
    pub fn init(&self, channel: usize) -> T {
        self.bias.map_or(T::zero(), |b| b[channel])
    }

    /// Finishes `row`, which starts at flat output offset `offset` in `channel` and already
    /// holds the bias (see [`Epilogue::init`]): adds Z and applies the activation.
    #[inline]
    pub fn finish_row(&self, row: &mut [T], offset: usize) {
        if let Some(z) = self.z {
            let n = row.len();
            for (v, &zv) in row.iter_mut().zip(&z[offset..offset + n]) {
                *v += zv;
            }
        }
        self.act.apply(row);
    }

    /// Finishes a GEMM result `row` (no bias yet): adds the bias, Z and the activation.
    #[inline]
    pub fn finish_gemm_row(&self, row: &mut [T], channel: usize, offset: usize) {
        vecmath::with_avx2(
            #[inline(always)]
            || self.add_bias_z(row, channel, offset),
        );
        self.act.apply(row);
    }

    #[inline(always)]
    fn add_bias_z(&self, row: &mut [T], channel: usize, offset: usize) {
        match (self.bias, self.z) {
            (Some(b), Some(z)) => {
                let bv = b[channel];
                let n = row.len();
                for (v, &zv) in row.iter_mut().zip(&z[offset..offset + n]) {
                    *v += bv + zv;
                }
            }
            (Some(b), None) => {
                let bv = b[channel];
                row.iter_mut().for_each(|v| *v += bv);
            }
            (None, Some(z)) => {
                let n = row.len();
                for (v, &zv) in row.iter_mut().zip(&z[offset..offset + n]) {
                    *v += zv;
                }
            }
            (None, None) => {}
        }
    }

    pub fn is_noop(&self) -> bool {
        self.bias.is_none() && self.z.is_none() && self.act == Activation::None
    }
}
