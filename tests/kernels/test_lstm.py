"""LSTM kernels against torch.nn.LSTM (packed sequences, uni/bi, projection) and each other."""

import numpy as np
import pytest
import torch

from asrkit.kernels import blstm_backward, blstm_forward, lstm_backward, lstm_forward

NAMES = ("w_ih", "w_hh", "b_ih", "b_hh", "w_hr")


def make_params(rng, I, H, P=None, dirs=None, dtype=np.float32):
    """torch-initialised-like weights; stacked on a leading [2] axis when dirs == 2."""
    lead = () if dirs is None else (dirs,)
    PP = P or H
    k = 1 / np.sqrt(H)
    shapes = {"w_ih": (4 * H, I), "w_hh": (4 * H, PP), "b_ih": (4 * H,), "b_hh": (4 * H,)}
    if P:
        shapes["w_hr"] = (P, H)
    p = {n: rng.uniform(-k, k, lead + s).astype(dtype) for n, s in shapes.items()}
    p.setdefault("w_hr", None)
    return p


def make_inputs(rng, T, B, I, H, P=None, dirs=None, dtype=np.float32):
    lead = () if dirs is None else (dirs,)
    PP = P or H
    x = rng.standard_normal((T, B, I)).astype(dtype)
    h0 = rng.standard_normal(lead + (B, PP)).astype(dtype) * 0.5
    c0 = rng.standard_normal(lead + (B, H)).astype(dtype) * 0.5
    return x, h0, c0


def torch_lstm(x, h0, c0, params, lengths, bidirectional, r, rh, rc):
    """torch.nn.LSTM on a packed batch; returns outputs and autograd gradients of
    sum(y*r) + sum(h_n*rh) + sum(c_n*rc), named like asrkit's results."""
    T, B, In = x.shape
    H = params["w_ih"].shape[-2] // 4
    P = 0 if params["w_hr"] is None else params["w_hr"].shape[-2]
    m = torch.nn.LSTM(In, H, bidirectional=bidirectional, proj_size=P)
    suffixes = ["", "_reverse"] if bidirectional else [""]
    torch_names = {"w_ih": "weight_ih", "w_hh": "weight_hh", "b_ih": "bias_ih",
                   "b_hh": "bias_hh", "w_hr": "weight_hr"}
    with torch.no_grad():
        for d, sfx in enumerate(suffixes):
            for n in NAMES:
                if params[n] is None:
                    continue
                v = params[n][d] if bidirectional else params[n]
                getattr(m, f"{torch_names[n]}_l0{sfx}").copy_(torch.from_numpy(v))
    lead = (lambda a: a) if bidirectional else (lambda a: a[None])
    xt = torch.tensor(x, requires_grad=True)
    h0t = torch.tensor(lead(h0), requires_grad=True)
    c0t = torch.tensor(lead(c0), requires_grad=True)
    packed = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.tensor(lengths),
                                                     enforce_sorted=False)
    out, (hn, cn) = m(packed, (h0t, c0t))
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=T)
    loss = ((y * torch.tensor(r)).sum() + (hn * torch.tensor(lead(rh))).sum()
            + (cn * torch.tensor(lead(rc))).sum())
    loss.backward()
    unlead = (lambda a: a) if bidirectional else (lambda a: a[0])
    res = {"y": y.detach().numpy(), "h_n": unlead(hn.detach().numpy()),
           "c_n": unlead(cn.detach().numpy()), "dx": xt.grad.numpy(),
           "dh0": unlead(h0t.grad.numpy()), "dc0": unlead(c0t.grad.numpy())}
    for n in NAMES:
        if params[n] is None:
            continue
        grads = [getattr(m, f"{torch_names[n]}_l0{s}").grad.numpy() for s in suffixes]
        res["d" + n] = np.stack(grads) if bidirectional else grads[0]
    return res


GRAD_NAMES = ("dx", "dh0", "dc0", "dw_ih", "dw_hh", "db_ih", "db_hh", "dw_hr")


def assert_matches(ours, ref, atol, rtol=1e-4):
    for name, v in ours.items():
        np.testing.assert_allclose(v, ref[name], atol=atol, rtol=rtol, err_msg=name)


