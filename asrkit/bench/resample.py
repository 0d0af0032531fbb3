"""Resampling: asrkit's polyphase windowed-sinc ``resample`` against scipy and torch.

Two references per rate pair, on the same seeded noise: ``scipy.signal.resample_poly`` (a
polyphase FIR, the usual numpy-world choice) and torchaudio's algorithm as torchaudio runs it
(the same filter bank as asrkit applied by ``torch.nn.functional.conv1d`` with stride ``orig``,
one thread). A reference that is not installed is reported as missing. The speed-perturbation
cases are the rate pairs of factors 0.9 and 1.1 at 16 kHz.
"""

from __future__ import annotations

import math

import numpy as np

from asrkit.bench import Case, median_time

NAME = "resample"
HELP = "windowed-sinc resampling vs scipy.signal.resample_poly and torch conv1d (torchaudio)"

RATE_PAIRS = [(16000, 8000), (8000, 16000), (44100, 16000), (22050, 16000),
              (14400, 16000), (17600, 16000)]  # the last two: speed perturbation 0.9 and 1.1


def add_arguments(parser) -> None:
    """Options: --seconds (length of the test signal)."""
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="length of the signal at the original rate (default 10)")


def _scipy_runner(orig: int, new: int):
    try:
        from scipy.signal import resample_poly
    except ImportError:
        return None
    g = math.gcd(orig, new)
    return lambda x: resample_poly(x, new // g, orig // g)


def _torch_runner(orig: int, new: int):
    try:
        import torch
    except ImportError:
        return None
    from asrkit.features.perturb import sinc_resample_kernel

    g = math.gcd(orig, new)
    o, n = orig // g, new // g
    kernel, width = sinc_resample_kernel(o, n)
    weight = torch.from_numpy(kernel.astype(np.float32))[:, None]

    def run(x):
        with torch.no_grad():
            xt = torch.nn.functional.pad(torch.from_numpy(x)[None], (width, width + o))
            y = torch.nn.functional.conv1d(xt[:, None], weight, stride=o)
            return y.transpose(1, 2).reshape(1, -1)[..., :math.ceil(n * len(x) / o)]

    return run


def run(args) -> list[Case]:
    """Time each rate pair with asrkit and both references; returns the cases."""
    from asrkit.features.perturb import resample

    try:
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    cases = []
    try:
        for orig, new in RATE_PAIRS:
            x = rng.standard_normal(int(args.seconds * orig)).astype(np.float32)
            ours = median_time(lambda x=x, o=orig, n=new: resample(x, o, n), args.repeat)
            label = f"{orig}->{new} Hz, {args.seconds:g} s"
            for ref_name, make in (("scipy resample_poly", _scipy_runner),
                                   ("torch conv1d", _torch_runner)):
                fn = make(orig, new)
                ref = None if fn is None else median_time(lambda fn=fn, x=x: fn(x), args.repeat)
                cases.append(Case(label, ours, ref_name, ref))
    finally:
        if torch is not None:
            torch.set_num_threads(threads)
    return cases
