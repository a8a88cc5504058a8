//! Einsum: any equation with explicit or implicit output, ellipses, repeated indices
//! (diagonals) and summed indices. Operands are contracted pairwise, each contraction
//! arranged as a batched matrix product; floats compute in f64, integers in wrapping i64.

use super::common::NodeInfo;
use crate::kernel::{kernel_fn, BuildContext, CpuKernel};
use crate::shape::{contiguous_strides, for_each_offset};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use std::collections::HashMap;

/// The element types Einsum computes in.
trait Acc: Copy + Default + Send + Sync + PartialEq + std::fmt::Debug {
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
}
impl Acc for f64 {
    fn add(self, o: f64) -> f64 {
        self + o
    }
    fn mul(self, o: f64) -> f64 {
        self * o
    }
}
impl Acc for i64 {
    fn add(self, o: i64) -> i64 {
        self.wrapping_add(o)
    }
    fn mul(self, o: i64) -> i64 {
        self.wrapping_mul(o)
    }
}

/// Labels: letters are 0..52, ellipsis dimensions 100 + k (k counted from the left of the
/// broadcast ellipsis).
type Label = u32;

#[derive(Clone, Debug)]
struct Operand<E> {
    data: Vec<E>,
    shape: Vec<usize>,
    labels: Vec<Label>,
}

impl<E: Acc> Operand<E> {
    /// Copies the elements reached by `strides` over `shape` (a strided view) into a new operand.
    fn gather(&self, shape: Vec<usize>, strides: &[usize], labels: Vec<Label>) -> Operand<E> {
        let mut data = Vec::with_capacity(shape.iter().product());
        for_each_offset(&shape, [strides], |_, [o]| data.push(self.data[o]));
        Operand {
            data,
            shape,
            labels,
        }
    }

    /// Takes diagonals until no label repeats.
    fn diagonals(mut self) -> Operand<E> {
        loop {
            let dup = (0..self.labels.len()).find_map(|j| {
                (0..j)
                    .find(|&i| self.labels[i] == self.labels[j])
                    .map(|i| (i, j))
            });
            let Some((i, j)) = dup else { return self };
            let st = contiguous_strides(&self.shape);
            let mut shape = self.shape.clone();
            let mut strides = st.clone();
            let mut labels = self.labels.clone();
            strides[i] += st[j];
            shape[i] = shape[i].min(shape[j]);
            shape.remove(j);
            strides.remove(j);
            labels.remove(j);
            self = self.gather(shape, &strides, labels);
        }
    }

    /// Sums over the axes whose labels `drop` says to drop.
    fn sum_out(self, drop: impl Fn(Label) -> bool) -> Operand<E> {
        let axes: Vec<usize> = (0..self.labels.len())
            .filter(|&a| drop(self.labels[a]))
            .collect();
        if axes.is_empty() {
            return self;
        }
        let kept: Vec<usize> = (0..self.labels.len())
            .filter(|a| !axes.contains(a))
            .collect();
        let out_shape: Vec<usize> = kept.iter().map(|&a| self.shape[a]).collect();
        let out_st = contiguous_strides(&out_shape);
        let mut strides = vec![0; self.shape.len()];
        for (k, &a) in kept.iter().enumerate() {
            strides[a] = out_st[k];
        }
        let mut data = vec![E::default(); out_shape.iter().product()];
        for_each_offset(&self.shape, [&strides], |i, [o]| {
            data[o] = data[o].add(self.data[i]);
        });
        Operand {
            data,
            labels: kept.iter().map(|&a| self.labels[a]).collect(),
            shape: out_shape,
        }
    }

    /// Reorders axes to `labels` order, broadcasting size-1 axes to `sizes`.
    fn arrange(&self, labels: &[Label], sizes: &HashMap<Label, usize>) -> Operand<E> {
        let st = contiguous_strides(&self.shape);
        let mut shape = Vec::with_capacity(labels.len());
        let mut strides = Vec::with_capacity(labels.len());
        for l in labels {
            let a = self.labels.iter().position(|x| x == l);
            shape.push(sizes[l]);
            strides.push(match a {
                Some(a) if self.shape[a] != 1 => st[a],
                _ => 0,
            });
        }
        self.gather(shape, &strides, labels.to_vec())
    }
}

