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

    # rewriting one audio file invalidates only the part holding it; the recomputed part goes
    # to its other name, so the published output stays whole until the new one replaces it
    part_of_bob = 1 if "bob-1" in open(arks[0].replace(".ark", ".scp")).read() else 2
    path = data.replace("data/train", "audio/bob-1.wav")
    sf.write(path, samples["bob-1"][::-1].copy(), 16000, subtype="PCM_16")
    rc, third, _ = _run(capsys, *args)
    assert third["parts_computed"] == [part_of_bob]
    np.testing.assert_allclose(_feats(out)["bob-1"],
                               fbank(samples["bob-1"][::-1].astype(np.float32), **OPTIONS),
                               rtol=1e-6, atol=1e-5)
    names = sorted(os.path.basename(a) for a in glob.glob(os.path.join(out, "raw_*.ark")))
    assert names == sorted([f"raw_fbank_train.{part_of_bob}.alt.ark",
                            f"raw_fbank_train.{3 - part_of_bob}.ark"])
    np.testing.assert_array_equal(_feats(out)["alice-1"], feats["alice-1"])


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


def _start(argv, env):
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "asrkit", "compute-features", *argv],
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


def _children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.add(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _slow_corpus(tmp_path, rng):
    """A data dir whose last utterance is a pipe that sleeps $SLEEP seconds first."""
    data, samples = make_corpus(str(tmp_path), rng)
    wav = os.path.join(data, "wav.scp")
    lines = [line for line in open(wav) if "corrupt" not in line and "empty" not in line]
    lines.append(f"zed-sleepy sleep ${{SLEEP:-0}}; cat {tmp_path}/audio/alice-1.wav |\n")
    open(wav, "w").writelines(lines)
    utt2spk = [line for line in open(os.path.join(data, "utt2spk"))
               if "corrupt" not in line and "empty" not in line] + ["zed-sleepy zed\n"]
    open(os.path.join(data, "utt2spk"), "w").writelines(utt2spk)
    os.unlink(os.path.join(data, "spk2utt"))
    os.unlink(os.path.join(data, "text"))
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["data", "fix", data, "--no-backup"]) == 0
    return data


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_interrupted_rerun_leaves_the_previous_output_whole(tmp_path, rng, capsys, jobs):
    """A rerun killed while computing (after the old archives would have been deleted) leaves
    feats.scp and everything it points at as the last complete run left them."""
    import signal
    import time

    data = _slow_corpus(tmp_path, rng)
    conf = tmp_path / "fbank.toml"
    conf.write_text(CONFIG)
    out = tmp_path / "fbank"
    rc, first, _ = _run(capsys, data, "--config", str(conf), "--out", str(out), "--jobs", jobs)
    assert rc == 0 and first["num_failed"] == 0
    before = _feats(str(out))
    scp_before = (out / "feats.scp").read_text()

    conf.write_text(CONFIG.replace("num_mel_bins = 23", "num_mel_bins = 20"))
    p = _start([data, "--config", str(conf), "--out", str(out), "--jobs", jobs],
               {"SLEEP": "60"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not glob.glob(str(out / ".raw_fbank_train.*.tmp")):
        time.sleep(0.2)
    assert glob.glob(str(out / ".raw_fbank_train.*.tmp")), "the rerun never started writing"
    workers = _children(p.pid)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert (out / "feats.scp").read_text() == scp_before
    after = _feats(str(out))
    assert after.keys() == before.keys()
    for utt in before:
        np.testing.assert_array_equal(after[utt], before[utt])
    deadline = time.monotonic() + 20  # a killed process takes a moment to exit on a busy machine
    while time.monotonic() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers)

    # the next complete run publishes the new features and removes what nobody uses
    rc, third, _ = _run(capsys, data, "--config", str(conf), "--out", str(out), "--jobs", jobs)
    assert rc == 0 and all(m.shape[1] == 20 for m in _feats(str(out)).values())
    used = {os.path.basename(rx.rsplit(":", 1)[0])
            for _, rx in read_script(str(out / "feats.scp"))}
    assert set(os.path.basename(a) for a in glob.glob(str(out / "raw_*.ark"))) == used
    assert not glob.glob(str(out / ".*.tmp"))
    cmvn = read_table_dict(f"scp:{out / 'cmvn.scp'}")
    assert all(v.shape == (2, 21) for v in cmvn.values())
    assert len(glob.glob(str(out / "cmvn_*.ark"))) == 1


def test_workers_end_with_a_killed_parent(tmp_path, rng):
    """--jobs 2 with its parent killed (SIGKILL: no cleanup code runs): the workers go too."""
    import signal
    import time

    data = _slow_corpus(tmp_path, rng)
    conf = tmp_path / "fbank.toml"
    conf.write_text(CONFIG)
    p = _start([data, "--config", str(conf), "--out", str(tmp_path / "o"), "--jobs", "2"],
               {"SLEEP": "60"})
    deadline = time.monotonic() + 60
    workers: set[int] = set()
    while time.monotonic() < deadline and len(workers) < 2:
        workers = {c for c in _children(p.pid) if "spawn_main" in open(
            f"/proc/{c}/cmdline").read()} if _alive(p.pid) else set()
        time.sleep(0.2)
    assert len(workers) == 2, "no workers started"
    os.kill(p.pid, signal.SIGKILL)  # the parent only, not its process group
    p.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.2)
    assert not any(_alive(w) for w in workers)
    os.killpg(p.pid, signal.SIGKILL)  # the sleeping pipe, if any is left
