"""Conv2d subsampling, Transformer and Conformer layers against torch: torch's own
``nn.TransformerEncoderLayer`` and, for what torch lacks, ESPnet's modules written out in torch
below (``Conv2dSubsampling``, ``RelPositionalEncoding``, ``RelPositionMultiHeadedAttention``
in its "latest" form, ``ConvolutionModule``, ``ConformerEncoderLayer``). Weights move through
the layers' torch names (``asrkit.models.from_torch_state_dict``); outputs and gradients are
compared per sequence of ragged batches, whose padding holds garbage."""

import math

import numpy as np
import pytest

import asrkit.ops as O
from asrkit.graph import check_grads, grad, input_variable
from asrkit.layers import ConformerEncoder, Conv2dSubsampling, TransformerEncoder
from asrkit.models import Model, from_torch_state_dict, to_torch_state_dict

torch = pytest.importorskip("torch")
nn = torch.nn


# -- ESPnet's modules, written in torch --------------------------------------------------------
class TorchSubsampling(nn.Module):
    """ESPnet's Conv2dSubsampling (x4), Conv2dSubsampling6 and Conv2dSubsampling8, without the
    positional encoding after ``out``."""

    def __init__(self, idim, odim, factor, channels):
        super().__init__()
        convs = {4: [(3, 2), (3, 2)], 6: [(3, 2), (5, 3)], 8: [(3, 2)] * 3}[factor]
        mods, c_in, f = [], 1, idim
        for K, s in convs:
            mods += [nn.Conv2d(c_in, channels, K, s), nn.ReLU()]
            c_in, f = channels, (f - K) // s + 1
        self.convs = convs
        self.conv = nn.Sequential(*mods)
        self.out = nn.Linear(channels * f, odim)

    def forward(self, x):  # [B, T, F]
        x = self.conv(x.unsqueeze(1))
        b, c, t, f = x.size()
        return self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))

    def lengths(self, L):
        for K, s in self.convs:
            L = torch.div(L - K, s, rounding_mode="floor") + 1
        return L


def rel_positional_encoding(T, D):
    """ESPnet's RelPositionalEncoding.extend_pe, float32: ``[1, 2T-1, D]``."""
    pe_pos = torch.zeros(T, D)
    pe_neg = torch.zeros(T, D)
    position = torch.arange(0, T, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, D, 2, dtype=torch.float32) * -(math.log(10000.0) / D))
    pe_pos[:, 0::2] = torch.sin(position * div_term)
    pe_pos[:, 1::2] = torch.cos(position * div_term)
    pe_neg[:, 0::2] = torch.sin(-1 * position * div_term)
    pe_neg[:, 1::2] = torch.cos(-1 * position * div_term)
    return torch.cat([torch.flip(pe_pos, [0]).unsqueeze(0), pe_neg[1:].unsqueeze(0)], dim=1)


def abs_positional_encoding(T, D):
    """ESPnet's PositionalEncoding table: ``[T, 1, D]``."""
    pe = torch.zeros(T, D)
    position = torch.arange(0, T, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, D, 2, dtype=torch.float32) * -(math.log(10000.0) / D))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.unsqueeze(1)