/// Contracts `a` and `b`, keeping the labels in `keep`.
fn contract<E: Acc>(
    a: Operand<E>,
    b: Operand<E>,
    keep: &dyn Fn(Label) -> bool,
    sizes: &HashMap<Label, usize>,
) -> Operand<E> {
    let (al, bl) = (a.labels.clone(), b.labels.clone());
    let a = a.sum_out(|l| !keep(l) && !bl.contains(&l));
    let b = b.sum_out(|l| !keep(l) && !al.contains(&l));
    let batch: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|l| b.labels.contains(l) && keep(*l))
        .collect();
    let inner: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|l| b.labels.contains(l) && !keep(*l))
        .collect();
    let left: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|l| !b.labels.contains(l))
        .collect();
    let right: Vec<Label> = b
        .labels
        .iter()
        .copied()
        .filter(|l| !a.labels.contains(l))
        .collect();
    let size = |ls: &[Label]| ls.iter().map(|l| sizes[l]).product::<usize>();
    let (nb, m, k, n) = (size(&batch), size(&left), size(&inner), size(&right));
    let a = a.arrange(&[&batch[..], &left[..], &inner[..]].concat(), sizes);
    let b = b.arrange(&[&batch[..], &inner[..], &right[..]].concat(), sizes);
    let mut data = vec![E::default(); nb * m * n];
    for bi in 0..nb {
        let (ab, bb) = (
            &a.data[bi * m * k..][..m * k],
            &b.data[bi * k * n..][..k * n],
        );
        let cb = &mut data[bi * m * n..][..m * n];
        for i in 0..m {
            let crow = &mut cb[i * n..][..n];
            for p in 0..k {
                let av = ab[i * k + p];
                for (c, &bv) in crow.iter_mut().zip(&bb[p * n..][..n]) {
                    *c = c.add(av.mul(bv));
                }
            }
        }
    }
    let labels = [&batch[..], &left[..], &right[..]].concat();
    Operand {
        data,
        shape: labels.iter().map(|l| sizes[l]).collect(),
        labels,
    }
}

/// A parsed equation: each input's labels (ellipsis expanded per operand rank) and the output's.
struct Equation {
    inputs: Vec<String>,
    output: Option<String>,
}

fn parse_equation(eq: &str) -> Equation {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, out) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    Equation {
        inputs: lhs.split(',').map(str::to_string).collect(),
        output: out,
    }
}

fn letter(c: char) -> Option<Label> {
    match c {
        'a'..='z' => Some(c as u32 - 'a' as u32),
        'A'..='Z' => Some(26 + c as u32 - 'A' as u32),
        _ => None,
    }
}

/// Labels of one term for an operand of `rank` (ellipsis dims numbered from the right end of
/// the broadcast ellipsis of rank `ell`).
fn term_labels(
    info: &NodeInfo,
    term: &str,
    rank: usize,
    ell: usize,
) -> Result<Vec<Label>, EpError> {
    let bad = |m: String| info.invalid(format!("equation term '{term}': {m}"));
    let (pre, post, has_ell) = match term.split_once("...") {
        Some((p, q)) => (p, q, true),
        None => (term, "", false),
    };
    let mut labels = Vec::new();
    for c in pre.chars() {
        labels.push(letter(c).ok_or_else(|| bad(format!("'{c}' is not a letter")))?);
    }
    if has_ell {
        let named = pre.chars().count() + post.chars().count();
        if rank < named {
            return Err(bad(format!(
                "operand of rank {rank} has too few dimensions"
            )));
        }
        let k = rank - named;
        if k > ell {
            return Err(bad("inconsistent ellipsis".into()));
        }
        labels.extend((ell - k..ell).map(|i| 100 + i as u32));
        for c in post.chars() {
            labels.push(letter(c).ok_or_else(|| bad(format!("'{c}' is not a letter")))?);
        }
    } else if labels.len() != rank {
        return Err(bad(format!(
            "names {} dimensions but the operand has rank {rank}",
            labels.len()
        )));
    }
    Ok(labels)
}

