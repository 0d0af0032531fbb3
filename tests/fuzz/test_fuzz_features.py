"""Feature configs and ``asrkit compute-features`` arguments on bad input, in child processes.

Seeded text and byte mutations of a TOML feature config (non-UTF-8 bytes included), numbers
that are not numbers or absurd (NaN, inf, negative, huge), and paths that are directories or
files where the other is expected. Each run ends cleanly, naming the config file and key or the
path at fault.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.fuzz.harness import assert_clean_failure, assert_clean_outcome, mutations, run_cli
from tests.io.synth import tone, write_kaldi_files

CONFIG = (b'[features]\ntype = "fbank"\nnum_mel_bins = 23\nframe_length = 25.0\n'
          b'frame_shift = 10.0\ndither = 0.0\nlow_freq = 20.0\n\n[cmvn]\nmode = "speaker"\n\n'
          b'[audio]\nresample = false\n')


@pytest.fixture
def data(tmp_path):
    import soundfile as sf

    sf.write(tmp_path / "a.wav", tone(4000, np.random.default_rng(0)), 16000, subtype="PCM_16")
    d = tmp_path / "data"
    write_kaldi_files(str(d), {"wav.scp": {"s-1": str(tmp_path / "a.wav")},
                               "utt2spk": {"s-1": "s"}})
    return d


def _compute(data, conf, out, *extra):
    return run_cli(["compute-features", str(data), "--config", str(conf), "--out", str(out),
                    *extra], timeout=180)  # room for a numba recompile on a loaded machine


def _check(data, tmp_path, seed):
    conf = tmp_path / "c.toml"
    conf.write_bytes(mutations(CONFIG, seed=seed, count=1)[0])
    res = _compute(data, conf, tmp_path / "out")
    assert_clean_outcome(res, names=[str(conf)])


@pytest.mark.parametrize("seed", range(4))
def test_mutated_configs(data, tmp_path, seed):
    _check(data, tmp_path, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4, 40))
def test_mutated_configs_long(data, tmp_path, seed):
    _check(data, tmp_path, seed)


@pytest.mark.parametrize("line", [
    "frame_length = nan", "frame_shift = inf", "frame_shift = 0.0", "frame_length = -25.0",
    "frame_length = 1e12", "num_mel_bins = 0", "num_mel_bins = 100000000",
    "sample_frequency = 0.0", "low_freq = 1e9", "dither = -1.0",
])
def test_bad_numbers_are_named(data, tmp_path, line):
    conf = tmp_path / "c.toml"
    conf.write_text(f'[features]\ntype = "fbank"\n{line}\n')
    res = _compute(data, conf, tmp_path / "out")
    assert_clean_failure(res, names=[str(conf)])
    assert line.split()[0] in res.stderr, res.describe()


def test_non_utf8_config(data, tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_bytes(CONFIG.replace(b'"fbank"', b'"fb\xe9nk"'))
    assert_clean_failure(_compute(data, conf, tmp_path / "out"), names=[str(conf)])


def test_paths_of_the_wrong_kind(data, tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_bytes(CONFIG)
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "a_dir").mkdir()
    cases = [
        (data, tmp_path / "a_dir", tmp_path / "o1", ()),             # config is a directory
        (data, conf, tmp_path / "a_file", ()),                       # out is a file
        (data, conf, tmp_path / "a_file" / "sub", ()),               # out below a file
        (tmp_path / "a_file", conf, tmp_path / "o2", ()),            # data dir is a file
        (tmp_path / "nope", conf, tmp_path / "o3", ()),              # data dir is missing
        (data, conf, tmp_path / "o4", ("--name", "../escape")),     # name is not a file name
        (data, conf, tmp_path / "o5", ("--jobs", "0")),
        (data, conf, tmp_path / "o6", ("--max-fail-fraction", "nan")),
    ]
    for d, c, out, extra in cases:
        res = _compute(d, c, out, *extra)
        assert_clean_failure(res)
    assert not (tmp_path / "escape").exists()
