"""A small streaming Conformer-transducer trained on the synthetic tone "speech" of
tests/recognizer/tone_lstm.py, for the streaming transducer tests and latency figures
(``python -m tests.streaming.tone_conformer_transducer OUT``).

The encoder is tests/streaming/tone_conformer.py's (Conv2d x4 front end, two Conformer blocks
with chunks of 4 output frames, 160 ms, and 4 chunks of left context, causal convolution), its
output projected to the joiner; the prediction network is icefall's stateless one (context 2).
Corpus, features (40-dim fbank, sliding CMVN), reader and learner are tone_lstm's; the folder is
packaged without a graph and kept in ``tests/streaming/data/tone_conformer_transducer``, so the
tests never train.
"""

from __future__ import annotations

import os
import sys

from tests.recognizer.tone_lstm import TRAIN_CONFIG, build
from tests.streaming.tone_conformer import NETWORK

FOLDER = os.path.join(os.path.dirname(__file__), "data", "tone_conformer_transducer")

CRITERION = """[criterion]
type = "transducer"
predictor = "stateless"
predictor_dim = 32
context_size = 2
joiner_dim = 32
"""

_REST = TRAIN_CONFIG[TRAIN_CONFIG.index("[reader]"):]
CONFIG = NETWORK + CRITERION + _REST.replace("epochs = 15", "epochs = 25").replace(
    "warmup_steps = 20", "warmup_steps = 100")


if __name__ == "__main__":
    build(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else FOLDER, config=CONFIG, graph=False)