class RelPositionMHA(nn.Module):
    """ESPnet's RelPositionMultiHeadedAttention (latest), with icefall's stacked in_proj."""

    def __init__(self, D, H):
        super().__init__()
        self.h, self.d_k = H, D // H
        self.in_proj = nn.Linear(D, 3 * D)
        self.out_proj = nn.Linear(D, D)
        self.linear_pos = nn.Linear(D, D, bias=False)
        self.pos_bias_u = nn.Parameter(torch.randn(H, D // H))
        self.pos_bias_v = nn.Parameter(torch.randn(H, D // H))

    @staticmethod
    def rel_shift(x):
        zero_pad = torch.zeros((*x.size()[:3], 1), dtype=x.dtype)
        x_padded = torch.cat([zero_pad, x], dim=-1)
        x_padded = x_padded.view(*x.size()[:2], x.size(3) + 1, x.size(2))
        return x_padded[:, :, 1:].view_as(x)[:, :, :, : x.size(-1) // 2 + 1]

    def forward(self, x, pos_emb, key_pad):  # x [B, T, D], key_pad [B, T] True on padding
        B, T, _ = x.shape
        q, k, v = (t.view(B, T, self.h, self.d_k) for t in self.in_proj(x).chunk(3, dim=-1))
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        p = self.linear_pos(pos_emb).view(1, -1, self.h, self.d_k).transpose(1, 2)
        ac = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))
        bd = self.rel_shift(torch.matmul((q + self.pos_bias_v).transpose(1, 2),
                                         p.transpose(-2, -1)))
        scores = (ac + bd) / math.sqrt(self.d_k)
        mask = key_pad[:, None, None, :]
        attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1).masked_fill(mask,
                                                                                           0.0)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(B, T, -1)
        return self.out_proj(out)


class FeedForward(nn.Module):
    def __init__(self, D, F):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(D, F), nn.Linear(F, D)

    def forward(self, x):
        return self.w_2(nn.functional.silu(self.w_1(x)))


class ConvModule(nn.Module):
    """ESPnet's ConvolutionModule (padding zeroed before the depthwise convolution)."""

    def __init__(self, D, K, norm):
        super().__init__()
        self.pointwise_conv1 = nn.Conv1d(D, 2 * D, 1)
        self.depthwise_conv = nn.Conv1d(D, D, K, padding=(K - 1) // 2, groups=D)
        self.norm = nn.BatchNorm1d(D) if norm == "batch" else nn.LayerNorm(D)
        self.pointwise_conv2 = nn.Conv1d(D, D, 1)

    def forward(self, x, key_pad):  # [B, T, D]
        x = nn.functional.glu(self.pointwise_conv1(x.transpose(1, 2)), dim=1)
        x = self.depthwise_conv(x.masked_fill(key_pad[:, None, :], 0.0))
        if isinstance(self.norm, nn.BatchNorm1d):
            x = self.norm(x)
        else:
            x = self.norm(x.transpose(1, 2)).transpose(1, 2)
        return self.pointwise_conv2(nn.functional.silu(x)).transpose(1, 2)


class ConformerBlock(nn.Module):
    def __init__(self, D, H, F, K, norm):
        super().__init__()
        self.norm_ff_macaron, self.feed_forward_macaron = nn.LayerNorm(D), FeedForward(D, F)
        self.norm_mha, self.self_attn = nn.LayerNorm(D), RelPositionMHA(D, H)
        self.norm_conv, self.conv_module = nn.LayerNorm(D), ConvModule(D, K, norm)
        self.norm_ff, self.feed_forward = nn.LayerNorm(D), FeedForward(D, F)
        self.norm_final = nn.LayerNorm(D)

    def forward(self, x, pos_emb, key_pad):
        x = x + 0.5 * self.feed_forward_macaron(self.norm_ff_macaron(x))
        x = x + self.self_attn(self.norm_mha(x), pos_emb, key_pad)
        x = x + self.conv_module(self.norm_conv(x), key_pad)
        x = x + 0.5 * self.feed_forward(self.norm_ff(x))
        return self.norm_final(x)


class TorchConformer(nn.Module):
    def __init__(self, D, H, F, K, N, norm="batch"):
        super().__init__()
        self.D = D
        self.layers = nn.ModuleList([ConformerBlock(D, H, F, K, norm) for _ in range(N)])

    def forward(self, x, key_pad):  # [B, T, D]
        pos_emb = rel_positional_encoding(x.shape[1], self.D)
        x = x * math.sqrt(self.D)
        for block in self.layers:
            x = block(x, pos_emb, key_pad)
        return x


class TorchTransformer(nn.Module):
    """torch's pre-norm encoder layers after ESPnet's absolute positional encoding."""

    def __init__(self, D, H, F, N):
        super().__init__()
        self.D = D
        self.layers = nn.ModuleList([nn.TransformerEncoderLayer(D, H, F, dropout=0.0,
                                                                norm_first=True)
                                     for _ in range(N)])
        self.norm = nn.LayerNorm(D)

    def forward(self, x, key_pad):  # [B, T, D]
        x = x * math.sqrt(self.D) + abs_positional_encoding(x.shape[1], self.D)[:, 0][None]
        x = x.transpose(0, 1)
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=key_pad)
        return self.norm(x).transpose(0, 1)


# -- helpers -----------------------------------------------------------------------------------
def _batch(rng, T, B, D, lengths):
    x = rng.standard_normal((T, B, D)).astype(np.float32)
    for b, n in enumerate(lengths):
        x[n:, b] = rng.uniform(-100, 100, (T - n, D))  # garbage that must never matter
    return x, np.asarray(lengths, np.int32)


def _randomise(module, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.rand(p.shape, generator=g) * 1.2 - 0.6)
        for name, b in module.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.rand(b.shape, generator=g) - 0.5)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)


