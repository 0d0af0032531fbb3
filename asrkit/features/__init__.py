"""Kaldi-compatible feature extraction and augmentation (``asrkit.features``).

Names are imported lazily from the modules that hold them (see ``_EXPORTS``).
"""

from asrkit._lazy import lazy_exports

_EXPORTS = {
    # Kaldi features: 1-D waveform -> float32 [frames, dims]
    "fbank": "asrkit.features.kaldi",
    "mfcc": "asrkit.features.kaldi",
    "spectrogram": "asrkit.features.kaldi",
    "compute": "asrkit.features.kaldi",
    "default_options": "asrkit.features.kaldi",
    "compute_batch": "asrkit.features.batch",
    # normalisation and context
    "cmvn_stats": "asrkit.features.cmvn",
    "accumulate_cmvn_stats": "asrkit.features.cmvn",
    "apply_cmvn": "asrkit.features.cmvn",
    "apply_cmvn_sliding": "asrkit.features.cmvn",
    "apply_cmvn_corpus": "asrkit.features.cmvn",
    "speaker_cmvn_stats": "asrkit.features.cmvn",
    "global_cmvn_stats": "asrkit.features.cmvn",
    "utterance_cmvn_batch": "asrkit.features.cmvn",
    "normalize": "asrkit.features.cmvn",
    "NORMALIZE_MODES": "asrkit.features.cmvn",
    "add_deltas": "asrkit.features.deltas",
    "add_deltas_batch": "asrkit.features.deltas",
    # augmentation and perturbation (seeded)
    "spec_augment": "asrkit.features.augment",
    "time_warp": "asrkit.features.augment",
    "freq_mask": "asrkit.features.augment",
    "time_mask": "asrkit.features.augment",
    "resample": "asrkit.features.perturb",
    "speed_perturb": "asrkit.features.perturb",
    "volume_perturb": "asrkit.features.perturb",
    "add_noise": "asrkit.features.perturb",
    "make_noise": "asrkit.features.perturb",
    "synthetic_rir": "asrkit.features.perturb",
    "reverberate": "asrkit.features.perturb",
    "tempo_perturb": "asrkit.features.perturb",
    "pitch_shift": "asrkit.features.perturb",
    "formant_shift": "asrkit.features.perturb",
    # channel simulation: rooms, microphones, telephone lines, codecs, levels
    "room_impulse_response": "asrkit.features.channel",
    "biquad_coefficients": "asrkit.features.channel",
    "biquad_filter": "asrkit.features.channel",
    "random_mic_eq": "asrkit.features.channel",
    "codec_roundtrip": "asrkit.features.channel",
    "telephone_channel": "asrkit.features.channel",
    "scale_to_level": "asrkit.features.channel",
    "clip": "asrkit.features.channel",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
