"""``asrkit model plot``: the op graph of a model file as .dot, or rendered when graphviz is
installed; a missing graphviz gives the .dot and how to render it, never an error."""

import json
import shutil

import pytest

from asrkit.cli.main import main
from asrkit.models import Model, save


@pytest.fixture()
def model_file(tmp_path):
    net = {"seed": 0, "layers": [{"type": "blstm", "hidden": 8, "num_layers": 2}]}
    path = tmp_path / "final.mdl"
    save(str(path), Model(net, 10, ["<blk>", "a", "b"]))
    return path


def test_plot_writes_dot_with_every_parameter_and_the_ctc(model_file, tmp_path, capsys):
    out = tmp_path / "net.dot"
    assert main(["model", "plot", str(model_file), "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    src = out.read_text()
    model = Model({"seed": 0, "layers": [{"type": "blstm", "hidden": 8, "num_layers": 2}]}, 10,
                  ["<blk>", "a", "b"])
    for name in model.params:
        assert f'"{name}\\nparameter' in src, name
    assert "ctc_loss" in src and 'subgraph "cluster_layers.0"' in src
    assert main(["model", "plot", str(model_file), "-o", str(out), "--ops",
                 "--no-criterion"]) == 0
    flat = out.read_text()
    assert "subgraph" not in flat and "ctc_loss" not in flat and "output.W" in flat


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz is not installed")
def test_plot_renders_svg_and_png(model_file, tmp_path, capsys):
    for ext, magic in (("svg", b"<svg"), ("png", b"\x89PNG")):
        out = tmp_path / f"net.{ext}"
        assert main(["model", "plot", str(model_file), "-o", str(out), "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == {"path": str(out), "rendered": True}
        assert magic in out.read_bytes()[:400]


def test_plot_without_graphviz_writes_dot_and_says_how_to_render(model_file, tmp_path, capsys,
                                                                 monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    out = tmp_path / "net.svg"
    assert main(["model", "plot", str(model_file), "-o", str(out)]) == 0
    msg = capsys.readouterr().out
    assert not out.exists() and (tmp_path / "net.dot").read_text().startswith("digraph")
    assert f"dot -Tsvg {tmp_path / 'net.dot'} -o {out}" in msg
    assert main(["model", "plot", str(model_file), "-o", str(tmp_path / "x.bmp")]) == 2
    assert "unknown picture type" in capsys.readouterr().err


def test_report_shows_the_op_graph(model_file, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", str(tmp_path), "--out", str(out)]) == 0
    page = out.read_text()
    network = page.split("<h2>Network</h2>", 1)[1]
    if shutil.which("dot"):
        assert network.lstrip().startswith("<svg")
    assert "layers.0.weight_ih_l1_reverse" in network and "ctc_loss" in network