def _layer_model(layer_spec, input_dim, torch_layer, seed=0):
    """A Model with one [[network.layers]] table whose weights come from ``torch_layer`` (and
    a random output layer), plus the torch network of the same weights."""
    model = Model({"layers": [layer_spec]}, input_dim, ["<blk>", "a", "b", "c"])
    _randomise(torch_layer, seed)
    out = nn.Linear(model.net.layers[-2].param_specs(input_dim)[1], 4)
    sd = {f"layers.0.{k}": v for k, v in torch_layer.state_dict().items()}
    sd.update({f"output.{k}": v for k, v in out.state_dict().items()})
    from_torch_state_dict(model, sd)
    return model, out


def _key_pad(lengths, T):
    return torch.arange(T)[None, :] >= torch.from_numpy(lengths.astype(np.int64))[:, None]


# -- layers against torch -----------------------------------------------------------------------
@pytest.mark.parametrize("factor", [4, 6, 8])
def test_conv2d_subsampling_matches_espnet(factor, rng):
    F_in, D, C = 20, 6, 3
    ref = TorchSubsampling(F_in, D, factor, C)
    model, out = _layer_model({"type": "conv2d_subsampling", "dim": D, "factor": factor,
                               "channels": C}, F_in, ref)
    x, lengths = _batch(rng, 40, 4, F_in, [40, 27, 9, 4])
    y, out_len = model(x, lengths)
    want_len = ref.lengths(torch.from_numpy(lengths.astype(np.int64))).clamp(min=0).numpy()
    np.testing.assert_array_equal(out_len, want_len)
    with torch.no_grad():
        for b, n in enumerate(lengths):
            if out_len[b] == 0:  # too short for torch's convolutions
                continue
            logits = out(ref(torch.from_numpy(x[:n, b][None])))[0]
            want = torch.log_softmax(logits, -1).numpy()
            np.testing.assert_allclose(y[:out_len[b], b], want, rtol=1e-4, atol=1e-4)
    assert model.net.layers[1].subsampling == factor


