"""Writes models with model-local functions into the folder given as argv[1].

Covers: attribute references (ref_attr_name) with caller values and function defaults,
calls of one function with different attributes, nested functions, functions that import
their own opsets, omitted optional inputs and outputs, a function body with an If whose
branches use the function's values by name, and a call inside an If branch of the graph.
"""
import os
import sys

import onnx
from onnx import TensorProto, helper as h

OPSET = [h.make_opsetid("", 18), h.make_opsetid("custom", 1)]
F = TensorProto.FLOAT


def fn(name, inputs, outputs, nodes, attributes=(), defaults=(), opsets=None):
    f = h.make_function("custom", name, inputs, outputs, nodes, opsets or [h.make_opsetid("", 18)],
                        attributes=list(attributes))
    f.attribute_proto.extend(defaults)
    return f


def ref(name, ref_name, typ):
    a = onnx.AttributeProto()
    a.name = name
    a.ref_attr_name = ref_name
    a.type = typ
    return a


def node(op, inputs, outputs, domain="", **attrs):
    return h.make_node(op, inputs, outputs, domain=domain, **attrs)


def lin_act():
    leaky = node("LeakyRelu", ["y"], ["z"])
    leaky.attribute.append(ref("alpha", "alpha", onnx.AttributeProto.FLOAT))
    const = node("Constant", [], ["b"])
    const.attribute.append(ref("value_float", "beta", onnx.AttributeProto.FLOAT))
    return fn("LinAct", ["x", "w"], ["out"], [
        node("MatMul", ["x", "w"], ["y"]), leaky, const, node("Mul", ["z", "b"], ["out"]),
    ], attributes=["alpha"], defaults=[h.make_attribute("beta", 0.5)])


def save(folder, name, graph, functions):
    m = h.make_model(graph, opset_imports=OPSET, functions=functions)
    m.ir_version = 9
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(folder, name + ".onnx"))


def main(folder):
    x = h.make_tensor_value_info("x", F, [2, 3])
    w = h.make_tensor_value_info("w", F, [3, 3])
    y = h.make_tensor_value_info("y", F, [2, 3])

    # Two calls with different attributes; the second overrides the default beta.
    g = h.make_graph([
        node("LinAct", ["x", "w"], ["h"], domain="custom", alpha=0.1),
        node("LinAct", ["h", "w"], ["y"], domain="custom", alpha=0.3, beta=2.0),
    ], "two_calls", [x, w], [y])
    save(folder, "two_calls", g, [lin_act()])

    # Nested: Outer calls LinAct and Inner; Inner imports opset "" itself.
    inner = fn("Inner", ["a"], ["r"], [node("Softplus", ["a"], ["r"])])
    outer = fn("Outer", ["a", "w"], ["r"], [
        node("LinAct", ["a", "w"], ["t"], domain="custom", alpha=0.2),
        node("Inner", ["t"], ["r"], domain="custom"),
    ], opsets=[h.make_opsetid("", 18), h.make_opsetid("custom", 1)])
    g = h.make_graph([node("Outer", ["x", "w"], ["y"], domain="custom")], "nested", [x, w], [y])
    save(folder, "nested", g, [lin_act(), inner, outer])

    # An omitted optional input (Clip's min) and an omitted second output.
    clip = fn("ClipBoth", ["v", "lo", "hi"], ["c", "d"], [
        node("Clip", ["v", "lo", "hi"], ["c"]), node("Neg", ["c"], ["d"]),
    ])
    hi = h.make_tensor_value_info("hi", F, [])
    g = h.make_graph([node("ClipBoth", ["x", "", "hi"], ["y", ""], domain="custom")],
                     "omitted", [x, hi], [y])
    save(folder, "omitted", g, [clip])

    # A function body with an If whose branches use the function's inputs by name.
    then_g = h.make_graph([node("Add", ["p", "q"], ["s"])], "then", [],
                          [h.make_tensor_value_info("s", F, [2, 3])])
    else_g = h.make_graph([node("Sub", ["p", "q"], ["s2"])], "else", [],
                          [h.make_tensor_value_info("s2", F, [2, 3])])
    sel = fn("Select", ["c", "p", "q"], ["o"], [
        node("If", ["c"], ["o"], then_branch=then_g, else_branch=else_g),
    ])
    c = h.make_tensor_value_info("c", TensorProto.BOOL, [])
    x2 = h.make_tensor_value_info("x2", F, [2, 3])
    g = h.make_graph([node("Select", ["c", "x", "x2"], ["y"], domain="custom")],
                     "body_subgraph", [c, x, x2], [y])
    save(folder, "body_subgraph", g, [sel])

    # A call inside an If branch of the main graph.
    then_g = h.make_graph([node("LinAct", ["x", "w"], ["u"], domain="custom", alpha=0.05)],
                          "then", [], [h.make_tensor_value_info("u", F, [2, 3])])
    else_g = h.make_graph([node("Relu", ["x"], ["v"])], "else", [],
                          [h.make_tensor_value_info("v", F, [2, 3])])
    g = h.make_graph([node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
                     "call_in_branch", [c, x, w], [y])
    save(folder, "call_in_branch", g, [lin_act()])


if __name__ == "__main__":
    main(sys.argv[1])
