"""A small streaming Conformer-CTC model trained on the synthetic tone "speech" of
tests/recognizer/tone_lstm.py, for the streaming tests and latency figures
(``python -m tests.streaming.tone_conformer OUT``).

The corpus, features (40-dim fbank, sliding CMVN), graph and packaging are tone_lstm's; the
network is a Conv2d x4 front end (40 ms per output frame) and two Conformer blocks whose
attention sees chunks of 4 output frames (160 ms) and 4 chunks of left context, with a causal
depthwise convolution: ``asrkit.recognizer.model_stream`` runs it chunk by chunk with the very
outputs of the whole-utterance network. The packaged folder is kept in
``tests/streaming/data/tone_conformer`` (about 200 kB), so the tests never train.
"""

from __future__ import annotations

import os
import sys

from tests.recognizer.tone_lstm import TRAIN_CONFIG, build

FOLDER = os.path.join(os.path.dirname(__file__), "data", "tone_conformer")

NETWORK = """
[network]
seed = 0
[[network.layers]]
type = "conv2d_subsampling"
dim = 32
factor = 4
channels = 8
[[network.layers]]
type = "conformer"
dim = 32
heads = 4
ff_dim = 64
num_layers = 2
kernel_size = 7
chunk_size = 4           # output frames (160 ms) per attention chunk
left_chunks = 4          # 640 ms of left context
"""

# tone_lstm's reader, criterion and learner; more epochs (attention wants a warm-up)
CONFIG = NETWORK + TRAIN_CONFIG[TRAIN_CONFIG.index("[criterion]"):].replace(
    "epochs = 15", "epochs = 25").replace("warmup_steps = 20", "warmup_steps = 100")


if __name__ == "__main__":
    build(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else FOLDER, config=CONFIG)