def test_transformer_matches_torch_encoder_layers(rng):
    D, H, F, N = 8, 2, 12, 2
    ref = TorchTransformer(D, H, F, N).eval()
    model, out = _layer_model({"type": "transformer", "dim": D, "heads": H, "ff_dim": F,
                               "num_layers": N}, D, ref)
    x, lengths = _batch(rng, 9, 3, D, [9, 5, 2])
    y, _ = model(x, lengths)
    with torch.no_grad():
        xt = torch.from_numpy(np.ascontiguousarray(x.transpose(1, 0, 2)))
        want = torch.log_softmax(out(ref(xt, _key_pad(lengths, 9))), -1).numpy()
    for b, n in enumerate(lengths):
        np.testing.assert_allclose(y[:n, b], want[b, :n], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("norm", ["batch", "layer"])
def test_conformer_matches_espnet_forward_and_gradients(norm, rng):
    D, H, F, K, N = 8, 2, 12, 5, 2
    ref = TorchConformer(D, H, F, K, N, norm).eval()
    model, out = _layer_model({"type": "conformer", "dim": D, "heads": H, "ff_dim": F,
                               "kernel_size": K, "num_layers": N, "conv_norm": norm}, D, ref)
    x, lengths = _batch(rng, 11, 3, D, [11, 6, 3])
    y, _ = model(x, lengths)
    xt = torch.from_numpy(np.ascontiguousarray(x.transpose(1, 0, 2)))
    logp = torch.log_softmax(out(ref(xt, _key_pad(lengths, 11))), -1)
    for b, n in enumerate(lengths):
        np.testing.assert_allclose(y[:n, b], logp[b, :n].detach().numpy(), rtol=1e-4,
                                   atol=1e-5)
    # gradients of the same scalar, valid frames only (eval mode: batch norm's running stats)
    r = rng.standard_normal(y.shape).astype(np.float32)
    valid = np.arange(11)[:, None] < lengths[None, :]
    r *= valid[:, :, None]
    (logp * torch.from_numpy(np.ascontiguousarray(r.transpose(1, 0, 2)))).sum().backward()
    r_in = input_variable(4)
    loss = O.sum_all(model.log_probs * r_in)
    g = grad(loss, wrt=[p for p in model.params.values() if p.trainable],
             inputs={model.feats: (x, lengths), r_in: (r, lengths)})
    names = {t: a for a, t, _ in _torch_mapping(model)}
    tgrads = to_torch_state_dict_grads(model, g)
    for tname, p in ref.named_parameters():
        np.testing.assert_allclose(tgrads[f"layers.0.{tname}"], p.grad.numpy(), rtol=2e-3,
                                   atol=2e-5, err_msg=names[f"layers.0.{tname}"])


def _torch_mapping(model):
    from asrkit.models.torch_state import _mapping

    return _mapping(model)


def to_torch_state_dict_grads(model, grads):
    """The gradients ``{Parameter: array}`` under torch's names and layouts."""
    from asrkit.layers import torch_layout

    return {t: torch_layout(grads[model.params[a]], layout, True)
            for a, t, layout in _torch_mapping(model) if model.params[a] in grads}


def test_torch_state_round_trip_and_names(rng):
    net = {"layers": [{"type": "conv2d_subsampling", "dim": 8, "channels": 4},
                      {"type": "conformer", "dim": 8, "heads": 2, "kernel_size": 3}]}
    model = Model(net, 13, ["<blk>", "a"])
    sd = to_torch_state_dict(model)
    sub, conf = TorchSubsampling(13, 8, 4, 4), TorchConformer(8, 2, 32, 3, 1)
    torch_net = nn.Module()
    torch_net.layers = nn.ModuleList([sub, conf])
    torch_net.output = nn.Linear(8, 2)
    missing, unexpected = torch_net.load_state_dict({k: torch.from_numpy(v)
                                                     for k, v in sd.items()}, strict=False)
    assert unexpected == [] and all(k.endswith("num_batches_tracked") for k in missing)
    other = Model(net, 13, ["<blk>", "a"])
    from_torch_state_dict(other, torch_net.state_dict())
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(other.state_dict()[k], v, err_msg=k)


# -- gradients and sequences --------------------------------------------------------------------
@pytest.mark.parametrize("layer", [
    lambda: Conv2dSubsampling(3, 4, channels=2),
    lambda: TransformerEncoder(4, 2, 6),
    lambda: ConformerEncoder(4, 2, 6, kernel_size=3, conv_norm="layer"),
])
def test_layers_by_finite_differences(layer, rng):
    lay = layer()
    D = 9 if isinstance(lay, Conv2dSubsampling) else 4
    x = input_variable(D)
    y = lay(x)
    data = rng.standard_normal((12 if D == 9 else 5, 2, D))
    check_grads(y, {x: (data, np.array([data.shape[0], 8 if D == 9 else 3], np.int32))},
                tol=1e-4)


def test_conformer_trains_batch_norm_statistics_on_valid_frames(rng):
    conf = ConformerEncoder(4, 2, 6, kernel_size=3)
    x = input_variable(4)
    y = conf(x)
    data, lengths = _batch(rng, 7, 2, 4, [7, 3])
    before = conf.value("layers.0.conv_module.norm.running_mean").copy()
    y.eval({x: (data, lengths)}, train=True)
    after = conf.value("layers.0.conv_module.norm.running_mean")
    assert not np.allclose(before, after)
    again = ConformerEncoder(4, 2, 6, kernel_size=3)
    x2 = input_variable(4)
    again(x2)
    data2 = data.copy()
    data2[3:, 1] = 7.0  # other padding: the same statistics
    for k, p in conf._params.items():
        again._params[k].set_value(p.value if "running" not in k else
                                   np.full(p.shape, 0.0 if "mean" in k else 1.0, np.float32))
    again(x2).eval({x2: (data2, lengths)}, train=True)
    np.testing.assert_allclose(again.value("layers.0.conv_module.norm.running_mean"), after,
                               rtol=1e-6)


def test_config_errors_name_the_key():
    from asrkit.config.acoustic_net import ConfigError, build_network, parse_network

    with pytest.raises(ConfigError, match=r"#0.heads: 3 heads do not divide dim = 8"):
        parse_network({"layers": [{"type": "conformer", "dim": 8, "heads": 3}]}, "x.toml")
    with pytest.raises(ConfigError, match=r"#0.kernel_size: must be odd"):
        parse_network({"layers": [{"type": "conformer", "dim": 8, "kernel_size": 4}]}, "x")
    with pytest.raises(ConfigError, match=r"#0.factor: unknown 5 \(known: 4, 6, 8\)"):
        parse_network({"layers": [{"type": "conv2d_subsampling", "dim": 8, "factor": 5}]}, "x")
    with pytest.raises(ConfigError, match=r"takes 8-dim input, got 5: put a conv2d_subsampling"):
        build_network({"layers": [{"type": "conformer", "dim": 8, "heads": 2}]}, 5, 3)
    with pytest.raises(ConfigError, match=r"its 5-dim input leaves no feature bins; it needs "
                                          r"at least 7"):
        build_network({"layers": [{"type": "conv2d_subsampling", "dim": 8}]}, 5, 3)