fn einsum<E: Acc>(
    info: &NodeInfo,
    eq: &Equation,
    ops: Vec<(Vec<E>, Vec<usize>)>,
) -> Result<(Vec<E>, Vec<usize>), EpError> {
    if eq.inputs.len() != ops.len() {
        return Err(info.invalid(format!(
            "the equation names {} inputs but the node has {}",
            eq.inputs.len(),
            ops.len()
        )));
    }
    // The broadcast ellipsis rank.
    let mut ell = 0;
    for (t, (_, s)) in eq.inputs.iter().zip(&ops) {
        if t.contains("...") {
            let named = t.replace("...", "").chars().count();
            ell = ell.max(s.len().saturating_sub(named));
        }
    }
    let mut operands = Vec::new();
    let mut sizes: HashMap<Label, usize> = HashMap::new();
    let mut counts: HashMap<Label, usize> = HashMap::new();
    for (t, (data, shape)) in eq.inputs.iter().zip(ops) {
        let labels = term_labels(info, t, shape.len(), ell)?;
        for (l, &d) in labels.iter().zip(&shape) {
            *counts.entry(*l).or_default() += 1;
            let s = sizes.entry(*l).or_insert(d);
            if *s == 1 {
                *s = d;
            } else if d != *s && !(d == 1 && *l >= 100) {
                return Err(info.invalid(format!(
                    "dimension sizes {s} and {d} of one index in '{t}' differ"
                )));
            }
        }
        operands.push(Operand {
            data,
            shape,
            labels,
        });
    }
    let out_labels: Vec<Label> = match &eq.output {
        Some(o) => {
            let rank =
                o.replace("...", "").chars().count() + if o.contains("...") { ell } else { 0 };
            let v = term_labels(info, o, rank, ell)?;
            for l in &v {
                if !sizes.contains_key(l) {
                    return Err(info.invalid(format!("output index {l} appears in no input")));
                }
            }
            v
        }
        None => {
            let mut v: Vec<Label> = (0..ell as u32).map(|i| 100 + i).collect();
            let mut letters: Vec<Label> = counts
                .iter()
                .filter(|(l, &c)| **l < 100 && c == 1)
                .map(|(l, _)| *l)
                .collect();
            letters.sort_unstable();
            v.extend(letters);
            v
        }
    };
    let mut operands: Vec<Operand<E>> = operands.into_iter().map(Operand::diagonals).collect();
    let mut acc = operands.remove(0);
    while !operands.is_empty() {
        let b = operands.remove(0);
        let rest: Vec<Label> = operands.iter().flat_map(|o| o.labels.clone()).collect();
        let keep = |l: Label| out_labels.contains(&l) || rest.contains(&l);
        acc = contract(acc, b, &keep, &sizes);
    }
    let acc = acc.sum_out(|l| !out_labels.contains(&l));
    let out = acc.arrange(&out_labels, &sizes);
    Ok((out.data, out.shape))
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    let eq = parse_equation(&attrs::string(ctx.node, "equation", "")?);
    Ok(kernel_fn(move |inputs| {
        let mut ts = Vec::new();
        for i in 0..inputs.len() {
            ts.push(info.input(inputs, i)?);
        }
        let Some(first) = ts.first() else {
            return Err(info.invalid("Einsum needs at least one input"));
        };
        let dtype = first.dtype();
        for t in &ts {
            info.same_dtype(first, t)?;
        }
        let out = if dtype.is_float() {
            let ops = ts
                .iter()
                .map(|t| {
                    t.to_f64_vec()
                        .map(|v| (v, t.shape().to_vec()))
                        .ok_or_else(|| info.bad_dtype(dtype, "Einsum takes numeric types"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let (data, shape) = einsum::<f64>(&info, &eq, ops)?;
            let t = Tensor::from_vec(shape, data);
            super::cast::native_to_native(&t, dtype)
                .ok_or_else(|| info.bad_dtype(dtype, "unsupported"))?
        } else {
            let ops = ts
                .iter()
                .map(|t| {
                    t.to_i64_vec()
                        .filter(|_| dtype.is_integer())
                        .map(|v| (v, t.shape().to_vec()))
                        .ok_or_else(|| info.bad_dtype(dtype, "Einsum takes numeric types"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let (data, shape) = einsum::<i64>(&info, &eq, ops)?;
            let t = Tensor::from_vec(shape, data);
            super::cast::native_to_native(&t, dtype)
                .ok_or_else(|| info.bad_dtype(dtype, "unsupported"))?
        };
        Ok(vec![Value::Tensor(out)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("", "Einsum", 12, build);
}

#[cfg(test)]
mod tests {
    use crate::ops::math::testutil::*;
    use onnx_runtime_ir::DataType;

    /// Expected values from the ONNX reference implementation (scripts/math_cases.py einsum).
    #[test]
    #[rustfmt::skip]
    fn matches_onnx_reference() {
        check("Einsum", 12, vec![("equation", string("ij,jk->ik"))], &[f32s(&[2, 3], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867]), f32s(&[3, 4], &[-2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812, -1.1818054914474487, -1.3294463157653809, -1.4707825183868408, -0.3295421600341797, 0.027289554476737976, 0.3209841251373291, 2.973001718521118, 1.7559715509414673])], DataType::Float32, &[2, 4], &[-4.999443054199219, -1.1908704042434692, 2.7502267360687256, 1.9747822284698486, 6.372335433959961, -0.8643278479576111, 5.488150119781494, 4.648021697998047], 1e-05);
        check("Einsum", 12, vec![("equation", string("bij,bjk->bik"))], &[f32s(&[5, 2, 3], &[0.7330753803253174, 2.93376088142395, -1.7081477642059326, -2.0387277603149414, 0.6752375960350037, -2.7363479137420654, -2.7859182357788086, 0.08933292329311371, -0.2027638554573059, 2.50300669670105, 0.7753575444221497, 0.0847058817744255, -0.018759388476610184, -1.5149104595184326, -2.9292359352111816, -1.845587134361267, 1.1521927118301392, -1.796359658241272, -0.7827821373939514, -2.9775946140289307, 1.9802863597869873, -2.0732336044311523, -1.3944041728973389, 2.2819929122924805, 0.05874485895037651, 2.0829014778137207, 0.8383030295372009, 1.4506256580352783, -2.451026439666748, 0.24686293303966522]), f32s(&[5, 3, 4], &[0.04663341864943504, 2.2280361652374268, -0.8324156403541565, 0.589104413986206, -2.6444902420043945, -0.6742091774940491, -1.061781883239746, -2.098801612854004, 1.8980286121368408, -0.7233229875564575, 2.8724873065948486, 0.5399501323699951, 0.6303375363349915, 0.8279795050621033, 1.058701515197754, -2.0952718257904053, -0.3581191897392273, -1.562616229057312, -0.5850102305412292, -2.4197754859924316, 2.8069682121276855, -1.7099757194519043, 1.0305910110473633, -1.197479486465454, 2.244462251663208, 0.9732884168624878, -2.2103052139282227, 2.070446014404297, 2.6696889400482178, 2.4235007762908936, 0.4183148741722107, -2.1272401809692383, -1.8452190160751343, 2.567434072494507, 0.31395891308784485, -1.9166849851608276, 2.3043413162231445, 0.8494302034378052, 0.4181656539440155, -0.7422729730606079, -0.534268319606781, -1.563064694404602, -2.7716562747955322, 2.257312774658203, -0.19361869990825653, 0.285811185836792, -1.0670201778411865, 1.5079494714736938, -2.848818778991699, -0.7668883800506592, -2.8178982734680176, -2.2626473903656006, 2.802889347076416, 0.9465643763542175, -0.43067851662635803, 0.14244064688682556, 2.2368552684783936, -0.9347360134124756, 0.5417459011077881, 1.1021062135696411])], DataType::Float32, &[5, 2, 4], &[-10.966229438781738, 0.8908924460411072, -8.63187026977539, -6.647838592529297, -7.074398517608643, -3.0183472633361816, -6.880010604858398, -4.095705032348633, -2.3572123050689697, -2.099555253982544, -3.2106831073760986, 5.863895893096924, 1.5378354787826538, 0.7160069346427917, 2.283642053604126, -7.222104072570801, 1.318637490272522, -11.210265159606934, -1.511905312538147, 8.798160552978516, 2.2483224868774414, -3.615983724594116, 3.997307062149048, -2.8291234970092773, -0.596383273601532, 4.55524206161499, 5.812530517578125, -3.1541528701782227, -4.474287986755371, 1.0706957578659058, 0.5629215240478516, 1.8324289321899414, 7.5459513664245605, 1.1429575681686401, -0.6084507703781128, 1.087669849395752, -10.450328826904297, -3.663274049758911, -2.898374080657959, -3.359311103820801], 1e-05);
        check("Einsum", 12, vec![("equation", string("ii->i"))], &[f32s(&[3, 3], &[-0.867517352104187, 0.11459092050790787, 1.5914843082427979, 2.455075979232788, -2.0936262607574463, 2.6005163192749023, -2.9689269065856934, 1.5178650617599487, 1.8631609678268433])], DataType::Float32, &[3], &[-0.867517352104187, -2.0936262607574463, 1.8631609678268433], 1e-05);
        check("Einsum", 12, vec![("equation", string("ii"))], &[f32s(&[3, 3], &[-2.179415702819824, -0.486578106880188, 1.8915376663208008, -2.9143729209899902, 0.7707716822624207, 1.7581419944763184, 0.07802149653434753, 1.3550965785980225, -1.6414591073989868])], DataType::Float32, &[], &[-3.050103187561035], 1e-05);
        check("Einsum", 12, vec![("equation", string("ijk->kji"))], &[f32s(&[2, 3, 4], &[-1.8088730573654175, -0.8212382793426514, -1.923563838005066, -0.9236313700675964, 2.688744306564331, 0.43999630212783813, -0.9595915675163269, -1.3708522319793701, 2.7122368812561035, -0.33313074707984924, 2.882368564605713, 0.0931360125541687, 0.12699677050113678, 2.3792431354522705, 1.4566044807434082, 0.4839171767234802, -0.4401029646396637, 2.269127130508423, -0.5301231145858765, 2.53655743598938, -2.587707996368408, -0.4200188219547272, 0.1170889213681221, 2.7056291103363037])], DataType::Float32, &[4, 3, 2], &[-1.8088730573654175, 0.12699677050113678, 2.688744306564331, -0.4401029646396637, 2.7122368812561035, -2.587707996368408, -0.8212382793426514, 2.3792431354522705, 0.43999630212783813, 2.269127130508423, -0.33313074707984924, -0.4200188219547272, -1.923563838005066, 1.4566044807434082, -0.9595915675163269, -0.5301231145858765, 2.882368564605713, 0.1170889213681221, -0.9236313700675964, 0.4839171767234802, -1.3708522319793701, 2.53655743598938, 0.0931360125541687, 2.7056291103363037], 1e-05);
        check("Einsum", 12, vec![("equation", string("...k->k"))], &[f32s(&[2, 3, 4], &[-1.494004487991333, 1.8362349271774292, 1.0588271617889404, 1.3025153875350952, 0.7777330875396729, 2.82936429977417, -1.0039112567901611, -0.6103466153144836, -1.7825294733047485, -2.6957757472991943, -1.722550868988037, 2.492786407470703, 2.04101300239563, -2.3255655765533447, 0.6226741671562195, -0.12482102960348129, 0.5681092143058777, 0.9556500315666199, -1.1600430011749268, 2.7681050300598145, -0.20495979487895966, 0.76860511302948, 0.8113570809364319, -1.8966636657714844])], DataType::Float32, &[4], &[-0.09463833272457123, 1.3685131072998047, -1.3936467170715332, 3.9315757751464844], 1e-05);
        check("Einsum", 12, vec![("equation", string("i,i"))], &[f32s(&[4], &[-2.628807544708252, -0.5308990478515625, 1.584180474281311, 1.8913307189941406]), f32s(&[4], &[1.3799355030059814, -2.320770263671875, 2.4801292419433594, 1.812219500541687])], DataType::Float32, &[], &[4.960988521575928], 1e-05);
        check("Einsum", 12, vec![("equation", string("i,j->ij"))], &[f32s(&[3], &[2.266148090362549, 0.13982491195201874, 2.4938125610351562]), f32s(&[4], &[-2.7200865745544434, -2.8182671070098877, -2.878706455230713, -1.4833879470825195])], DataType::Float32, &[3, 4], &[-6.164118766784668, -6.386610507965088, -6.523575305938721, -3.361576795578003, -0.38033586740493774, -0.39406394958496094, -0.40251487493515015, -0.20741458237171173, -6.78338623046875, -7.028229713439941, -7.178954124450684, -3.699291467666626], 1e-05);
        check("Einsum", 12, vec![("equation", string("...ij,...jk->...ik"))], &[f32s(&[2, 1, 3, 4], &[-1.5085813999176025, -1.8749799728393555, 0.40233489871025085, -2.766084909439087, 0.5423272252082825, -2.0039331912994385, 1.0672422647476196, -2.8735477924346924, -1.1365787982940674, 2.6300477981567383, 0.23037828505039215, 1.869524359703064, 0.948156476020813, 0.6645047068595886, -1.852483868598938, 0.4463684856891632, -2.7618815898895264, 1.8099864721298218, 2.760425567626953, 2.124054431915283, -2.695742130279541, -0.9680395126342773, -1.0919808149337769, -2.323698043823242]), f32s(&[5, 4, 2], &[0.7596709132194519, 1.7847490310668945, -1.1176711320877075, 2.1768553256988525, 1.7827614545822144, -2.225172281265259, 1.6011549234390259, 2.295724391937256, -1.8163045644760132, 0.4418470859527588, 0.8324998021125793, 0.6560055613517761, -2.4225258827209473, 0.9671487808227539, 0.7917283773422241, 1.9433128833770752, 1.8210761547088623, -1.036990761756897, 1.3322839736938477, 2.2036402225494385, 2.3576865196228027, -2.030925989151001, -2.8397858142852783, 0.9048446416854858, -1.7119423151016235, 0.3822583556175232, 2.6688272953033447, -0.7240822315216064, -1.4833526611328125, -0.26093968749046326, 0.9434635043144226, -2.3934061527252197, -0.7164914011955261, -2.1976728439331055, 0.974677324295044, 1.9833152294158936, -0.7388772964477539, -0.7696563005447388, 0.23712995648384094, -1.709653377532959])], DataType::Float32, &[2, 5, 3, 2], &[-2.762077808380127, -14.019432067871094, -0.04662860557436943, -12.366025924682617, -0.39884668588638306, 7.476006984710693, -1.9855316877365112, -6.882810115814209, -7.513796329498291, -5.626986026763916, 5.17594575881958, 5.079012870788574, 3.5584211349487305, -5.887385845184326, 8.994294166564941, -9.745940208435059, -3.3317151069641113, 8.19804859161377, -5.627898216247559, 7.296351432800293, -10.570768356323242, 8.257402420043945, 10.38699722290039, -6.873483657836914, -1.6998125314712524, 4.016078948974609, -3.8117265701293945, -1.074927806854248, 3.650895833969116, 4.340491771697998, -2.6102426052093506, 8.2855863571167, 4.2010297775268555, -2.2553658485412598, -6.6332688331604, -9.823229789733887, 3.672151803970337, -0.06933490186929703, 1.5177032947540283, 6.764476299285889, 4.896010398864746, -7.39792537689209, -3.023193120956421, 4.647251129150391, -2.141822338104248, 3.1683237552642822, -2.174598455429077, 0.7773955464363098, 3.3192782402038574, -0.7036698460578918, 7.468006610870361, -8.170360565185547, 1.4588931798934937, 5.516964435577393, 1.4429373741149902, -0.10317505896091461, 2.207078456878662, 3.903510093688965, 1.2437713146209717, 8.817599296569824], 1e-05);
        check("Einsum", 12, vec![("equation", string("ab,bc,cd->ad"))], &[f32s(&[2, 3], &[-1.5155425071716309, -1.0208863019943237, -0.25544580817222595, -2.5108113288879395, 1.5163928270339966, 0.4743274450302124]), f32s(&[3, 4], &[-1.2018367052078247, -2.5347206592559814, 1.5790857076644897, -2.2135260105133057, -2.2007601261138916, -2.2158944606781006, -2.5124261379241943, 2.438354253768921, -1.384534239768982, -1.1615365743637085, 1.9967658519744873, 0.7195407748222351]), f32s(&[4, 2], &[-1.877139687538147, -0.3911195397377014, 2.303534746170044, -0.7477558851242065, 1.265289306640625, -2.4191536903381348, 1.3639487028121948, 1.6588411331176758])], DataType::Float32, &[2, 2], &[6.944643020629883, -4.5662126541137695, 11.933979988098145, 30.983455657958984], 1e-05);
        check("Einsum", 12, vec![("equation", string("aba->b"))], &[f32s(&[2, 3, 2], &[1.9546006917953491, 1.0452059507369995, -0.7756032347679138, -2.6147279739379883, 0.11265740543603897, 1.5447593927383423, -1.8549708127975464, -1.4025766849517822, 0.21672025322914124, 1.4899893999099731, 2.3795204162597656, -2.2455508708953857])], DataType::Float32, &[3], &[0.5520240068435669, 0.7143861651420593, -2.1328935623168945], 1e-05);
        check("Einsum", 12, vec![("equation", string("ij,j->i"))], &[i64s(&[2, 3], &[15, -13, -18, 11, -2, 5]), i64s(&[3], &[-15, 8, -4])], DataType::Int64, &[2], &[-257.0, -201.0], 1e-05);
        check("Einsum", 12, vec![("equation", string("ij,ji"))], &[f64s(&[3, 2], &[2.6350797521452867, 2.0581504010495166, 1.662694854319092, -0.6298847087613786, 0.8473746636588908, -1.8933261453205266]), f64s(&[2, 3], &[1.556966791684835, 1.546143987110332, 1.3277712818083138, -0.33120585343932607, -0.7309180272550737, -0.4813744057803522])], DataType::Float64, &[], &[8.488738439066307], 1e-12);
        check("Einsum", 12, vec![("equation", string("bij"))], &[f32s(&[2, 3, 4], &[-2.799964666366577, 2.06592059135437, 0.25421926379203796, -0.6748881936073303, 0.2881726026535034, 1.3298412561416626, -0.7112348079681396, 1.9838440418243408, 2.516780138015747, -0.6754062175750732, -2.173103094100952, 1.5622397661209106, 2.957693099975586, -2.1120710372924805, 1.27605402469635, 1.9519404172897339, 2.5234317779541016, -2.259711503982544, -2.4491405487060547, 2.927229404449463, -2.2994611263275146, -1.9391546249389648, 0.44971761107444763, -0.3223617970943451])], DataType::Float32, &[2, 3, 4], &[-2.799964666366577, 2.06592059135437, 0.25421926379203796, -0.6748881936073303, 0.2881726026535034, 1.3298412561416626, -0.7112348079681396, 1.9838440418243408, 2.516780138015747, -0.6754062175750732, -2.173103094100952, 1.5622397661209106, 2.957693099975586, -2.1120710372924805, 1.27605402469635, 1.9519404172897339, 2.5234317779541016, -2.259711503982544, -2.4491405487060547, 2.927229404449463, -2.2994611263275146, -1.9391546249389648, 0.44971761107444763, -0.3223617970943451], 1e-05);
    }
}
