"""``asrkit model``: info, tokens.txt from a data dir, torch-named weights."""

import json

import numpy as np

from asrkit.cli.main import main
from asrkit.models import Model, save, to_torch_state_dict
from asrkit.training import TokenTable
from tests.training.datadirs import synthetic_dir


def test_model_info_tokens_and_torch_state(tmp_path, capsys):
    model = Model({"layers": [{"type": "lstm", "hidden": 4}]}, 3, ["<blk>", "a", "b"],
                  reader={"cmvn": "utterance", "norm_vars": True})
    save(tmp_path / "m.mdl", model)
    assert main(["model", "info", str(tmp_path / "m.mdl"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["num_classes"] == 3 and info["parameters"]["output.W"] == [4, 3]
    assert model.header()["reader"]["cmvn"] == "utterance"
    assert main(["model", "torch-state", str(tmp_path / "m.mdl"), str(tmp_path / "sd.npz")]) == 0
    with np.load(tmp_path / "sd.npz") as z:
        ref = to_torch_state_dict(model)
        assert sorted(z.files) == sorted(ref)
        np.testing.assert_array_equal(z["output.weight"], model.params["output.W"].value.T)
    data, _ = synthetic_dir(str(tmp_path / "d"), num_utts=4)
    assert main(["model", "tokens", data, str(tmp_path / "tokens.txt")]) == 0
    table = TokenTable.read(tmp_path / "tokens.txt")
    assert table.symbols[:2] == ["<blk>", "<space>"] and set(table.symbols[2:]) <= set("abcde")
    assert main(["model", "info", str(tmp_path / "missing.mdl")]) == 2
    assert "no such file" in capsys.readouterr().err
