"""For each NAME.onnx with a NAME.inlined.onnx in argv[1], runs both in onnxruntime on the
same random inputs and checks that the outputs agree (rtol 1e-5, atol 1e-6)."""
import glob
import os
import sys

import numpy as np
import onnxruntime as ort

TYPES = {"tensor(float)": np.float32, "tensor(bool)": np.bool_}


def run(path, feeds):
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return s.run(None, {i.name: feeds[i.name] for i in s.get_inputs()})


def main(folder):
    rng = np.random.default_rng(7)
    checked = 0
    for path in sorted(glob.glob(os.path.join(folder, "*.inlined.onnx"))):
        original = path.replace(".inlined.onnx", ".onnx")
        s = ort.InferenceSession(original, providers=["CPUExecutionProvider"])
        for cond in (True, False):
            feeds = {}
            for i in s.get_inputs():
                shape = [d if isinstance(d, int) else 1 for d in i.shape]
                if i.type == "tensor(bool)":
                    feeds[i.name] = np.array(cond)
                else:
                    feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
            want = run(original, feeds)
            got = run(path, feeds)
            assert len(want) == len(got), path
            for a, b in zip(want, got):
                np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=path)
            checked += 1
    print(f"{checked} runs agree")
    assert checked > 0


if __name__ == "__main__":
    main(sys.argv[1])
