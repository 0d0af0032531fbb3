"""Fused multi-head self-attention: the core (``attention_forward/backward``) and the whole layer
with its projections (``mhsa_forward/backward``), with key padding, causal and chunked masks
and Transformer-XL/ESPnet relative positions.

The maths and the masks are those of :mod:`asrkit.kernels.reference.attention` (read its
docstring). Parameters move unchanged from and to torch and ESPnet:

* ``torch.nn.MultiheadAttention(D, H)``: ``in_proj_weight -> w_in [3D, D]``,
  ``in_proj_bias -> b_in``, ``out_proj.weight -> w_out``, ``out_proj.bias -> b_out``; its
  ``key_padding_mask`` is ``lengths``, its causal ``attn_mask`` is ``causal=True``;
* ESPnet's ``RelPositionMultiHeadedAttention`` (icefall's conformer): ``w_in`` is
  ``linear_q/k/v.weight`` stacked, ``b_in`` their biases, ``linear_out -> w_out, b_out``,
  ``linear_pos.weight -> w_pos``, ``pos_bias_u``, ``pos_bias_v``; ``pos_emb [2T-1, D]`` is
  ``RelPositionalEncoding``'s second output without its batch axis (the "latest" variant).

Devices: ``"reference"`` (numpy twin), ``"cpu"`` (CBLAS GEMMs from numba, blocked over queries,
parallel over (sequence, head) pairs: :mod:`asrkit.kernels.cpu.attention`), ``"cuda"``
(numba.cuda; device arrays in and out). ``device=None`` follows the arrays. A forward returns an
opaque cache that remembers its device; the CPU cache references the inputs and the output
(only each row's log-sum-exp is stored, the probabilities are recomputed by the backward), so
overwrite none of them before the backward.
"""

from __future__ import annotations

import importlib

import numpy as np

from asrkit.kernels._device import resolve_device


def _device(device, *arrays) -> str:
    dev = resolve_device(device, *arrays)
    # numba's CUDA simulator arrays have no __cuda_array_interface__; they do have copy_to_host
    if device is None and dev == "cpu" and any(hasattr(a, "copy_to_host") for a in arrays):
        dev = resolve_device("cuda")
    return dev


def _backend(device: str):
    return importlib.import_module(f"asrkit.kernels.{device}.attention")


def _shape(what, name, a, expected):
    if a is None:
        raise ValueError(f"{what}: {name} is needed (shape {tuple(expected)})")
    shape = tuple(a.shape)
    if shape != tuple(expected):
        raise ValueError(f"{what}: {name} has shape {shape}, expected {tuple(expected)}")


