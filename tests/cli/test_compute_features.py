"""asrkit compute-features end to end on a synthesised data dir: wav, flac, a pipe, a corrupt
and an empty file."""

import glob
import json
import os

import numpy as np
import pytest
import soundfile as sf

from asrkit.cli.main import main
from asrkit.features import fbank
from asrkit.io import load_audio, read_script, read_table_dict, validate_data_dir
from asrkit.io.kaldi_tables import kaldi_io
from tests.io.synth import make_corpus, tone, write_kaldi_files

OPTIONS = {"num_mel_bins": 23, "dither": 0.0}
CONFIG = '[features]\ntype = "fbank"\nnum_mel_bins = 23\ndither = 0.0\n'
BAD = {"bob-corrupt", "carol-empty"}


@pytest.fixture
def corpus(tmp_path, rng):
    data, samples = make_corpus(str(tmp_path), rng)
    conf = tmp_path / "fbank.toml"
    conf.write_text(CONFIG)
    return data, samples, str(conf)


def _run(capsys, *argv):
    rc = main(["compute-features", *argv, "--json"])
    captured = capsys.readouterr()
    summary = json.loads(captured.out) if captured.out.strip() else None
    return rc, summary, captured.err


def _feats(out):
    return dict(kaldi_io().read_mat_scp(os.path.join(out, "feats.scp")))


def test_end_to_end(corpus, tmp_path, capsys):
    data, samples, conf = corpus
    out = str(tmp_path / "fbank")
    rc, s, _ = _run(capsys, data, "--config", conf, "--out", out, "--max-fail-fraction", "0.5")
    assert rc == 0 and s["success"]
    assert s["num_utterances"] == 7 and s["num_done"] == 5 and s["num_failed"] == 2
    assert {f["utt"] for f in s["failures"]} == BAD
    assert all(f["source"].endswith(("corrupt.wav", "empty.wav")) for f in s["failures"])

    feats = _feats(out)  # read back by Kaldi's own layout, through kaldi-io
    assert sorted(feats) == sorted(samples)
    for utt, x in samples.items():
        np.testing.assert_allclose(feats[utt], fbank(x.astype(np.float32), **OPTIONS),
                                   rtol=1e-6, atol=1e-5)
    assert os.path.basename(read_script(os.path.join(out, "feats.scp"))[0][1]).startswith(
        "raw_fbank_train.1.ark:")

    # per-speaker CMVN stats as compute-cmvn-stats writes them: double [2, D+1]
    cmvn = dict(kaldi_io().read_mat_scp(os.path.join(out, "cmvn.scp")))
    assert sorted(cmvn) == ["alice", "bob", "carol"]
    for spk, stats in cmvn.items():
        rows = np.concatenate([feats[u] for u in sorted(feats) if u.startswith(spk)])
        assert stats.dtype == np.float64 and stats.shape == (2, 24)
        # Kaldi's AccCmvnStats: float32 features and products, summed in double
        np.testing.assert_allclose(stats[0, :23], rows.sum(axis=0, dtype=np.float64), rtol=1e-9)
        np.testing.assert_allclose(stats[1, :23], (rows * rows).sum(axis=0, dtype=np.float64),
                                   rtol=1e-9)
        assert stats[0, 23] == rows.shape[0] and stats[1, 23] == 0
    with open(os.path.join(out, "cmvn_train.ark"), "rb") as f:
        assert b"alice \0BDM " in f.read()

    frames = dict(line.split() for line in open(os.path.join(out, "utt2num_frames")))
    assert {u: int(n) for u, n in frames.items()} == {u: m.shape[0] for u, m in feats.items()}
    # OUT is a complete Kaldi data dir without the failed utterances
    assert validate_data_dir(out) == []
    utt2spk = dict(line.split() for line in open(os.path.join(out, "utt2spk")))
    assert BAD.isdisjoint(utt2spk) and len(utt2spk) == 5
    assert not glob.glob(os.path.join(out, "*.tmp")) and not glob.glob(os.path.join(out, ".*"))


