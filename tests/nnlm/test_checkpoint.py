"""Model files: exact round trip, one atomic file, clear errors."""

import json
import zipfile

import numpy as np
import pytest

from asrkit.nnlm import LstmLM, ModelFileError, Vocabulary


@pytest.mark.parametrize("tied", [False, True])
def test_model_file_round_trips_exactly(tmp_path, tied):
    voc = Vocabulary(["<unk>", "<s>", "</s>", "a", "b", "c"])
    lm = LstmLM.create(voc, embed_dim=3, hidden_dim=5, num_layers=2, tie_embeddings=tied,
                       dropout=0.1, seed=11)
    lm.history = [{"epoch": 1, "lr": 0.1, "valid_ppl": 3.5, "accepted": True}]
    path = tmp_path / "m.npz"
    lm.save(path)
    back = LstmLM.load(path)
    assert back.config == lm.config and back.vocabulary == lm.vocabulary
    assert back.history == lm.history
    assert back.network.values().keys() == lm.network.values().keys()
    for k, v in lm.network.values().items():
        w = back.network.values()[k]
        assert w.dtype == v.dtype
        np.testing.assert_array_equal(w, v, err_msg=k)
    assert back.score("a b c") == lm.score("a b c")
    assert [p.name for p in back.network.cost.parameters] == list(back.network.parameters)
    # one plain npz with a JSON header; no temporary files left behind
    with zipfile.ZipFile(path) as z:
        assert "__header__.npy" in z.namelist()
    header = json.loads(np.load(path)["__header__"].tobytes())
    assert header["format"] == "asrkit-lstm-lm" and header["vocab"] == voc.words
    assert [p.name for p in tmp_path.iterdir()] == ["m.npz"]


def test_bad_model_files_name_the_file(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_text("not a model\n")
    with pytest.raises(ModelFileError, match="bad.npz"):
        LstmLM.load(bad)
    other = tmp_path / "other.npz"
    np.savez(other, x=np.zeros(3))
    with pytest.raises(ModelFileError, match="other.npz.*no __header__"):
        LstmLM.load(other)
    with pytest.raises(ModelFileError, match="no such file"):
        LstmLM.load(tmp_path / "missing.npz")
    lm = LstmLM.create(Vocabulary(["<unk>", "<s>", "</s>", "a"]), 2, 2)
    lm.save(tmp_path / "ok.npz")
    z = dict(np.load(tmp_path / "ok.npz"))
    z["output.W"] = np.zeros((3, 3), np.float32)
    np.savez(tmp_path / "shape.npz", **z)
    with pytest.raises(ModelFileError, match="shape.npz.*output.W"):
        LstmLM.load(tmp_path / "shape.npz")
