"""Writes the ONNX backend node cases of the `math` ops as JSON for tests/math_reference.rs,
with the exporter of tests/nn/make_cases.py. Usage: python3 make_cases.py OUT.json"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "nn"))
import make_cases  # noqa: E402
from make_cases import backend_cases  # noqa: E402

_numeric_json = make_cases.tensor_json


def tensor_json(t):
    """Also exports string tensors (Equal on strings, Cast to and from strings)."""
    if t.data_type == make_cases.onnx.TensorProto.STRING:
        return {"dtype": t.data_type, "shape": list(t.dims),
                "strings": [s.decode() for s in t.string_data]}
    return _numeric_json(t)


make_cases.tensor_json = tensor_json

MATH_OPS = (
    "abs neg sign ceil floor round sqrt reciprocal exp log sin cos tan asin acos atan sinh cosh "
    "asinh acosh atanh erf isnan isinf not bitwise_not relu leakyrelu prelu elu selu celu sigmoid "
    "hardsigmoid hardswish softplus softsign thresholdedrelu mish gelu swish tanh clip shrink add "
    "sub mul div pow mod bitshift bitwise_and bitwise_or bitwise_xor and or xor equal less "
    "less_equal greater greater_equal max min sum mean cast castlike reduce_sum reduce_mean "
    "reduce_max reduce_min reduce_prod reduce_l1 reduce_l2 reduce_log_sum reduce_log_sum_exp "
    "reduce_sum_square argmax argmin softmax logsoftmax log_softmax hardmax cumsum top_k einsum det"
).split()


def main():
    cases = backend_cases([f"test_{op}" for op in MATH_OPS])
    keep = {"Abs", "Neg", "Sign", "Ceil", "Floor", "Round", "Sqrt", "Reciprocal", "Exp", "Log", "Sin",
            "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Erf",
            "IsNaN", "IsInf", "Not", "BitwiseNot", "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu",
            "Sigmoid", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "ThresholdedRelu", "Mish",
            "Gelu", "Swish", "Tanh", "Clip", "Shrink", "Add", "Sub", "Mul", "Div", "Pow", "Mod",
            "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "And", "Or", "Xor", "Equal", "Less",
            "LessOrEqual", "Greater", "GreaterOrEqual", "Max", "Min", "Sum", "Mean", "Cast", "CastLike",
            "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
            "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "Softmax",
            "LogSoftmax", "Hardmax", "CumSum", "TopK", "Einsum", "Det"}
    cases = [c for c in cases if c["op"] in keep]
    with open(sys.argv[1], "w") as f:
        json.dump(cases, f)
    print(f"{len(cases)} cases -> {sys.argv[1]}")


if __name__ == "__main__":
    main()
