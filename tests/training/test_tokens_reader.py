"""Token tables and the reader: bucketing, seeded shuffling, CMVN, augmentation, bad utterances."""

import numpy as np
import pytest

from asrkit.features import apply_cmvn
from asrkit.io import read_table_dict
from asrkit.training import Reader, ReaderConfig, TokenError, TokenTable, make_token_table
from asrkit.training.reader import ctc_min_frames
from tests.training.datadirs import synthetic_dir


def test_token_table_units_and_errors(tmp_path):
    t = make_token_table(["ab ba", "c"], "char")
    assert t.symbols == ["<blk>", "<space>", "a", "b", "c"] and t.blank == 0
    assert t.encode("ab ba").tolist() == [2, 3, 1, 3, 2]
    assert t.decode(t.encode("ab ba")) == "ab ba"
    with pytest.raises(TokenError, match="unknown token 'z'"):
        t.encode("z")
    w = TokenTable(["<blank>", "<unk>", "hello", "world"], "word")
    assert w.encode("hello there world").tolist() == [2, 1, 3]
    bad = tmp_path / "tokens.txt"
    bad.write_text("<blk> 0\na 2\n")
    with pytest.raises(TokenError, match="ids must be 0..1"):
        TokenTable.read(bad)
    bad.write_text("<blk> 0\na\n")
    with pytest.raises(TokenError, match=r"tokens.txt:2: expected 'symbol id'"):
        TokenTable.read(bad)


def _reader(path, tokens, **kw):
    training = kw.pop("training", True)
    size = kw.pop("size", 1)
    rank = kw.pop("rank", 0)
    out_len = kw.pop("output_lengths", None)
    cfg = ReaderConfig(data_dir=path, tokens=tokens, **kw)
    return Reader(cfg, training=training, rank=rank, size=size, output_lengths=out_len,
                  log=lambda m: None)


def test_bucketing_bounds_padded_frames_and_covers_every_utterance(tmp_path):
    path, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=30)
    r = _reader(path, tokens, minibatch_frames=120, bucket_pool=10, seed=3)
    plan = r.plan(0)
    assert sorted(u for b in plan for u in b) == sorted(r.utts)
    for b in plan:
        longest = max(r.num_frames[u] for u in b)
        assert len(b) * longest <= 120 or len(b) == 1
    assert r.plan(0) == plan  # a pure function of (seed, epoch)
    assert r.plan(1) != plan
    assert _reader(path, tokens, minibatch_frames=120, bucket_pool=10, seed=4).plan(0) != plan
    batch = r.load(plan[0], 0, 0)
    assert batch.feats.shape == (batch.lengths.max(), batch.size, 8)
    assert batch.targets.shape == (batch.size, batch.target_lengths.max())
    for b, n in enumerate(batch.lengths):
        assert not batch.feats[n:, b].any()  # zero padding


def test_sortagrad_epochs_go_shortest_first_then_shuffle(tmp_path):
    path, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=30)
    r = _reader(path, tokens, minibatch_frames=120, bucket_pool=10, seed=3, sortagrad=2)
    for epoch in (0, 1):
        order = [u for b in r.plan(epoch) for u in b]
        assert order == sorted(r.utts, key=lambda u: (r.num_frames[u], u))
    shuffled = [u for b in r.plan(2) for u in b]
    assert sorted(shuffled) == sorted(r.utts)
    assert shuffled != sorted(r.utts, key=lambda u: (r.num_frames[u], u))
    assert r.plan(2) == _reader(path, tokens, minibatch_frames=120, bucket_pool=10,
                                seed=3).plan(2)


