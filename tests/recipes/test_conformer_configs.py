"""Every recipe's Conformer config (CTC and transducer) parses, builds its network at the
recipe's feature and token sizes, and runs a short batch; each says how to run it."""

import glob
import os

import numpy as np
import pytest

from asrkit.io import load_feature_config
from asrkit.training import load_train_config
from asrkit.training.criteria import build_model

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "recipes")
# tokens the recipe's lang stage makes: digits 11 words + blank; LibriSpeech's 500 pieces
# (<blk> and <unk> included); sentences' 39 phones + blank (CTC) or about 26 letters, the
# apostrophe and <space> + blank (transducer, asrkit model tokens --unit char)
TOKENS = {"digits": 12, "librispeech": 500, "sentences": {"ctc": 40, "transducer": 29}}
FEATURES = {"digits": "mfcc.toml", "librispeech": "fbank.toml", "sentences": "fbank.toml"}
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "*", "conf", "conformer_*.toml")))


def test_each_recipe_has_both_conformer_configs():
    names = {os.path.relpath(p, ROOT) for p in CONFIGS}
    for recipe in ("digits", "librispeech", "sentences"):
        assert {f"{recipe}/conf/conformer_ctc.toml",
                f"{recipe}/conf/conformer_transducer.toml"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: os.path.relpath(p, ROOT))
def test_the_config_builds_and_runs(path):
    recipe = os.path.relpath(path, ROOT).split(os.sep)[0]
    text = open(path, encoding="utf-8").read()
    assert "asrkit train conf/" in text, "the comment says how to run it"
    conf = load_train_config(path)
    fconf = load_feature_config(os.path.join(os.path.dirname(path), FEATURES[recipe]))
    dim = int(fconf.options.get("num_ceps" if fconf.kind == "mfcc" else "num_mel_bins"))
    n = TOKENS[recipe]
    n = n[conf.criterion.type] if isinstance(n, dict) else n
    tokens = ["<blk>"] + [f"t{i}" for i in range(1, n)]
    model = build_model(conf.criterion, conf.network, dim, tokens, 0)
    feats = np.random.default_rng(0).standard_normal((64, 1, dim)).astype(np.float32)
    if conf.criterion.type == "transducer":
        out, lengths = model.encode(feats)
        assert out.shape[2] == conf.criterion.joiner_dim
    else:
        out, lengths = model(feats)
        assert out.shape[2] == n
    assert lengths[0] == 15  # x4 Conv2d subsampling: ((64 - 1) // 2 - 1) // 2
    if recipe == "librispeech":  # icefall's sizes
        layer = conf.network["layers"][1]
        assert (layer["dim"], layer["heads"], layer["ff_dim"], layer["num_layers"]) == (
            512, 8, 2048, 12)