def _check_options(what, T, D, num_heads, chunk_size, left_chunks, pos, pos_bias_u,
                   pos_bias_v, pos_name="pos"):
    H = int(num_heads)
    if H < 1 or D % H:
        raise ValueError(f"{what}: num_heads={num_heads} does not divide the model size D={D}")
    if chunk_size is not None and int(chunk_size) < 1:
        raise ValueError(f"{what}: chunk_size={chunk_size} must be a positive number of frames")
    if left_chunks is not None:
        if chunk_size is None:
            raise ValueError(f"{what}: left_chunks={left_chunks} needs a chunk_size")
        if int(left_chunks) < 0:
            raise ValueError(f"{what}: left_chunks={left_chunks} must be >= 0 (None: all)")
    if pos is not None:
        _shape(what, pos_name, pos, (2 * T - 1, D))
        _shape(what, "pos_bias_u", pos_bias_u, (H, D // H))
        _shape(what, "pos_bias_v", pos_bias_v, (H, D // H))
    elif pos_bias_u is not None or pos_bias_v is not None:
        raise ValueError(f"{what}: pos_bias_u/pos_bias_v are given without {pos_name}")


def _opts(causal, chunk_size, left_chunks):
    return (bool(causal), None if chunk_size is None else int(chunk_size),
            None if left_chunks is None else int(left_chunks))


def attention_forward(q, k, v, lengths=None, num_heads=1, device=None, *, causal=False,
                      chunk_size=None, left_chunks=None, pos=None, pos_bias_u=None,
                      pos_bias_v=None, scale=None, threads=None):
    """Multi-head attention core (scores, mask, softmax, weighted sum) over a padded batch.

    Takes ``q, k, v [T, B, D]`` (float32, or float64; head h owns features ``h*D/H ..``),
    ``lengths int[B]`` (None: all T), ``num_heads`` H. Masks: ``causal`` (key j <= query i),
    ``chunk_size`` (frames; a query sees its own chunk) with ``left_chunks`` (chunks to the
    left it also sees; None: all). Relative positions: ``pos [2T-1, D]`` (projected positional
    embedding, row m = relative position T-1-m) with ``pos_bias_u, pos_bias_v [H, D/H]``.
    ``scale`` defaults to ``1/sqrt(D/H)``; ``threads`` (CPU; None: the cores) is how many
    (sequence, head) groups run in parallel. Returns ``out [T, B, D]`` (zero on padded frames)
    and an opaque cache for :func:`attention_backward`.
    """
    what = "attention_forward"
    dev = _device(device, q, k, v)
    if len(q.shape) != 3:
        raise ValueError(f"{what}: q must be [T, B, D], got shape {tuple(q.shape)}")
    T, B, D = tuple(q.shape)
    _shape(what, "k", k, (T, B, D))
    _shape(what, "v", v, (T, B, D))
    _check_options(what, T, D, num_heads, chunk_size, left_chunks, pos, pos_bias_u, pos_bias_v)
    extra = {"threads": threads} if dev == "cpu" else {}
    return _backend(dev).attention_forward(q, k, v, lengths, int(num_heads),
                                           *_opts(causal, chunk_size, left_chunks), pos,
                                           pos_bias_u, pos_bias_v, scale, **extra)


def attention_backward(dout, cache, device=None):
    """Gradients of :func:`attention_forward` given ``dout [T, B, D]`` (ignored on padding).

    Returns ``(dq, dk, dv)``, each ``[T, B, D]`` and zero on padded frames; with relative
    positions also ``dpos [2T-1, D]``, ``dpos_bias_u`` and ``dpos_bias_v [H, D/H]``.
    """
    if device is not None and device != cache.device:
        raise ValueError(f"attention_backward: the cache is from device {cache.device!r}, "
                         f"not {device!r}")
    return _backend(cache.device).attention_backward(dout, cache)


def mhsa_forward(x, w_in, b_in, w_out, b_out, num_heads, lengths=None, device=None, *,
                 causal=False, chunk_size=None, left_chunks=None, pos_emb=None, w_pos=None,
                 pos_bias_u=None, pos_bias_v=None, scale=None, threads=None):
    """Multi-head self-attention layer: projections, the attention core, output projection.

    Takes ``x [T, B, D]``, ``w_in [3D, D]`` and ``b_in [3D]`` (query, key, value rows; None for
    no bias), ``w_out [D, D]``, ``b_out [D]`` (or None), ``num_heads``, ``lengths int[B]`` and
    the options of :func:`attention_forward`; relative positions take ``pos_emb [2T-1, D]``
    with ``w_pos [D, D]`` (``pos = pos_emb w_pos^T``, ESPnet's ``linear_pos``) and the two
    biases. Returns ``y [T, B, D]`` (zero on padded frames) and an opaque cache for
    :func:`mhsa_backward`.
    """
    what = "mhsa_forward"
    dev = _device(device, x, w_in)
    if len(x.shape) != 3:
        raise ValueError(f"{what}: x must be [T, B, D], got shape {tuple(x.shape)}")
    T, B, D = tuple(x.shape)
    _shape(what, "w_in", w_in, (3 * D, D))
    if b_in is not None:
        _shape(what, "b_in", b_in, (3 * D,))
    _shape(what, "w_out", w_out, (D, D))
    if b_out is not None:
        _shape(what, "b_out", b_out, (D,))
    _check_options(what, T, D, num_heads, chunk_size, left_chunks, pos_emb, pos_bias_u,
                   pos_bias_v, "pos_emb")
    if pos_emb is not None:
        _shape(what, "w_pos", w_pos, (D, D))
    extra = {"threads": threads} if dev == "cpu" else {}
    return _backend(dev).mhsa_forward(x, w_in, b_in, w_out, b_out, int(num_heads), lengths,
                                      *_opts(causal, chunk_size, left_chunks), pos_emb, w_pos,
                                      pos_bias_u, pos_bias_v, scale, **extra)


def mhsa_backward(dy, cache, device=None):
    """Gradients of :func:`mhsa_forward` given ``dy [T, B, D]`` (ignored on padding).

    Returns ``(dx, dw_in, db_in, dw_out, db_out)``, shaped like the forward's arguments (the
    bias gradients also when the forward had no bias); with relative positions also
    ``(dw_pos, dpos_bias_u, dpos_bias_v)``.
    """
    if device is not None and device != cache.device:
        raise ValueError(f"mhsa_backward: the cache is from device {cache.device!r}, "
                         f"not {device!r}")
    return _backend(cache.device).mhsa_backward(dy, cache)


def attention_mask(T, lengths=None, *, causal=False, chunk_size=None, left_chunks=None,
                   B=None) -> np.ndarray:
    """``bool [B, T, T]``, True where query i of sequence b may attend to key j: the mask the
    kernels apply, for callers that hand it to another library (torch's ``attn_mask``)."""
    from asrkit.kernels.reference.attention import attention_mask as mask

    return mask(T, lengths, causal, chunk_size, left_chunks, B)
