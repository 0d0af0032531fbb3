"""The LM graph on the cuda device (numba's simulator without a GPU): same costs as the CPU."""

import numpy as np
import pytest

from asrkit.nnlm import LstmLM, Vocabulary


@pytest.mark.cuda
@pytest.mark.filterwarnings("ignore:asrkit.graph cuda backend")
def test_scores_on_cuda_equal_cpu():
    lm = LstmLM.create(Vocabulary(["<unk>", "<s>", "</s>", "a", "b"]), 3, 4, seed=0)
    sentences = ["a b a", "b"]
    cpu = lm.score_sentences(sentences)
    lm.device = "cuda"
    np.testing.assert_allclose(lm.score_sentences(sentences), cpu, rtol=1e-5, atol=1e-5)
