"""The op graph as graphviz dot: names, op types, shapes, styles, layer clusters, rendering."""

import re
import shutil
import subprocess

import numpy as np
import pytest

import asrkit.ops as O
from asrkit.graph import input_variable, to_dot, write_picture
from asrkit.layers import BLSTM, Dense, Sequential


def _blstm_ctc():
    x = input_variable(6, name="features")
    y = input_variable((), dtype=np.int32, dynamic_axes=("labels", "batch"), name="labels")
    logits = Sequential([BLSTM(8), Dense(4)])(x)
    return O.ctc_loss(logits, y)


def _check_structure(src: str) -> tuple[dict, list]:
    """A small dot reader: node id -> attribute text, and the edges; asserts what it reads."""
    assert src.startswith("digraph ") and src.rstrip().endswith("}")
    assert src.count("{") == src.count("}")
    nodes = dict(re.findall(r"^\s*(n\d+) \[(.*)\];$", src, re.M))
    edges = re.findall(r"^\s*(n\d+) -> (n\d+);$", src, re.M)
    assert edges and all(a in nodes and b in nodes for a, b in edges)
    return nodes, edges


def test_blstm_ctc_dot_names_every_parameter_the_ops_and_their_shapes():
    loss = _blstm_ctc()
    src = to_dot(loss)
    nodes, edges = _check_structure(src)
    labels = {k: re.search(r'label="((?:[^"\\]|\\.)*)"', v).group(1) for k, v in nodes.items()}
    for p in loss.parameters:
        assert p.name and any(lab.startswith(p.name + "\\n") for lab in labels.values()), p.name
    assert any("ctc_loss" in lab for lab in labels.values())
    assert "features\\ninput\\n[*, *, 6]" in labels.values()
    assert "labels\\ninput\\n[*, *] int32" in labels.values()
    assert "blstm.l0\\nblstm\\n[*, *, 16]" in labels.values()
    # styles: parameters, inputs and ops each look different; the output has a double border
    param = next(v for k, v in nodes.items() if labels[k].startswith("dense.W"))
    feats = next(v for k, v in nodes.items() if labels[k].startswith("features"))
    ctc = next(v for k, v in nodes.items() if "ctc_loss" in labels[k])
    assert "fillcolor" in param and "ellipse" in feats and param != feats
    assert "peripheries=2" in ctc and "dynamic axes: batch" in ctc
    assert len(edges) == sum(len(n.inputs) for n in [loss] + _functions(loss))


def _functions(root):
    from asrkit.graph.topo import topological_order

    return [n for n in topological_order([root]) if n.inputs and n is not root]


def test_layers_become_clusters_and_unnamed_ops_join_their_layer():
    src = to_dot(_blstm_ctc())
    assert 'subgraph "cluster_blstm"' in src and 'subgraph "cluster_dense"' in src
    dense = src.split('subgraph "cluster_dense" {')[1].split("}")[0]
    assert "times" in dense and "add" in dense and "dense.b" in dense  # unnamed ops of Dense
    top = src.split("subgraph")[0]
    assert "ctc_loss" in top and "labels" in top  # the criterion is not in a layer
    flat = to_dot(_blstm_ctc(), clusters=False, constants=False)
    assert "subgraph" not in flat and "constant" not in flat
    _check_structure(flat)


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz is not installed")
def test_graphviz_parses_and_renders_it(tmp_path):
    src = to_dot(_blstm_ctc(), title='a "quoted" title')
    subprocess.run(["dot", "-Tcanon"], input=src.encode(), check=True, capture_output=True)
    out = write_picture(src, str(tmp_path / "net.svg"))
    assert out == str(tmp_path / "net.svg")
    svg = (tmp_path / "net.svg").read_text()
    assert "<svg" in svg and "ctc_loss" in svg and "blstm.weight_hh_l0_reverse" in svg


def test_without_graphviz_the_dot_text_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    src = to_dot(_blstm_ctc())
    out = write_picture(src, str(tmp_path / "net.png"))
    assert out == str(tmp_path / "net.dot")
    assert (tmp_path / "net.dot").read_text() == src and not (tmp_path / "net.png").exists()
    with pytest.raises(ValueError, match="net.jpeg: unknown picture type"):
        write_picture(src, str(tmp_path / "net.jpeg"))
