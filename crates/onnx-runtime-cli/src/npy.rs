//! `.npy` files (NumPy format versions 1, 2 and 3): little-endian numeric and bool arrays in
//! C order, read into host tensors and written back.

use onnx_runtime_ep_cpu::Tensor;
use onnx_runtime_ir::DataType;

const MAGIC: &[u8] = b"\x93NUMPY";

/// The NumPy descr of a dtype (`<f4`, `|b1`, ...).
pub fn descr(dtype: DataType) -> Option<&'static str> {
    use DataType::*;
    Some(match dtype {
        Float32 => "<f4",
        Float64 => "<f8",
        Float16 => "<f2",
        Int8 => "|i1",
        Int16 => "<i2",
        Int32 => "<i4",
        Int64 => "<i8",
        Uint8 => "|u1",
        Uint16 => "<u2",
        Uint32 => "<u4",
        Uint64 => "<u8",
        Bool => "|b1",
        Complex64 => "<c8",
        Complex128 => "<c16",
        _ => return None,
    })
}

fn dtype_of(descr: &str) -> Result<DataType, String> {
    use DataType::*;
    let (order, code) = descr.split_at(1);
    if order == ">" && !matches!(code, "i1" | "u1" | "b1") {
        return Err(format!(
            "big-endian arrays ('{descr}') are not supported; save with a little-endian dtype"
        ));
    }
    Ok(match code {
        "f4" => Float32,
        "f8" => Float64,
        "f2" => Float16,
        "i1" => Int8,
        "i2" => Int16,
        "i4" => Int32,
        "i8" => Int64,
        "u1" => Uint8,
        "u2" => Uint16,
        "u4" => Uint32,
        "u8" => Uint64,
        "b1" => Bool,
        "c8" => Complex64,
        "c16" => Complex128,
        _ => return Err(format!("unsupported .npy dtype '{descr}'")),
    })
}

/// Value of `key` in the header dict, as the raw text up to the next top-level comma.
fn header_field<'a>(header: &'a str, key: &str) -> Result<&'a str, String> {
    let pat = format!("'{key}':");
    let start = header
        .find(&pat)
        .ok_or_else(|| format!("the .npy header has no '{key}'"))?
        + pat.len();
    let rest = header[start..].trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')').map(|i| i + 1)
    } else {
        rest.find([',', '}'])
    }
    .ok_or_else(|| format!("the .npy header's '{key}' is malformed"))?;
    Ok(rest[..end].trim())
}

/// Parses a `.npy` file.
pub fn read(bytes: &[u8]) -> Result<Tensor, String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not a .npy file (bad magic)".into());
    }
    let major = bytes[6];
    let (len, start) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err("truncated .npy header".into());
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let header = bytes
        .get(start..start + len)
        .ok_or("truncated .npy header")?;
    let header = std::str::from_utf8(header).map_err(|_| ".npy header is not text")?;
    let descr = header_field(header, "descr")?.trim_matches(|c| c == '\'' || c == '"');
    let fortran = header_field(header, "fortran_order")?;
    if fortran != "False" {
        return Err("Fortran-order arrays are not supported; save a C-order array".into());
    }
    let shape_txt = header_field(header, "shape")?;
    let shape: Vec<usize> = shape_txt
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| format!("bad shape {shape_txt}"))
        })
        .collect::<Result<_, _>>()?;
    let dtype = dtype_of(descr)?;
    let data = &bytes[start + len..];
    let want = dtype
        .checked_storage_bytes(shape.iter().product())
        .ok_or("the array is too large")?;
    if data.len() < want {
        return Err(format!(
            "the .npy data has {} bytes, the header needs {want}",
            data.len()
        ));
    }
    Tensor::from_bytes(dtype, shape, &data[..want])
}

/// Serializes a tensor as a version 1 `.npy` (version 2 when the header is too long).
pub fn write(t: &Tensor) -> Result<Vec<u8>, String> {
    let descr = descr(t.dtype())
        .ok_or_else(|| format!("{} tensors cannot be saved as .npy; use .pb", t.dtype()))?;
    let shape = match t.shape() {
        [] => "()".to_string(),
        [n] => format!("({n},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let v1 = header.len() + 11 < 65536;
    let prefix = if v1 { 10 } else { 12 };
    let total = (prefix + header.len() + 1).div_ceil(64) * 64;
    while prefix + header.len() + 1 < total {
        header.push(' ');
    }
    header.push('\n');
    let mut out = Vec::with_capacity(total + t.bytes().len());
    out.extend_from_slice(MAGIC);
    if v1 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(t.bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn round_trips_every_dtype_and_rank() {
        let cases = [
            Tensor::from_vec(vec![2, 3], vec![1.5f32, -2., 3., 4., 5., 6.]),
            Tensor::from_vec(vec![], vec![7i64]),
            Tensor::from_vec(vec![4], vec![f16::from_f32(0.5); 4]),
            Tensor::from_bools(vec![3], &[true, false, true]),
            Tensor::from_vec(vec![1, 2, 1], vec![-3i8, 4]),
            Tensor::from_vec(vec![2], vec![u64::MAX, 0]),
            Tensor::from_vec(vec![0, 3], Vec::<f64>::new()),
        ];
        for t in cases {
            let bytes = write(&t).unwrap();
            assert_eq!(
                (bytes.len() - t.bytes().len()) % 64,
                0,
                "header is 64-aligned"
            );
            let back = read(&bytes).unwrap();
            assert_eq!(back.dtype(), t.dtype());
            assert_eq!(back.shape(), t.shape());
            assert_eq!(back.bytes(), t.bytes());
        }
    }

    #[test]
    fn reads_numpy_written_headers() {
        // Exactly what numpy 1.x/2.x writes for np.arange(6, dtype='<i4').reshape(2, 3).
        let mut bytes = b"\x93NUMPY\x01\x00v\x00".to_vec();
        let mut header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }".to_string();
        while header.len() < 117 {
            header.push(' ');
        }
        header.push('\n');
        bytes.extend_from_slice(header.as_bytes());
        for i in 0..6i32 {
            bytes.extend_from_slice(&i.to_le_bytes());
        }
        let t = read(&bytes).unwrap();
        assert_eq!(t.shape(), &[2, 3]);
        assert_eq!(t.data::<i32>(), &[0, 1, 2, 3, 4, 5]);
        let at = bytes.windows(5).position(|w| w == b"False").unwrap();
        let mut fortran = bytes.clone();
        fortran[at..at + 5].copy_from_slice(b"True ");
        assert!(read(&fortran).unwrap_err().contains("Fortran"));
        assert!(read(b"nope").is_err());
    }
}
