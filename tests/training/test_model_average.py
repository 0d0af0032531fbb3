"""``asrkit model average``: the mean of the newest N checkpoints, as icefall's ``--avg``."""

import numpy as np

from asrkit.cli.main import main
from asrkit.models import Model, load
from asrkit.training.checkpoint import write_checkpoint

NET = {"layers": [{"type": "dense", "dim": 4},
                  {"type": "conformer", "dim": 4, "heads": 2, "ff_dim": 6, "kernel_size": 3}]}


def _checkpoints(out_dir, steps, seed=0):
    """Checkpoints of one model at ``steps``, each with its own random parameters."""
    model = Model(NET, 3, ["<blk>", "a", "b"])
    rng = np.random.default_rng(seed)
    written = {}
    for step in steps:
        params = {k: rng.standard_normal(v.shape).astype(np.float32)
                  for k, v in model.state_dict().items()}
        params.update({k: np.abs(v) + 0.5 for k, v in params.items() if "running_var" in k})
        header = {"config": {}, "model": model.header(), "step": step, "epoch": step,
                  "batch_index": 0, "optimizer_count": step, "skipped_steps": 0, "ranks": 1,
                  "bmuf_steps_in_block": 0, "schedule": {"newbob_scale": 1.0, "best_cv": None}}
        write_checkpoint(str(out_dir), step, header,
                         {f"param/{k}": v for k, v in params.items()}, keep=0)
        written[step] = params
    return written


def test_average_of_the_newest_checkpoints(tmp_path, capsys):
    written = _checkpoints(tmp_path / "exp", [5, 40, 100, 300])  # 300 sorts after 40 by step
    out = tmp_path / "avg.mdl"
    assert main(["model", "average", str(tmp_path / "exp"), str(out), "--avg", "3"]) == 0
    assert "ckpt-00000040.npz, ckpt-00000100.npz, ckpt-00000300.npz" in capsys.readouterr().out
    model = load(out)
    state = model.state_dict()
    assert sorted(state) == sorted(written[5])
    means = {name: np.mean([written[s][name].astype(np.float64) for s in (40, 100, 300)],
                           axis=0) for name in state}
    for name, value in state.items():
        np.testing.assert_allclose(value, means[name], rtol=1e-6, atol=1e-6)
    assert any(k.endswith("running_var") for k in state)  # statistics averaged too
    ref = Model(NET, 3, ["<blk>", "a", "b"],
                params={k: v.astype(np.float32) for k, v in means.items()})
    feats = np.random.default_rng(1).standard_normal((6, 2, 3)).astype(np.float32)
    y, _ = model(feats, np.array([6, 4]))
    np.testing.assert_allclose(y[:, 0], ref(feats, np.array([6, 4]))[0][:, 0], atol=1e-5)
    assert np.all(np.isfinite(y[:, 0]))


def test_average_errors_name_the_folder(tmp_path, capsys):
    _checkpoints(tmp_path / "exp", [1, 2])
    assert main(["model", "average", str(tmp_path / "exp"), str(tmp_path / "a.mdl"),
                 "--avg", "3"]) == 2
    err = capsys.readouterr().err
    assert "checkpoints: 2 checkpoints, --avg 3 needs 3" in err and "Traceback" not in err
    assert main(["model", "average", str(tmp_path / "none"), str(tmp_path / "a.mdl")]) == 2
    assert "0 checkpoints" in capsys.readouterr().err
    assert main(["model", "average", str(tmp_path / "exp"), str(tmp_path), "--avg", "1"]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert not (tmp_path / "a.mdl").exists()
