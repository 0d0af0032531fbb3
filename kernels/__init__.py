"""Numba kernels (``asrkit.kernels``): CTC, LSTM and sequence kernels on numpy, CPU and CUDA.

The signatures of ``ctc_loss``, ``lstm_forward`` and ``lstm_backward`` are fixed by DESIGN.md.
Every kernel takes ``device=`` (``"reference"``, ``"cpu"``, ``"cuda"``; None follows the arrays).
Names are imported lazily from the modules that hold them (see ``_EXPORTS``).
"""

from asrkit._lazy import lazy_exports

_EXPORTS = {
    "DEVICES": "asrkit.kernels._device",
    "DeviceUnavailableError": "asrkit.kernels._device",
    "resolve_device": "asrkit.kernels._device",
    "ctc_loss": "asrkit.kernels.ctc",
    "ctc_align": "asrkit.kernels.ctc",
    "ctc_segments": "asrkit.kernels.ctc",
    "rnnt_loss": "asrkit.kernels.rnnt",
    "rnnt_joiner_loss": "asrkit.kernels.rnnt",
    "lstm_forward": "asrkit.kernels.lstm",
    "lstm_backward": "asrkit.kernels.lstm",
    "blstm_forward": "asrkit.kernels.lstm",
    "blstm_backward": "asrkit.kernels.lstm",
    "attention_forward": "asrkit.kernels.attention",
    "attention_backward": "asrkit.kernels.attention",
    "mhsa_forward": "asrkit.kernels.attention",
    "mhsa_backward": "asrkit.kernels.attention",
    "attention_mask": "asrkit.kernels.attention",
    "masked_softmax": "asrkit.kernels.sequence",
    "masked_log_softmax": "asrkit.kernels.sequence",
    "masked_sum": "asrkit.kernels.sequence",
    "masked_mean": "asrkit.kernels.sequence",
    "sequence_reverse": "asrkit.kernels.sequence",
    "splice_frames": "asrkit.kernels.sequence",
    "masked_softmax_backward": "asrkit.kernels.sequence",
    "masked_log_softmax_backward": "asrkit.kernels.sequence",
    "masked_sum_backward": "asrkit.kernels.sequence",
    "masked_mean_backward": "asrkit.kernels.sequence",
    "sequence_reverse_backward": "asrkit.kernels.sequence",
    "splice_frames_backward": "asrkit.kernels.sequence",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