def test_matches_kaldi_native_fbank(corpus, tmp_path, capsys):
    knf = pytest.importorskip("kaldi_native_fbank")
    data, samples, conf = corpus
    out = str(tmp_path / "fbank")
    assert _run(capsys, data, "--config", conf, "--out", out, "--max-fail-fraction", "0.5")[0] == 0
    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0.0
    opts.mel_opts.num_bins = 23
    feats = _feats(out)
    for utt in ("alice-2", "bob-flac"):
        computer = knf.OnlineFbank(opts)
        computer.accept_waveform(16000, samples[utt].astype(np.float32).tolist())
        computer.input_finished()
        ref = np.stack([computer.get_frame(i) for i in range(computer.num_frames_ready)])
        assert feats[utt].shape == ref.shape
        np.testing.assert_allclose(feats[utt], ref, rtol=1e-3, atol=2e-3)


def test_rerun_skips_done_parts_and_redoes_changed_audio(corpus, tmp_path, capsys):
    data, samples, conf = corpus
    out = str(tmp_path / "fbank")
    args = [data, "--config", conf, "--out", out, "--max-fail-fraction", "0.5", "--jobs", "2"]
    rc, first, _ = _run(capsys, *args)
    assert rc == 0 and first["parts_computed"] == [1, 2]
    arks = sorted(glob.glob(os.path.join(out, "raw_fbank_train.*.ark")))
    assert [os.path.basename(a) for a in arks] == ["raw_fbank_train.1.ark",
                                                   "raw_fbank_train.2.ark"]
    stamps = [os.stat(a).st_mtime_ns for a in arks]
    feats = _feats(out)

    rc, again, _ = _run(capsys, *args)
    assert rc == 0 and again["parts_skipped"] == [1, 2] and again["parts_computed"] == []
    assert again["num_failed"] == 2  # failures of skipped parts are still reported
    assert [os.stat(a).st_mtime_ns for a in arks] == stamps
    assert _feats(out).keys() == feats.keys()

    # rewriting one audio file invalidates only the part holding it
    path = data.replace("data/train", "audio/bob-1.wav")
    sf.write(path, samples["bob-1"][::-1].copy(), 16000, subtype="PCM_16")
    rc, third, _ = _run(capsys, *args)
    part_of_bob = 1 if "bob-1" in open(arks[0].replace(".ark", ".scp")).read() else 2
    assert third["parts_computed"] == [part_of_bob]
    np.testing.assert_allclose(_feats(out)["bob-1"],
                               fbank(samples["bob-1"][::-1].astype(np.float32), **OPTIONS),
                               rtol=1e-6, atol=1e-5)


def test_jobs_2_equals_jobs_1(corpus, tmp_path, capsys):
    data, _, conf = corpus
    common = ["--config", conf, "--max-fail-fraction", "0.5"]
    assert _run(capsys, data, *common, "--out", str(tmp_path / "j1"))[0] == 0
    assert _run(capsys, data, *common, "--out", str(tmp_path / "j2"), "--jobs", "2")[0] == 0
    one, two = _feats(str(tmp_path / "j1")), _feats(str(tmp_path / "j2"))
    assert one.keys() == two.keys()
    for utt in one:
        np.testing.assert_array_equal(one[utt], two[utt])
    for name in ("cmvn.scp", "utt2num_frames", "utt2spk", "spk2utt", "wav.scp"):
        if name == "cmvn.scp":
            a = read_table_dict(f"scp:{tmp_path / 'j1' / name}")
            b = read_table_dict(f"scp:{tmp_path / 'j2' / name}")
            assert all(np.allclose(a[k], b[k], rtol=1e-12) for k in a) and a.keys() == b.keys()
        else:
            assert (tmp_path / "j1" / name).read_text() == (tmp_path / "j2" / name).read_text()
    scp = [line.split()[0] for line in open(tmp_path / "j2" / "feats.scp")]
    assert scp == sorted(scp)