@pytest.mark.parametrize("device", ["reference", "cpu"])
@pytest.mark.parametrize("proj", [None, 2])
def test_lstm_matches_torch_packed(rng, device, proj):
    T, B, In, H = 6, 4, 5, 3
    lengths = np.array([4, 6, 1, 3], np.int32)
    p = make_params(rng, In, H, proj)
    x, h0, c0 = make_inputs(rng, T, B, In, H, proj)
    PP = proj or H
    r = rng.standard_normal((T, B, PP)).astype(np.float32)
    rh = rng.standard_normal((B, PP)).astype(np.float32)
    rc = rng.standard_normal((B, H)).astype(np.float32)
    ref = torch_lstm(x, h0, c0, p, lengths, False, r, rh, rc)
    y, h_n, c_n, cache = lstm_forward(x, h0, c0, p["w_ih"], p["w_hh"], p["b_ih"], p["b_hh"],
                                      lengths, device=device, w_hr=p["w_hr"])
    assert y.dtype == np.float32 and y.shape == (T, B, PP)
    assert_matches({"y": y, "h_n": h_n, "c_n": c_n}, ref, atol=1e-5)
    assert not y[lengths[2]:, 2].any()
    grads = lstm_backward(r, rh, rc, cache)
    assert len(grads) == (8 if proj else 7)
    assert_matches(dict(zip(GRAD_NAMES, grads)), ref, atol=1e-4)


@pytest.mark.parametrize("device", ["reference", "cpu"])
@pytest.mark.parametrize("proj", [None, 2])
def test_blstm_matches_torch_packed(rng, device, proj):
    T, B, In, H = 5, 3, 4, 3
    lengths = np.array([2, 5, 4], np.int64)
    p = make_params(rng, In, H, proj, dirs=2)
    x, h0, c0 = make_inputs(rng, T, B, In, H, proj, dirs=2)
    PP = proj or H
    r = rng.standard_normal((T, B, 2 * PP)).astype(np.float32)
    rh = rng.standard_normal((2, B, PP)).astype(np.float32)
    rc = rng.standard_normal((2, B, H)).astype(np.float32)
    ref = torch_lstm(x, h0, c0, p, lengths, True, r, rh, rc)
    y, h_n, c_n, cache = blstm_forward(x, h0, c0, p["w_ih"], p["w_hh"], p["b_ih"], p["b_hh"],
                                       lengths, device=device, w_hr=p["w_hr"])
    assert y.shape == (T, B, 2 * PP) and h_n.shape == (2, B, PP) and c_n.shape == (2, B, H)
    assert_matches({"y": y, "h_n": h_n, "c_n": c_n}, ref, atol=1e-5)
    grads = blstm_backward(r, rh, rc, cache)
    assert_matches(dict(zip(GRAD_NAMES, grads)), ref, atol=1e-4)


def test_blstm_concurrent_equals_sequential(rng):
    T, B, In, H = 7, 3, 4, 5
    p = make_params(rng, In, H, dirs=2)
    x, h0, c0 = make_inputs(rng, T, B, In, H, dirs=2)
    lengths = np.array([7, 3, 5])
    dy = rng.standard_normal((T, B, 2 * H)).astype(np.float32)
    outs = []
    for concurrent in (False, True):
        y, h_n, c_n, cache = blstm_forward(x, h0, c0, *(p[n] for n in NAMES[:4]), lengths,
                                           concurrent=concurrent)
        outs.append((y, h_n, c_n, *blstm_backward(dy, None, None, cache,
                                                    concurrent=concurrent)))
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("proj", [None, 3])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cpu_matches_reference(rng, proj, reverse, dtype):
    T, B, In, H = 6, 4, 3, 4
    lengths = np.array([6, 0, 2, 5])
    p = make_params(rng, In, H, proj, dtype=dtype)
    x, h0, c0 = make_inputs(rng, T, B, In, H, proj, dtype=dtype)
    PP = proj or H
    dy = rng.standard_normal((T, B, PP)).astype(dtype)
    dh = rng.standard_normal((B, PP)).astype(dtype)
    dc = rng.standard_normal((B, H)).astype(dtype)
    tol = 1e-12 if dtype == np.float64 else 2e-6
    res = []
    for device in ("reference", "cpu"):
        y, h_n, c_n, cache = lstm_forward(x, h0, c0, *(p[n] for n in NAMES[:4]), lengths,
                                          device=device, reverse=reverse, w_hr=p["w_hr"])
        res.append((y, h_n, c_n, *lstm_backward(dy, dh, dc, cache)))
    for name, a, b in zip(("y", "h_n", "c_n") + GRAD_NAMES, *res):
        assert a.dtype == dtype, name
        np.testing.assert_allclose(b, a, atol=tol, rtol=tol * 10, err_msg=name)
    # zero-length sequence: state passes through, output and input gradients are zero
    y, h_n, c_n = res[1][:3]
    np.testing.assert_array_equal(h_n[1], h0[1])
    np.testing.assert_array_equal(c_n[1], c0[1])
    assert not y[:, 1].any() and not res[1][3][:, 1].any()


