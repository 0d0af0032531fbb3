"""TOML feature configs: the shipped ones load, and every mistake names the file and key."""

import pathlib

import pytest

from asrkit.features import default_options
from asrkit.io import ConfigError, load_feature_config

CONF = pathlib.Path(__file__).resolve().parents[2] / "data" / "conf"


@pytest.mark.parametrize("name,kind", [("fbank.toml", "fbank"), ("mfcc.toml", "mfcc")])
def test_shipped_configs(name, kind):
    cfg = load_feature_config(CONF / name)
    assert cfg.kind == kind and cfg.cmvn == "speaker"
    assert set(cfg.options) <= set(default_options(kind))
    assert cfg.sample_frequency == 16000
    if kind == "fbank":
        assert cfg.options["num_mel_bins"] == 80


def _write(tmp_path, text):
    path = tmp_path / "c.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text,message", [
    ('[features]\ntype = "fbank"\nnum_mel_bin = 40\n',
     r"c\.toml: \[features\] unknown fbank option 'num_mel_bin' \(did you mean 'num_mel_bins'\?\)"),
    ('[features]\ntype = "fbank"\nnum_ceps = 13\n', r"unknown fbank option 'num_ceps'"),
    ('[features]\ntype = "fbank"\nuse_energy = 1\n', r"use_energy = 1 must be true or false"),
    ('[features]\ntype = "fbank"\nnum_mel_bins = 40.5\n', r"num_mel_bins = 40\.5 must be an int"),
    ('[features]\ntype = "plp"\n', r"c\.toml: \[features\] type: unknown feature kind 'plp'"),
    ('[features]\nnum_mel_bins = 40\n', r"c\.toml: \[features\] has no 'type'"),
    ('[cmvn]\nmode = "speaker"\n', r"c\.toml: no \[features\] table"),
    ('[features]\ntype = "fbank"\n[cmvn]\nmode = "per-speaker"\n', r"\[cmvn\] mode must be one of"),
    ('[features]\ntype = "fbank"\n[cmvn]\nnorm_vars = true\n', r"\[cmvn\] unknown key 'norm_vars'"),
    ('[features]\ntype = "fbank"\n[audio]\nchannel = -1\n', r"\[audio\] channel must be"),
    ('[feature]\ntype = "fbank"\n', r"unknown table \[feature\] \(did you mean 'features'\?\)"),
    ('[features]\ntype = "fbank"\nnum_mel_bins = \n', r"c\.toml: .*line 3"),
])
def test_config_errors_name_file_and_key(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_feature_config(_write(tmp_path, text))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.toml: no such file"):
        load_feature_config(tmp_path / "nope.toml")


def test_round_trip_and_fingerprint(tmp_path):
    cfg = load_feature_config(_write(
        tmp_path, '[features]\ntype = "mfcc"\nnum_ceps = 20\nwindow_type = "hamming"\n'
                  '[cmvn]\nmode = "global"\n[audio]\nchannel = 1\nresample = true\n'))
    assert (cfg.kind, cfg.cmvn, cfg.channel, cfg.resample) == ("mfcc", "global", 1, True)
    again = load_feature_config(_write(tmp_path, cfg.to_toml()))
    assert again.options == cfg.options and again.fingerprint() == cfg.fingerprint()
    other = load_feature_config(_write(tmp_path, '[features]\ntype = "mfcc"\nnum_ceps = 21\n'))
    assert other.fingerprint() != cfg.fingerprint()
