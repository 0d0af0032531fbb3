"""Model files: graph + parameters in one file, loaded without the code that built them."""

import zlib

import numpy as np
import pytest

from asrkit.graph import GraphError, Sequence, load_model, save_model
from tests.graph._cases import CASES


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_case_round_trips_through_a_model_file(name, tmp_path):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    node, feeds, opts = CASES[name](rng)
    path = tmp_path / "model.npz"
    save_model(path, {"out": node}, metadata={"case": name})
    model = load_model(path)
    assert model.metadata == {"case": name}
    by_name = {k.name: v for k, v in feeds.items()}
    train = opts.get("train", False)
    want = node.eval(feeds, train=train)
    got = model["out"].eval(by_name, train=train)
    if isinstance(want, Sequence):
        np.testing.assert_array_equal(got.lengths, want.lengths)
        want, got = want.data, got.data
    np.testing.assert_array_equal(got, want)
    assert [p.name for p in model.parameters] == [p.name for p in node.parameters]


def test_loading_a_bad_file_names_it(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(GraphError, match="bad.npz: not an asrkit model file"):
        load_model(bad)
