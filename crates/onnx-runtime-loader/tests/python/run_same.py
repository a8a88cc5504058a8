"""Runs the models argv[1] and argv[2] in onnxruntime on the same random inputs and checks
that their outputs are identical (symbolic dims are given size 3)."""
import sys

import numpy as np
import onnxruntime as ort


def main(a, b):
    rng = np.random.default_rng(5)
    sa = ort.InferenceSession(a, providers=["CPUExecutionProvider"])
    sb = ort.InferenceSession(b, providers=["CPUExecutionProvider"])
    feeds = {}
    for i in sa.get_inputs():
        shape = [d if isinstance(d, int) else 3 for d in i.shape]
        feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    for x, y in zip(sa.run(None, feeds), sb.run(None, feeds)):
        np.testing.assert_array_equal(x, y)
    print(f"{b} computes what {a} computes")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
