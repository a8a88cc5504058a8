//! ImageDecoder (opset 20): decodes an encoded image (a 1-D uint8 tensor) to an HWC uint8
//! tensor. Formats: BMP, PNG, PNM, TIFF, WebP and JPEG, detected from the data (JPEG 2000 is
//! not supported). `pixel_format` RGB or BGR gives 3 channels (alpha is dropped); Grayscale
//! gives 1, with the ITU-R 601-2 luma weights in the fixed-point form Pillow uses (the ONNX
//! reference implementation decodes with Pillow, so lossless formats match it exactly; JPEG
//! decoders differ in chroma upsampling, by a few levels per pixel).

use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

#[derive(Clone, Copy, PartialEq, Debug)]
enum PixelFormat {
    Rgb,
    Bgr,
    Grayscale,
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let format = match attrs::string(n, "pixel_format", "RGB")?.as_str() {
        "RGB" => PixelFormat::Rgb,
        "BGR" => PixelFormat::Bgr,
        "Grayscale" => PixelFormat::Grayscale,
        other => {
            return Err(EpError::invalid_attribute(
                n,
                "pixel_format",
                format!("'{other}' is not one of RGB, BGR, Grayscale"),
            ))
        }
    };
    let node = n.describe();
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        if x.dtype() != DataType::Uint8 || x.rank() != 1 {
            return Err(EpError::InvalidInput {
                node: node.clone(),
                message: format!(
                    "encoded_stream must be a 1-D uint8 tensor, got {} of shape {:?}",
                    x.dtype(),
                    x.shape()
                ),
            });
        }
        decode(&node, x.data::<u8>(), format).map(|t| vec![Value::Tensor(t)])
    }))
}

fn decode(node: &str, bytes: &[u8], format: PixelFormat) -> Result<Tensor, EpError> {
    let img = image::load_from_memory(bytes).map_err(|e| EpError::InvalidInput {
        node: node.to_string(),
        message: format!(
            "cannot decode the {}-byte encoded_stream ({e}); supported formats: BMP, JPEG, PNG, PNM, TIFF, WebP",
            bytes.len()
        ),
    })?;
    // Moves the decoded buffer when it already is 8-bit RGB (converts otherwise).
    let rgb = img.into_rgb8();
    let (w, h) = (rgb.width() as usize, rgb.height() as usize);
    let mut px = rgb.into_raw();
    Ok(match format {
        PixelFormat::Rgb => Tensor::from_vec(vec![h, w, 3], px),
        PixelFormat::Bgr => {
            px.chunks_exact_mut(3).for_each(|p| p.swap(0, 2));
            Tensor::from_vec(vec![h, w, 3], px)
        }
        PixelFormat::Grayscale => Tensor::from_vec(
            vec![h, w, 1],
            px.chunks_exact(3).map(|p| luma(p[0], p[1], p[2])).collect(),
        ),
    })
}

/// 0.299 R + 0.587 G + 0.114 B in 16-bit fixed point, rounded.
fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((r as u32 * 19595 + g as u32 * 38470 + b as u32 * 7471 + 0x8000) >> 16) as u8
}

pub fn register(r: &mut CpuRegistry) {
    r.register("", "ImageDecoder", 20, build);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::node;
    use onnx_runtime_ir::Attribute;

    /// A 5x3 RGB image with distinct channels, encoded as `format`.
    fn encoded(format: image::ImageFormat) -> (Vec<u8>, Vec<u8>) {
        let (w, h) = (5u32, 3u32);
        let px: Vec<u8> = (0..w * h * 3).map(|i| (i * 37 % 251) as u8).collect();
        let img = image::RgbImage::from_raw(w, h, px.clone()).unwrap();
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, format).unwrap();
        (out.into_inner(), px)
    }

    fn run(bytes: &[u8], format: &str) -> Result<Tensor, EpError> {
        let n = node(
            "ImageDecoder",
            1,
            1,
            vec![("pixel_format", Attribute::String(format.into()))],
        );
        let k = build(&BuildContext::new(&n, 20))?;
        let x = Value::Tensor(Tensor::from_vec(vec![bytes.len()], bytes.to_vec()));
        let mut out = k.run(&[Some(&x)])?;
        Ok(out.remove(0).into_tensor().unwrap())
    }

    #[test]
    fn lossless_formats_in_every_pixel_format() {
        for f in [
            image::ImageFormat::Png,
            image::ImageFormat::Bmp,
            image::ImageFormat::Tiff,
            image::ImageFormat::Pnm,
        ] {
            let (bytes, px) = encoded(f);
            let rgb = run(&bytes, "RGB").unwrap();
            assert_eq!(rgb.shape(), &[3, 5, 3], "{f:?}");
            assert_eq!(rgb.data::<u8>(), px.as_slice(), "{f:?}");
            let bgr = run(&bytes, "BGR").unwrap();
            for (b, p) in bgr.data::<u8>().chunks(3).zip(px.chunks(3)) {
                assert_eq!(b, [p[2], p[1], p[0]]);
            }
            let gray = run(&bytes, "Grayscale").unwrap();
            assert_eq!(gray.shape(), &[3, 5, 1]);
            for (g, p) in gray.data::<u8>().iter().zip(px.chunks(3)) {
                let want = 0.299 * p[0] as f64 + 0.587 * p[1] as f64 + 0.114 * p[2] as f64;
                assert!((*g as f64 - want).abs() <= 0.5 + 1e-3, "{g} vs {want}");
            }
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        let err = run(&[1, 2, 3, 4], "RGB").unwrap_err().to_string();
        assert!(err.contains("cannot decode"), "{err}");
        let (bytes, _) = encoded(image::ImageFormat::Png);
        let err = run(&bytes[..bytes.len() / 2], "RGB")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot decode"), "{err}");
        let n = node(
            "ImageDecoder",
            1,
            1,
            vec![("pixel_format", Attribute::String("CMYK".into()))],
        );
        assert!(build(&BuildContext::new(&n, 20)).is_err());
    }
}
