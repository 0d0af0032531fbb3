"""Kaldi fbank/MFCC: asrkit against kaldi-native-fbank (knf), on one long file and on a batch.

knf is called the way its users call it: ``OnlineFbank``/``OnlineMfcc``, the whole waveform in
one ``accept_waveform``, ``input_finished``, then ``get_frame`` for every frame. asrkit runs
``fbank``/``mfcc`` on the long file and ``compute_batch`` (all CPUs) on the batch. Inputs are
seeded synthetic int16-scale audio (tones plus noise) at 16 kHz unless ``--wav`` is given.
"""

from __future__ import annotations

import numpy as np

from asrkit.bench import Case, median_time

NAME = "fbank"
HELP = "Kaldi fbank/MFCC vs kaldi-native-fbank: one long file and a batch of short files"

SAMPLE_RATE = 16000


def add_arguments(parser) -> None:
    """Options: --seconds, --files, --min-seconds/--max-seconds, --threads, --dither, --wav."""
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="length of the long file in seconds (default 60)")
    parser.add_argument("--wav", default=None,
                        help="use this audio file (16 kHz) as the long file instead")
    parser.add_argument("--files", type=int, default=1000,
                        help="number of files in the batch (default 1000; 0 skips the batch)")
    parser.add_argument("--min-seconds", type=float, default=1.0, help="shortest batch file")
    parser.add_argument("--max-seconds", type=float, default=3.0, help="longest batch file")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for compute_batch (default: all CPUs)")
    parser.add_argument("--dither", type=float, default=0.0,
                        help="dither for both libraries (default 0; Kaldi's default is 1.0)")


def synthetic_audio(num_samples: int, rng: np.random.Generator) -> np.ndarray:
    """Tones with a slow vibrato plus noise, int16 scale: float32 [num_samples]."""
    t = np.arange(num_samples) / SAMPLE_RATE
    f0 = rng.uniform(100, 300)
    x = 6000 * np.sin(2 * np.pi * f0 * t + 3 * np.sin(2 * np.pi * 0.5 * t))
    x += 2000 * np.sin(2 * np.pi * rng.uniform(800, 2500) * t)
    x += rng.standard_normal(num_samples) * 500
    return np.clip(np.round(x), -32768, 32767).astype(np.float32)


def _knf_runner(kind: str, dither: float):
    try:
        import kaldi_native_fbank as knf
    except ImportError:
        return None
    opts = knf.FbankOptions() if kind == "fbank" else knf.MfccOptions()
    opts.frame_opts.dither = dither
    online = knf.OnlineFbank if kind == "fbank" else knf.OnlineMfcc

    def features(wave: np.ndarray) -> np.ndarray:
        comp = online(opts)
        comp.accept_waveform(SAMPLE_RATE, wave)
        comp.input_finished()
        return np.array([comp.get_frame(i) for i in range(comp.num_frames_ready)],
                        dtype=np.float32)

    return features


def _max_rel_diff(ours: list[np.ndarray], ref: list[np.ndarray]) -> float:
    worst = 0.0
    for a, b in zip(ours, ref):
        if b.size:
            worst = max(worst, float(np.abs(a - b).max() / max(1.0, np.abs(b).max())))
    return worst


def run(args) -> list[Case]:
    """Time asrkit and knf on the long file (fbank, mfcc) and on the batch (fbank)."""
    from asrkit.features import compute, compute_batch
    from asrkit.features.batch import default_num_threads

    rng = np.random.default_rng(0)
    if args.wav:
        import soundfile

        long_wave, sr = soundfile.read(args.wav, dtype="int16", always_2d=True)
        if sr != SAMPLE_RATE:
            from asrkit.cli.main import CommandError

            raise CommandError(f"{args.wav}: sample rate {sr} Hz, this benchmark needs 16000 Hz")
        long_wave = long_wave[:, 0].astype(np.float32)
    else:
        long_wave = synthetic_audio(int(args.seconds * SAMPLE_RATE), rng)
    seconds = long_wave.size / SAMPLE_RATE
    opts = {"dither": args.dither}
    cases = []
    for kind in ("fbank", "mfcc"):
        ours = compute(kind, long_wave, **opts)
        knf_fn = _knf_runner(kind, args.dither)
        t_ours = median_time(lambda k=kind: compute(k, long_wave, **opts), repeat=args.repeat)
        extra = {"frames": ours.shape[0], "dims": ours.shape[1]}
        if kind == "fbank":  # the same file through compute_batch, split across threads
            threads = args.threads or default_num_threads()
            t_split = median_time(lambda t=threads: compute_batch(
                "fbank", [long_wave], num_threads=t, **opts), repeat=args.repeat)
            extra[f"asrkit_compute_batch_{threads}_threads_ms"] = round(t_split * 1e3, 1)
        t_ref = None
        if knf_fn is not None:
            t_ref = median_time(lambda f=knf_fn: f(long_wave), repeat=args.repeat)
            if args.dither == 0.0:
                extra["max_rel_diff_vs_knf"] = f"{_max_rel_diff([ours], [knf_fn(long_wave)]):.1e}"
        cases.append(Case(f"{kind} {seconds:.0f} s file", t_ours, "knf", t_ref, extra))

    if args.files > 0:
        lengths = rng.uniform(args.min_seconds, args.max_seconds, size=args.files)
        batch = [synthetic_audio(int(s * SAMPLE_RATE), rng) for s in lengths]
        threads = args.threads or default_num_threads()
        t_ours = median_time(
            lambda: compute_batch("fbank", batch, num_threads=threads, **opts), repeat=args.repeat)
        t_one = median_time(
            lambda: compute_batch("fbank", batch, num_threads=1, **opts), repeat=args.repeat)
        extra = {"threads": threads, "audio_s": round(float(lengths.sum()), 1),
                 "asrkit_1_thread_ms": round(t_one * 1e3, 1)}
        knf_fn = _knf_runner("fbank", args.dither)
        t_ref = None
        if knf_fn is not None:
            t_ref = median_time(lambda: [knf_fn(w) for w in batch], repeat=args.repeat)
            extra["ratio_1_thread"] = f"{t_ref / t_one:.2f}x"
            if args.dither == 0.0:
                sample = batch[:50]
                ours = compute_batch("fbank", sample, num_threads=threads, **opts)
                diff = _max_rel_diff(ours, [knf_fn(w) for w in sample])
                extra["max_rel_diff_vs_knf"] = f"{diff:.1e}"
        cases.append(Case(f"fbank batch of {args.files} files", t_ours, "knf", t_ref, extra))
    return cases
