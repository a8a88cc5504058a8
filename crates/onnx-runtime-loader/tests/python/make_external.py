"""Writes a small MLP twice into argv[1]: inline.onnx, and external/model.onnx whose
initializers live in external/weights.bin (onnx's own external-data writer)."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main(folder):
    rng = np.random.default_rng(11)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(32).astype(np.float16), "b1")
    w2 = numpy_helper.from_array(rng.integers(-100, 100, (8, 3)).astype(np.int64), "w2")
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Cast", ["b1"], ["b1f"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["h", "b1f"], ["y"]),
            helper.make_node("Shape", ["w2"], ["s"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
        [w1, b1, w2],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(m, os.path.join(folder, "inline.onnx"))
    os.makedirs(os.path.join(folder, "external"))
    onnx.save_model(m, os.path.join(folder, "external", "model.onnx"),
                    save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)


if __name__ == "__main__":
    main(sys.argv[1])