def test_features_are_speaker_normalised_and_augmented_only_in_training(tmp_path):
    path, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=6)
    spec = {"num_freq_masks": 1, "freq_mask_width": 3, "num_time_masks": 1,
            "time_mask_width": 5, "time_warp": 0}
    cv = _reader(path, tokens, training=False, spec_augment=spec, norm_vars=True)
    utt = cv.utts[0]
    batch = cv.load([utt])
    raw = read_table_dict(f"scp:{path}/feats.scp")[utt]
    stats = read_table_dict(f"scp:{path}/cmvn.scp")[utt.split("-")[0]]
    np.testing.assert_allclose(batch.feats[:, 0], apply_cmvn(raw, stats, norm_vars=True),
                               rtol=1e-6)
    tr = _reader(path, tokens, training=True, spec_augment=spec, norm_vars=True)
    a = tr.load([utt], epoch=0, index=5).feats
    assert not np.array_equal(a, batch.feats)
    np.testing.assert_array_equal(a, tr.load([utt], epoch=0, index=5).feats)  # seeded


def test_bad_utterances_are_reported_skipped_and_counted(tmp_path):
    extra = {"s0-x-empty": "", "s0-x-unknown": "abz", "s0-x-long": "abababababababababab",
             "s0-x-nofeats": "ab"}
    path, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=5, extra_text=extra,
                                 drop_feats=("s0-x-nofeats",))
    messages = []
    cfg = ReaderConfig(data_dir=path, tokens=tokens)
    r = Reader(cfg, output_lengths=lambda L: np.asarray(L) // 3, log=messages.append)
    problems = dict(r.problems)
    assert set(problems) == set(extra)
    assert "empty transcript" in problems["s0-x-empty"]
    assert "unknown token 'z'" in problems["s0-x-unknown"]
    assert "target longer than input" in problems["s0-x-long"]
    assert "no features" in problems["s0-x-nofeats"]
    assert any("s0-x-unknown" in m for m in messages)
    assert len(r) == 5


def test_ctc_min_frames_counts_repeats():
    assert ctc_min_frames(np.array([1, 1, 2, 2, 2, 3])) == 9
    assert ctc_min_frames(np.array([], np.int32)) == 0


def test_shards_partition_utterances(tmp_path):
    path, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=11)
    shards = [_reader(path, tokens, rank=k, size=3).utts for k in range(3)]
    assert sorted(sum(shards, [])) == sorted(_reader(path, tokens).utts)
    assert all(shards)


def test_non_finite_features_and_bad_cmvn_stats_are_named_and_skipped_once(tmp_path):
    """A NaN or inf in an utterance's features, or stats that do not fit its speaker, never
    reach a minibatch: the utterance is named, counted once (however many epochs meet it) and
    left out; the rest of the batch stays."""
    from asrkit.io import write_table

    path, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=6, speakers=2)
    feats = read_table_dict(f"scp:{path}/feats.scp")
    utts = sorted(feats)
    feats[utts[1]] = feats[utts[1]].copy()
    feats[utts[1]][4, 2] = np.nan
    feats[utts[2]] = feats[utts[2]].copy()
    feats[utts[2]][7:9, 0] = np.inf
    write_table(f"ark,scp:{path}/feats.ark,{path}/feats.scp", sorted(feats.items()))
    messages = []
    r = Reader(ReaderConfig(data_dir=path, tokens=tokens, cmvn="utterance"),
               log=messages.append)
    for epoch in range(2):
        batch = r.load(utts, epoch)
        assert batch.utt_ids == [utts[0]] + utts[3:]
        assert np.isfinite(batch.feats).all()
    assert dict(r.problems) == {
        utts[1]: "the features hold 1 NaN and 0 inf values (first at frame 4)",
        utts[2]: "the features hold 0 NaN and 2 inf values (first at frame 7)"}
    assert sum(utts[1] in m for m in messages) == 1
    # speaker stats of the wrong dimension: every utterance of that speaker is named
    cmvn = read_table_dict(f"scp:{path}/cmvn.scp")
    cmvn["s0"] = np.zeros((2, 4))
    write_table(f"ark,scp:{path}/cmvn.ark,{path}/cmvn.scp", sorted(cmvn.items()))
    r = Reader(ReaderConfig(data_dir=path, tokens=tokens), log=lambda m: None)
    batch = r.load(utts)
    assert all(u.startswith("s1") for u in batch.utt_ids)
    reasons = dict(r.problems)
    assert all(reasons[u].startswith("cannot apply the CMVN stats of speaker 's0'")
               for u in utts if u.startswith("s0") and u not in (utts[1], utts[2]))