def test_too_many_failures_exit_1(corpus, tmp_path, capsys):
    data, _, conf = corpus
    out = tmp_path / "fbank"
    rc = main(["compute-features", data, "--config", conf, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "'bob-corrupt'" in err and "'carol-empty'" in err and "FAILED" in err
    assert not (out / "feats.scp").exists()


def test_bad_config_and_bad_data_dir_are_named(corpus, tmp_path, capsys):
    data, _, _ = corpus
    conf = tmp_path / "typo.toml"
    conf.write_text('[features]\ntype = "fbank"\nnum_mel_bin = 40\n')
    rc = main(["compute-features", data, "--config", str(conf), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and f"{conf}: [features] unknown fbank option 'num_mel_bin'" in err
    with open(os.path.join(data, "utt2spk"), "a") as f:
        f.write("zed-1 zed\n")
    rc = main(["compute-features", data, "--config", str(tmp_path / "fbank.toml"), "--out",
               str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and f"{data}/utt2spk:8: utterance id 'zed-1' has no line in wav.scp" in err


def test_crash_leaves_no_partial_archive(corpus, tmp_path, capsys, monkeypatch):
    import asrkit.features.kaldi as kaldi

    data, _, conf = corpus
    out = tmp_path / "fbank"
    real, calls = kaldi.compute, []

    def crash_on_third(*a, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("simulated crash")
        return real(*a, **kw)

    monkeypatch.setattr(kaldi, "compute", crash_on_third)
    rc = main(["compute-features", data, "--config", conf, "--out", str(out),
               "--max-fail-fraction", "0.5"])
    assert rc == 2 and "simulated crash" in capsys.readouterr().err
    assert sorted(os.listdir(out)) == []
    monkeypatch.setattr(kaldi, "compute", real)
    rc, s, _ = _run(capsys, data, "--config", conf, "--out", str(out), "--max-fail-fraction",
                    "0.5")
    assert rc == 0 and s["parts_computed"] == [1]


def test_segments_resampling_and_cmvn_modes(tmp_path, rng, capsys):
    x = tone(8000, rng, rate=8000)
    sf.write(tmp_path / "rec.flac", x, 8000, subtype="PCM_16")
    segs = {"s-1": "rec 0.1 0.4", "s-2": "rec 0.5 -1"}
    data = str(tmp_path / "data")
    write_kaldi_files(data, {"wav.scp": {"rec": str(tmp_path / "rec.flac")}, "segments": segs,
                             "utt2spk": {u: "s" for u in segs}})
    conf = tmp_path / "c.toml"
    conf.write_text(CONFIG + '[cmvn]\nmode = "global"\n')
    rc, s, _ = _run(capsys, data, "--config", str(conf), "--out", str(tmp_path / "no"),
                    "--max-fail-fraction", "1")
    assert rc == 1 and s["num_failed"] == 2
    assert "sample rate 8000 Hz but the config expects 16000 Hz" in s["failures"][0]["error"]

    conf.write_text(CONFIG + '[cmvn]\nmode = "global"\n[audio]\nresample = true\n')
    out = tmp_path / "yes"
    rc, s, _ = _run(capsys, data, "--config", str(conf), "--out", str(out))
    assert rc == 0 and s["num_failed"] == 0
    whole, _ = load_audio(str(tmp_path / "rec.flac"), sample_rate=16000, scale="int16")
    feats = _feats(str(out))
    np.testing.assert_allclose(feats["s-1"], fbank(whole[1600:6400], **OPTIONS), rtol=1e-6,
                               atol=1e-5)
    np.testing.assert_allclose(feats["s-2"], fbank(whole[8000:], **OPTIONS), rtol=1e-6,
                               atol=1e-5)
    with open(out / "global_cmvn.stats", "rb") as f:
        stats = kaldi_io().read_mat(f)
    assert stats[0, -1] == feats["s-1"].shape[0] + feats["s-2"].shape[0]
    assert not (out / "cmvn.scp").exists()
    assert (out / "segments").read_text().splitlines() == ["s-1 rec 0.1 0.4", "s-2 rec 0.5 -1"]

    conf.write_text(CONFIG + '[cmvn]\nmode = "utterance"\n[audio]\nresample = true\n')
    rc, s, _ = _run(capsys, data, "--config", str(conf), "--out", str(out))
    assert rc == 0 and s["parts_skipped"] == [1]  # cmvn mode does not change the features
    per_utt = read_table_dict(f"scp:{out / 'cmvn_utt.scp'}")
    assert per_utt.keys() == {"s-1", "s-2"} and not (out / "global_cmvn.stats").exists()
    assert per_utt["s-2"][0, -1] == feats["s-2"].shape[0]
