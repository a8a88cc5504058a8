"""Checks that models written by the loader say what the original files say.

argv[1] is a file of lines `ORIGINAL<TAB>WRITTEN`. For each pair, the graphs are compared
with onnx's own reader: nodes (op, domain, name, inputs, outputs, attribute values,
subgraphs), graph inputs/outputs/value_info (names and types), initializers (as numpy
arrays, whether stored in typed fields or raw_data), opset imports and model metadata.
Fields the loader documents as dropped (metadata_props of nodes/values/tensors, type
denotations, quantization annotations, training_info) are not compared.
"""
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper


def same_array(a, b):
    a, b = numpy_helper.to_array(a), numpy_helper.to_array(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "OSU":
        return a.tolist() == b.tolist()
    return a.tobytes() == b.tobytes()


def type_str(t):
    t = onnx.TypeProto.FromString(t.SerializeToString())
    strip(t)
    return t.SerializeToString(deterministic=True)


def strip(t):
    t.ClearField("denotation")
    kind = t.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        inner = getattr(t, kind)
        for d in inner.shape.dim:
            d.ClearField("denotation")
            if d.HasField("dim_value") and d.dim_value < 0:
                d.ClearField("dim_value")
    elif kind in ("sequence_type", "optional_type"):
        strip(getattr(t, kind).elem_type)
    elif kind == "map_type":
        strip(t.map_type.value_type)
    elif kind == "opaque_type":
        t.Clear()


def infos(vs):
    return [(v.name, type_str(v.type) if v.HasField("type") else None, v.doc_string) for v in vs]


def attr_value(a):
    v = helper.get_attribute_value(a)
    if a.type == onnx.AttributeProto.TENSOR:
        return ("t", numpy_helper.to_array(v).tobytes(), v.data_type, list(v.dims), v.name)
    if a.type == onnx.AttributeProto.TENSORS:
        return [("t", numpy_helper.to_array(t).tobytes(), t.data_type, list(t.dims)) for t in v]
    if a.type == onnx.AttributeProto.FLOAT:
        return np.float32(v).tobytes()
    if a.type == onnx.AttributeProto.FLOATS:
        return np.asarray(v, dtype=np.float32).tobytes()
    if a.type in (onnx.AttributeProto.TYPE_PROTO,):
        return type_str(v)
    if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS,
                  onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.SPARSE_TENSORS):
        return None  # compared separately
    return v


def compare_graph(a, b, where, errors):
    def check(what, x, y):
        if x != y:
            errors.append(f"{where}: {what} differs: {x!r:.200} vs {y!r:.200}")

    check("name", a.name, b.name)
    check("doc_string", a.doc_string, b.doc_string)
    check("inputs", infos(a.input), infos(b.input))
    check("outputs", infos(a.output), infos(b.output))
    check("value_info", infos(a.value_info), infos(b.value_info))
    ia = {t.name: t for t in a.initializer}
    ib = {t.name: t for t in b.initializer}
    check("initializer names", sorted(ia), sorted(ib))
    for name in ia.keys() & ib.keys():
        if not same_array(ia[name], ib[name]):
            errors.append(f"{where}: initializer {name} differs")
    check("sparse initializers", len(a.sparse_initializer), len(b.sparse_initializer))
    check("node count", len(a.node), len(b.node))
    for i, (na, nb) in enumerate(zip(a.node, b.node)):
        w = f"{where} node {i} {na.op_type}"
        for field in ("op_type", "domain", "name", "doc_string", "overload"):
            check(f"{w} {field}", getattr(na, field), getattr(nb, field))
        check(f"{w} inputs", list(na.input), list(nb.input))
        check(f"{w} outputs", list(na.output), list(nb.output))
        aa = {x.name: x for x in na.attribute}
        ab = {x.name: x for x in nb.attribute}
        check(f"{w} attribute names", sorted(aa), sorted(ab))
        for k in aa.keys() & ab.keys():
            check(f"{w} attribute {k} type", aa[k].type, ab[k].type)
            check(f"{w} attribute {k} ref", aa[k].ref_attr_name, ab[k].ref_attr_name)
            if not aa[k].ref_attr_name:
                check(f"{w} attribute {k}", attr_value(aa[k]), attr_value(ab[k]))
            if aa[k].type == onnx.AttributeProto.GRAPH:
                compare_graph(aa[k].g, ab[k].g, f"{w}.{k}", errors)
            for j, (ga, gb) in enumerate(zip(aa[k].graphs, ab[k].graphs)):
                compare_graph(ga, gb, f"{w}.{k}[{j}]", errors)


def compare(orig, ours):
    a, b = onnx.load(orig), onnx.load(ours)
    errors = []
    for field in ("ir_version", "producer_name", "producer_version", "domain",
                  "model_version", "doc_string"):
        if getattr(a, field) != getattr(b, field):
            errors.append(f"{field} differs")
    opsets = lambda m: sorted((o.domain, o.version) for o in m.opset_import)
    if opsets(a) != opsets(b):
        errors.append(f"opset_import differs: {opsets(a)} vs {opsets(b)}")
    meta = lambda m: [(p.key, p.value) for p in m.metadata_props]
    if meta(a) != meta(b):
        errors.append("metadata_props differ")
    if len(a.functions) != len(b.functions):
        errors.append("function count differs")
    compare_graph(a.graph, b.graph, "graph", errors)
    return errors


def main(listing):
    pairs = [line.rstrip("\n").split("\t") for line in open(listing) if line.strip()]
    bad = 0
    for orig, ours in pairs:
        errors = compare(orig, ours)
        if errors:
            bad += 1
            print(orig)
            for e in errors[:5]:
                print("   ", e)
    print(f"{len(pairs) - bad}/{len(pairs)} written models say what the originals say")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main(sys.argv[1])