@pytest.mark.parametrize("proj", [None, 2])
@pytest.mark.parametrize("reverse", [False, True])
def test_reference_gradients_by_finite_differences(rng, proj, reverse):
    """Directional derivative of the float64 twin against central differences."""
    T, B, In, H = 4, 3, 3, 3
    lengths = np.array([4, 2, 3])
    p = make_params(rng, In, H, proj, dtype=np.float64)
    x, h0, c0 = make_inputs(rng, T, B, In, H, proj, dtype=np.float64)
    PP = proj or H
    r = rng.standard_normal((T, B, PP))
    rh, rc = rng.standard_normal((B, PP)), rng.standard_normal((B, H))
    names = ["x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"] + (["w_hr"] if proj else [])
    args = {"x": x, "h0": h0, "c0": c0, **{n: p[n] for n in NAMES}}

    def loss(a):
        y, h_n, c_n, _ = lstm_forward(a["x"], a["h0"], a["c0"], a["w_ih"], a["w_hh"], a["b_ih"],
                                      a["b_hh"], lengths, device="reference", reverse=reverse,
                                      w_hr=a["w_hr"])
        return (y * r).sum() + (h_n * rh).sum() + (c_n * rc).sum()

    *_, cache = lstm_forward(x, h0, c0, *(p[n] for n in NAMES[:4]), lengths,
                             device="reference", reverse=reverse, w_hr=p["w_hr"])
    grads = dict(zip(names, lstm_backward(r, rh, rc, cache)))
    direction = {n: rng.standard_normal(args[n].shape) for n in names}
    eps = 1e-6
    plus = {**args, **{n: args[n] + eps * direction[n] for n in names}}
    minus = {**args, **{n: args[n] - eps * direction[n] for n in names}}
    numeric = (loss(plus) - loss(minus)) / (2 * eps)
    analytic = sum((grads[n] * direction[n]).sum() for n in names)
    assert abs(numeric - analytic) <= 1e-6 * max(1.0, abs(numeric))


