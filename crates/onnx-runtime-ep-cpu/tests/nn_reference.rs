//! Runs the `nn` kernels on reference cases: the ONNX backend node tests of the nn ops and
//! com.microsoft cases computed by onnxruntime, exported to JSON by `tests/nn/make_cases.py`
//! (needs python3 with onnx, numpy and onnxruntime). Set `NN_CASES` to a prefix to run a
//! subset. Cases whose op has no CPU kernel yet are listed, not failed.

mod support;

#[test]
fn nn_reference_cases() {
    support::run_suite(support::Suite {
        script: "nn/make_cases.py",
        modules: "onnx, onnxruntime, numpy",
        filter_var: "NN_CASES",
        // Training-mode dropout draws numpy's random stream; no other runtime can match it.
        skip: |name| name.starts_with("test_training_dropout"),
        missing_fails: false,
        check: support::compare_tensor,
    });
}
