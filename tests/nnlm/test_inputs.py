"""What a user hands the LSTM LM code is checked: model files (a declared 40 GB member, a
config asking for 10^12 parameters, NaN weights, an unread training state), every training
number, rescoring weights. Errors name the file or the option."""

import json

import numpy as np
import pytest

from asrkit.nnlm import LstmLM, LstmLMConfig, ModelFileError, TrainOptions, Vocabulary
from asrkit.nnlm.rescore import rescore_nbest
from tests.fuzz.npz_files import header_of, npy_header, read_members, with_header, write_members

HUGE = npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000), }",
                  b"\0" * 64)


@pytest.fixture(scope="module")
def lm_file(tmp_path_factory):
    voc = Vocabulary(["<unk>", "<s>", "</s>", "a", "b"])
    lm = LstmLM.create(voc, embed_dim=3, hidden_dim=4, seed=1)
    path = tmp_path_factory.mktemp("nnlm") / "lm.npz"
    lm.save(path)
    return path, lm


def _edit(path, tmp_path, edit):
    members = read_members(path)
    out = tmp_path / "bad.npz"
    write_members(out, edit(members))
    return out


def _config(**changes):
    def edit(members):
        h = header_of(members)
        h["config"].update(changes)
        return with_header(members, h)
    return edit


@pytest.mark.parametrize("edit,match", [
    (lambda m: {**m, "output.W": HUGE}, r"member 'output.W': header declares shape "
                                         r"\[100000, 100000\]"),
    (_config(vocab_size=10**12), "parameters need .* more than this machine's"),
    (_config(hidden_dim="4"), "hidden_dim must be a positive integer"),
    (_config(num_layers=10**9), "num_layers must be at most 128"),
    (_config(dropout=float("nan")), "dropout must be in"),
    (lambda m: with_header(m, "[1, 2]"), "corrupt header: not a JSON object"),
    (lambda m: with_header(m, {**header_of(m), "vocab": "abc"}), "'vocab' must be a list"),
    (lambda m: with_header(m, {**header_of(m), "version": "1"}), "format version '1'"),
], ids=["declared-40GB", "vocab-1e12", "hidden-a-string", "layers-1e9", "dropout-nan",
        "header-a-list", "vocab-a-string", "version-a-string"])
def test_a_bad_model_file_names_the_file(lm_file, tmp_path, edit, match):
    bad = _edit(lm_file[0], tmp_path, edit)
    with pytest.raises(ModelFileError, match=f"{bad}: .*{match}"):
        LstmLM.load(bad)


def test_nan_weights_are_refused_and_training_state_is_never_read(lm_file, tmp_path):
    path, lm = lm_file
    from tests.fuzz.npz_files import npy_bytes

    w = lm.network.values()["output.b"].copy()
    w[1] = np.nan
    bad = _edit(path, tmp_path, lambda m: {**m, "output.b": npy_bytes(w)})
    with pytest.raises(ModelFileError, match="parameters hold NaN or inf: output.b"):
        LstmLM.load(bad)
    extra = _edit(path, tmp_path, lambda m: {**m, "optimizer/slot0": HUGE})
    assert LstmLM.load(extra).score("a b") == lm.score("a b")


@pytest.mark.parametrize("option,value,match", [
    ("lr", float("nan"), "lr must be > 0, got nan"), ("lr", -1.0, "lr must be > 0"),
    ("clip_norm", float("inf"), "clip_norm must be >= 0"),
    ("momentum", 1.0, "momentum must be below 1"),
    ("weight_decay", -0.1, "weight_decay must be >= 0"),
    ("start_halving", float("nan"), "start_halving must be a finite number"),
    ("seed", -1, "seed must be >= 0"), ("max_tokens", -5, "max_tokens must be >= 0"),
])
def test_every_training_number_is_checked(option, value, match):
    with pytest.raises(ValueError, match=match):
        TrainOptions(**{option: value})


def test_sizes_are_checked_before_anything_is_allocated():
    with pytest.raises(ValueError, match=r"hidden_dim 1000000000.* more than this machine's"):
        LstmLMConfig(vocab_size=10, hidden_dim=10**9)
    assert LstmLMConfig(vocab_size=10, embed_dim=3, hidden_dim=4).parameter_count() == (
        10 * 3 + 4 * 4 * (3 + 4) + 8 * 4 + 4 * 10 + 10)


def test_rescoring_weights_must_be_finite(lm_file):
    _, lm = lm_file
    nbest = {"u": [("a b", 1.0, 2.0)]}
    for kw in ({"lm_weight": float("nan")}, {"acoustic_scale": float("inf")}):
        with pytest.raises(ValueError, match="must be a finite number"):
            rescore_nbest(nbest, lm, **kw)
    assert json.dumps(rescore_nbest(nbest, lm)["u"][0].as_dict())
