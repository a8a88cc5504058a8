//! Runs the `math` kernels on the ONNX backend node tests of the math ops, exported to JSON
//! by `tests/math/make_cases.py` (python3 with onnx and numpy). Set `MATH_CASES` to a prefix to
//! run a subset. Cases whose op has no CPU kernel yet are listed, not failed.

mod support;

#[test]
fn math_backend_cases() {
    support::run_suite(support::Suite {
        script: "math/make_cases.py",
        modules: "onnx, numpy",
        filter_var: "MATH_CASES",
        skip: |_| false,
        missing_fails: false,
        check: support::compare_tensor,
    });
}
