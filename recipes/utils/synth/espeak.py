"""eSpeak NG through ctypes, from the `espeakng-loader` wheel (library and voice data from pip).

Only what the data stage needs: pick a voice (language + variant), set rate/pitch/range/word gap,
and synthesise text to int16 samples at the engine's rate (22050 Hz); the IPA it speaks.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

AUDIO_OUTPUT_SYNCHRONOUS = 2
ESPEAK_CHARS_UTF8 = 1
PARAM = {"rate": 1, "volume": 2, "pitch": 3, "range": 4, "wordgap": 7}
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                             ctypes.c_void_p)


class ESpeak:
    """One eSpeak NG engine in synchronous mode (the library is process-global: make one)."""

    def __init__(self):
        import espeakng_loader

        self.data_path = espeakng_loader.get_data_path()
        self.lib = ctypes.CDLL(espeakng_loader.get_library_path())
        self.lib.espeak_Initialize.restype = ctypes.c_int
        self.sample_rate = self.lib.espeak_Initialize(
            AUDIO_OUTPUT_SYNCHRONOUS, 0, self.data_path.encode(), 0)
        if self.sample_rate <= 0:
            raise RuntimeError(f"espeak_Initialize failed (data at {self.data_path})")
        self._chunks: list[np.ndarray] = []
        self._cb = _CALLBACK(self._collect)  # keep a reference: ctypes does not
        self.lib.espeak_SetSynthCallback(self._cb)

    def _collect(self, wav, n, events) -> int:
        if n > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
        return 0

    def variants(self) -> list[str]:
        """Names of the voice variants shipped with the data (e.g. 'f3', 'klatt4', 'Mario')."""
        return sorted(os.listdir(os.path.join(self.data_path, "voices", "!v")))

    def synthesize(self, text: str, voice: str = "en-us", variant: str | None = None,
                   rate: int = 175, pitch: int = 50, pitch_range: int = 50,
                   wordgap: int = 0) -> np.ndarray:
        """Speak ``text``; returns int16 [samples] at ``self.sample_rate``.

        ``rate`` in words per minute (80-450), ``pitch`` and ``pitch_range`` 0-100, ``wordgap``
        extra pause between words in units of 10 ms.
        """
        name = voice if variant is None else f"{voice}+{variant}"
        if self.lib.espeak_SetVoiceByName(name.encode()) != 0:
            raise ValueError(f"eSpeak NG has no voice {name!r}")
        for key, value in (("rate", rate), ("pitch", pitch), ("range", pitch_range),
                           ("wordgap", wordgap)):
            self.lib.espeak_SetParameter(PARAM[key], int(value), 0)
        self._chunks.clear()
        data = text.encode("utf-8")
        self.lib.espeak_Synth(ctypes.c_char_p(data), len(data) + 1, 0, 0, 0, ESPEAK_CHARS_UTF8,
                              None, None)
        self.lib.espeak_Synchronize()
        if not self._chunks:
            return np.zeros(0, np.int16)
        return np.concatenate(self._chunks)

    def ipa(self, text: str, voice: str = "en-us") -> str:
        """IPA that eSpeak NG speaks for ``text`` in ``voice`` (an accent such as 'en-us');
        clauses joined by spaces."""
        fn = self.lib.espeak_TextToPhonemes
        fn.restype = ctypes.c_char_p
        fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
        if self.lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise ValueError(f"eSpeak NG has no voice {voice!r}")
        buf = ctypes.create_string_buffer(text.encode("utf-8"))
        ptr = ctypes.c_void_p(ctypes.addressof(buf))
        parts = []
        ipa_mode = 0x02 | 0x10  # bits 4-7 = 1: IPA; 2: zero-width joiners inside multi-letter names
        while ptr.value:
            out = fn(ctypes.byref(ptr), 1, ipa_mode)  # 1: UTF-8 text
            if out:
                parts.append(out.decode("utf-8"))
        return " ".join(parts).replace("\u200d", "")
