//! Compiles generated FusedElementwise kernels with NVRTC to CUBIN for sm_90 (no GPU needed):
//! every op for every dtype, the most inputs and outputs a kernel takes, special literals and
//! the longest program. Skipped with a message when NVRTC is missing, except under CI=true.

use onnx_runtime_ep_cuda::compiler::compile_cubin;
use onnx_runtime_ep_cuda::libs;
use onnx_runtime_ep_cuda::ops::fused::codegen::{self, MAX_INSTRS, MAX_OPS};
use onnx_runtime_ir::DataType;

#[test]
fn generated_fused_kernels_compile_to_cubin_for_sm90() {
    if let Err(e) = libs::ensure_nvrtc() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(!ci, "CI=true but NVRTC is missing: {e}");
        eprintln!("SKIPPED: NVRTC not found ({e})");
        return;
    }
    let mut programs: Vec<(String, usize, Vec<DataType>)> = Vec::new();
    let all = vec![
        DataType::Float32,
        DataType::Float64,
        DataType::Float16,
        DataType::BFloat16,
    ];
    programs.push((codegen::every_op_program(), 3, all.clone()));
    // The most inputs with one output, and the most outputs.
    let n_in = MAX_OPS - 1;
    let mut wide = String::from("t0 = Add in0 in1\n");
    for k in 2..n_in {
        wide.push_str(&format!("t{} = Mul t{} in{k}\n", k - 1, k - 2));
    }
    wide.push_str(&format!("out t{}\n", n_in - 2));
    programs.push((wide, n_in, vec![DataType::Float32, DataType::BFloat16]));
    let mut many = String::new();
    for k in 0..8 {
        many.push_str(&format!("t{k} = Mul in0 {}.5\n", k));
    }
    for k in 0..8 {
        many.push_str(&format!("out t{k}\n"));
    }
    programs.push((many, 1, vec![DataType::Float16, DataType::Float64]));
    // The longest chain.
    let mut long = String::from("t0 = Sigmoid in0\n");
    for k in 1..MAX_INSTRS {
        let op = ["Tanh", "Erf", "Softplus", "Sin"][k % 4];
        long.push_str(&format!("t{k} = {op} t{}\n", k - 1));
    }
    long.push_str(&format!("out t{}\n", MAX_INSTRS - 1));
    programs.push((long, 1, vec![DataType::Float32]));
    let mut failures = Vec::new();
    let mut count = 0;
    for (text, n_in, dtypes) in &programs {
        for &d in dtypes {
            let spec = codegen::module_for(text, *n_in, d).expect("a valid program");
            count += 1;
            match compile_cubin(&spec, 90) {
                Ok(cubin) if &cubin[..4] == b"\x7fELF" => {}
                Ok(_) => failures.push(format!("{} ({d}) is not a CUBIN", spec.name)),
                Err(e) => failures.push(format!("{d}:\n{text}\n{e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    eprintln!("compiled {count} generated fused kernels");
}

/// The generator knows exactly the CPU interpreter's ops (the CPU provider is the
/// reference and the session's optimizer writes its op names), with the same operand counts.
#[test]
fn generator_and_cpu_interpreter_have_the_same_ops() {
    use onnx_runtime_ep_cpu::ops::math::fused_elementwise::{Op, Program};
    let cpu: Vec<&str> = Op::ALL.iter().map(|o| o.name()).collect();
    let gpu: Vec<&str> = codegen::op_names().collect();
    assert_eq!(cpu, gpu);
    // Same arities: the sample program with every op parses on both sides.
    let text = codegen::every_op_program();
    Program::parse(&text).unwrap();
    codegen::Program::parse(&text).unwrap();
}