def test_reverse_starts_at_each_sequence_end(rng):
    """Reverse direction == forward direction over each sequence reversed within its length."""
    T, B, In, H = 5, 2, 3, 2
    lengths = np.array([5, 3])
    p = make_params(rng, In, H)
    x, h0, c0 = make_inputs(rng, T, B, In, H)
    xr = np.zeros_like(x)
    for b, L in enumerate(lengths):
        xr[:L, b] = x[:L, b][::-1]
    y, h_n, c_n, _ = lstm_forward(x, h0, c0, *(p[n] for n in NAMES[:4]), lengths, reverse=True)
    yr, hr, cr, _ = lstm_forward(xr, h0, c0, *(p[n] for n in NAMES[:4]), lengths)
    for b, L in enumerate(lengths):
        np.testing.assert_allclose(y[:L, b], yr[:L, b][::-1], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(h_n, hr, rtol=1e-6)


def test_bad_input_gives_clear_errors(rng):
    p = make_params(rng, 3, 2)
    x, h0, c0 = make_inputs(rng, 4, 2, 3, 2)
    w = [p[n] for n in NAMES[:4]]
    with pytest.raises(ValueError, match="lengths\\[1\\] = 5 is outside"):
        lstm_forward(x, h0, c0, *w, np.array([4, 5]))
    with pytest.raises(ValueError, match="w_hh has shape"):
        lstm_forward(x, h0, c0, w[0], w[1][:, :1], w[2], w[3])
    with pytest.raises(ValueError, match="x must be \\[T, B, I\\]"):
        lstm_forward(x[0], h0, c0, *w)
    with pytest.raises(ValueError, match="h0 has shape"):
        lstm_forward(x, h0[:1], c0, *w)
    with pytest.raises(ValueError, match="unknown device"):
        lstm_forward(x, h0, c0, *w, device="tpu")
    *_, cache = lstm_forward(x, None, None, *w)
    with pytest.raises(ValueError, match="cache is from device 'cpu'"):
        lstm_backward(None, None, None, cache, device="reference")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("blas", [True, False])
def test_recurrent_gemm_splits_agree(rng, dtype, blas):
    """Every split of the per-step GEMM (whole, column blocks, K blocks accumulated), through
    numpy's OpenBLAS or the numba fallback, computes rows r0 .. r0+n-1 and nothing else."""
    from asrkit.kernels.cpu import _gemm

    gemm = _gemm.gemm_function(dtype, blas=blas)
    K, N = 300, 400
    a = rng.standard_normal((16, K)).astype(dtype)
    w = rng.standard_normal((K, N)).astype(dtype)
    cands = _gemm.candidates(16, K, N)
    assert {m for m, _ in cands} == {_gemm.WHOLE, _gemm.COLUMN_BLOCKS, _gemm.K_BLOCKS}
    for mode, width in cands:
        out = np.full((16, N), np.nan, dtype)
        _gemm.matmul_rows(gemm, mode, width, a, w, out, 2, 11)
        np.testing.assert_allclose(out[2:13], a[2:13] @ w, rtol=1e-5, atol=1e-4)
        assert np.isnan(out[:2]).all() and np.isnan(out[13:]).all()
    assert _gemm.gemm_plan(gemm, 16, K, N, dtype) in cands


def test_cpu_without_blas_matches_reference(rng, monkeypatch):
    """ASRKIT_LSTM_GEMM=numba: the recurrences run on the numba fallback GEMM."""
    monkeypatch.setenv("ASRKIT_LSTM_GEMM", "numba")
    T, B, In, H = 5, 3, 3, 4
    lengths = np.array([5, 2, 4])
    p = make_params(rng, In, H, 2, dtype=np.float64)
    x, h0, c0 = make_inputs(rng, T, B, In, H, 2, dtype=np.float64)
    dy = rng.standard_normal((T, B, 2))
    res = []
    for device in ("reference", "cpu"):
        y, h_n, c_n, cache = lstm_forward(x, h0, c0, *(p[n] for n in NAMES[:4]), lengths,
                                          device=device, w_hr=p["w_hr"])
        res.append((y, h_n, c_n, *lstm_backward(dy, None, None, cache)))
    for a, b in zip(*res):
        np.testing.assert_allclose(b, a, atol=1e-12, rtol=1e-10)


def test_cpu_cache_serves_one_backward(rng):
    """The backward writes the gate gradients over the cache's activations: a second backward
    on the same cache is refused with a clear error, and y is the cache's own output."""
    p = make_params(rng, 3, 4)
    x, h0, c0 = make_inputs(rng, 5, 2, 3, 4)
    y, _, _, cache = lstm_forward(x, h0, c0, *(p[n] for n in NAMES[:4]), device="cpu")
    assert np.shares_memory(y, cache.y) and not cache.consumed
    dy = np.ones_like(y)
    lstm_backward(dy, None, None, cache)
    assert cache.consumed
    with pytest.raises(ValueError, match="already used by a backward"):
        lstm_backward(dy, None, None, cache)


def test_blstm_cpu_writes_both_halves_and_reads_strided_dy(rng):
    """On the CPU each direction writes its half of y directly and reads its half of dy as a
    view; the results equal two separate lstm_forward/backward calls."""
    T, B, In, H = 6, 3, 2, 3
    lengths = np.array([6, 4, 1])
    p = make_params(rng, In, H, dirs=2)
    x, h0, c0 = make_inputs(rng, T, B, In, H, dirs=2)
    dy = rng.standard_normal((T, B, 2 * H)).astype(np.float32)
    y, h_n, c_n, cache = blstm_forward(x, h0, c0, *(p[n] for n in NAMES[:4]), lengths,
                                       device="cpu")
    grads = blstm_backward(dy, None, None, cache)
    for d in (0, 1):
        yd, hd, cd, kd = lstm_forward(x, h0[d], c0[d], *(p[n][d] for n in NAMES[:4]), lengths,
                                      device="cpu", reverse=bool(d))
        np.testing.assert_array_equal(y[:, :, d * H:(d + 1) * H], yd)
        np.testing.assert_array_equal(h_n[d], hd)
        gd = lstm_backward(np.ascontiguousarray(dy[:, :, d * H:(d + 1) * H]), None, None, kd)
        for g, one in zip(grads[3:], gd[3:]):
            np.testing.assert_allclose(g[d], one, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("proj,reverse,full", [(None, False, False), (2, True, False),
                                               (None, True, True)])
def test_cpu_batch_split_over_threads_matches_reference(rng, monkeypatch, threads, proj,
                                                        reverse, full):
    """The batch dealt into per-thread blocks (longest first, round-robin) changes nothing."""
    monkeypatch.setenv("ASRKIT_LSTM_SPLIT", "batch")  # a projection always splits the batch
    T, B, In, H = 5, 13, 3, 4
    lengths = np.full(B, T) if full else rng.integers(0, T + 1, size=B)
    lengths[3] = T
    p = make_params(rng, In, H, proj, dtype=np.float64)
    x, h0, c0 = make_inputs(rng, T, B, In, H, proj, dtype=np.float64)
    PP = proj or H
    dy = rng.standard_normal((T, B, PP))
    dh, dc = rng.standard_normal((B, PP)), rng.standard_normal((B, H))
    res = []
    for device, kw in (("reference", {}), ("cpu", {"threads": threads})):
        y, h_n, c_n, cache = lstm_forward(x, h0, c0, *(p[n] for n in NAMES[:4]), lengths,
                                          device=device, reverse=reverse, w_hr=p["w_hr"], **kw)
        res.append((y, h_n, c_n, *lstm_backward(dy, dh, dc, cache)))
        if device == "cpu":
            assert len(cache.bounds) == threads
    for name, a, b in zip(("y", "h_n", "c_n") + GRAD_NAMES, *res):
        np.testing.assert_allclose(b, a, atol=1e-12, rtol=1e-10, err_msg=name)


@pytest.mark.parametrize("threads,H", [(2, 64), (3, 96), (2, 70), (4, 40)])
@pytest.mark.parametrize("reverse,full", [(False, False), (True, False), (False, True)])
def test_cpu_unit_split_over_threads_matches_reference(rng, monkeypatch, threads, H, reverse,
                                                       full):
    """The hidden units of every step split over threads that meet at a barrier per step
    (ranges of whole 16-unit vectors, an uneven last one; at least 32 units per thread, so
    H=40 runs on one thread) change nothing, with sequences of every length down to 0."""
    from asrkit.kernels.cpu import lstm as cpu_lstm
    from asrkit.kernels.cpu._sync import Gang
    from asrkit.kernels.cpu.lstm import MIN_UNITS_PER_THREAD, _unit_ranges

    monkeypatch.setattr(cpu_lstm, "_GANG", Gang(threads, "test-lstm-gang"))  # more threads
    monkeypatch.setenv("ASRKIT_LSTM_SPLIT", "units")  # also on a loaded machine

    T, B, In = 6, 7, 5
    lengths = np.full(B, T) if full else rng.integers(0, T + 1, size=B)
    lengths[2] = T
    p = make_params(rng, In, H, dtype=np.float64)
    x, h0, c0 = make_inputs(rng, T, B, In, H, dtype=np.float64)
    dy = rng.standard_normal((T, B, H))
    dh, dc = rng.standard_normal((B, H)), rng.standard_normal((B, H))
    res = []
    for device, kw in (("reference", {}), ("cpu", {"threads": threads})):
        y, h_n, c_n, cache = lstm_forward(x, h0, c0, *(p[n] for n in NAMES[:4]), lengths,
                                          device=device, reverse=reverse, **kw)
        res.append((y, h_n, c_n, *lstm_backward(dy, dh, dc, cache)))
        if device == "cpu":
            assert cache.split == "units"
    n = max(1, min(threads, H // MIN_UNITS_PER_THREAD))
    ranges = _unit_ranges(H, n)
    assert sum(hk for _, hk in ranges) == H and all(j0 % 16 == 0 for j0, _ in ranges)
    for name, a, b in zip(("y", "h_n", "c_n") + GRAD_NAMES, *res):
        np.testing.assert_allclose(b, a, atol=1e-12, rtol=1e-10, err_msg=name)


def test_cpu_unit_split_from_two_callers_at_once(rng, monkeypatch):
    """Two threads running layers at once: one gets the gang, the other runs on its own
    thread (never waiting at a barrier for a partner that cannot start); both are right."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setenv("ASRKIT_LSTM_SPLIT", "units")

    T, B, In, H = 40, 6, 8, 64
    p = make_params(rng, In, H, dtype=np.float64)
    x, h0, c0 = make_inputs(rng, T, B, In, H, dtype=np.float64)
    dy = rng.standard_normal((T, B, H))
    w = [p[n] for n in NAMES[:4]]
    ref = lstm_forward(x, h0, c0, *w, device="reference")
    ref_g = lstm_backward(dy, None, None, ref[3])

    def run(_):
        y, h_n, c_n, cache = lstm_forward(x, h0, c0, *w, device="cpu", threads=2)
        return y, lstm_backward(dy, None, None, cache)

    with ThreadPoolExecutor(2) as pool:
        for y, grads in pool.map(run, range(6)):
            np.testing.assert_allclose(y, ref[0], atol=1e-12)
            for a, b in zip(grads, ref_g):
                np.testing.assert_allclose(a, b, atol=1e-10, rtol=1e-10)


def test_barrier_releases_waiters_when_a_thread_fails():
    """A gang thread that raises before the barrier aborts it: the others return instead of
    waiting forever, and the error reaches the caller."""
    from asrkit.kernels.cpu._sync import Gang, barrier, new_barrier, yield_function

    sync = new_barrier()
    seen = []

    def fn(k, n):
        if k == 1:
            from asrkit.kernels.cpu._sync import abort

            abort(sync)
            raise RuntimeError("thread 1 failed")
        seen.append(barrier(sync, n, yield_function()))

    with pytest.raises(RuntimeError, match="thread 1 failed"):
        Gang(2, "test-gang").run(2, fn)
    assert seen == [False]


def test_split_mode_follows_projection_environment_and_load(monkeypatch):
    """Units unless a projection, ASRKIT_LSTM_SPLIT=batch or a load average above the cores
    (threads that are not all running lose every barrier) says batch."""
    from asrkit.kernels.cpu import lstm as cpu_lstm

    monkeypatch.delenv("ASRKIT_LSTM_SPLIT", raising=False)
    monkeypatch.setattr(cpu_lstm, "cpu_count", lambda: 2)
    monkeypatch.setattr(cpu_lstm.os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    assert cpu_lstm._split_mode(False, 2) == "units"
    assert cpu_lstm._split_mode(True, 2) == "batch"
    monkeypatch.setattr(cpu_lstm.os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    assert cpu_lstm._split_mode(False, 2) == "batch"
    assert cpu_lstm._split_mode(False, 1) == "units"
    monkeypatch.setenv("ASRKIT_LSTM_SPLIT", "units")
    assert cpu_lstm._split_mode(False, 2) == "units"
    assert cpu_lstm._split_mode(True, 2) == "batch"
    monkeypatch.setenv("ASRKIT_LSTM_SPLIT", "batch")
    monkeypatch.setattr(cpu_lstm.os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    assert cpu_lstm._split_mode(False, 2) == "batch"
