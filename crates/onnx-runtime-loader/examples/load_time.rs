//! Times loading a model and writing it back:
//! `cargo run --release -p onnx-runtime-loader --example load_time -- model.onnx`

use onnx_runtime_loader::Model;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: load_time MODEL.onnx")?;
    let start = std::time::Instant::now();
    let model = Model::load(&path)?;
    let load = start.elapsed();
    let start = std::time::Instant::now();
    let bytes = model.to_bytes()?;
    println!(
        "{path}: loaded in {load:?} ({} nodes, {} initializers); written in {:?} ({} bytes)",
        model.graph.nodes.len(),
        model.graph.initializers.len(),
        start.elapsed(),
        bytes.len()
    );
    Ok(())
}
