//! Generates the protobuf types from `proto/onnx.proto` with protox (no `protoc` needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    println!("cargo:rerun-if-changed=build.rs");
    let descriptors = protox::compile(["onnx.proto"], ["proto"])?;
    // Bytes fields as `bytes::Bytes`: decoding from a `Bytes` buffer (a memory-mapped model)
    // then borrows tensor data instead of copying it.
    prost_build::Config::new()
        .bytes(["."])
        .compile_fds(descriptors)?;
    Ok(())
}
