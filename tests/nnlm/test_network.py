"""The LM graph: the output-layer op and the criterion's gradients by finite differences."""

import numpy as np
import pytest

import asrkit.ops as O
from asrkit.graph import ShapeError, check_grads, input_variable, parameter
from asrkit.nnlm import LstmLM, Vocabulary
from asrkit.nnlm.ops import affine
from asrkit.nnlm.training import make_feeds


def test_affine_matches_times_and_has_exact_gradients(rng):
    x = input_variable(3)
    W = parameter((3, 5), init=rng.standard_normal((3, 5)))
    b = parameter((5,), init=rng.standard_normal(5))
    data = rng.standard_normal((4, 2, 3)).astype(np.float32)
    lengths = np.array([4, 2], np.int32)
    got = affine(x, W, b).eval({x: (data, lengths)})
    want = (O.times(x, W) + b).eval({x: (data, lengths)})
    np.testing.assert_allclose(got.data, want.data, rtol=1e-6, atol=1e-6)
    assert np.all(got.data[2:, 1] == 0)  # padding stays zero
    check_grads(O.sum_all(O.tanh(affine(x, W, b))), {x: (data, lengths)})


def test_affine_shape_errors_name_the_op():
    x = input_variable(3)
    with pytest.raises(ShapeError, match="nnlm_affine"):
        affine(x, parameter((4, 5)), parameter((5,)))
    with pytest.raises(ShapeError, match="b has 4 entries"):
        affine(x, parameter((3, 5)), parameter((4,)))


@pytest.mark.parametrize("tied", [False, True])
def test_lm_criterion_gradients_by_finite_differences(tied):
    voc = Vocabulary(["<unk>", "<s>", "</s>", "a", "b"])
    lm = LstmLM.create(voc, embed_dim=2, hidden_dim=3, num_layers=2, tie_embeddings=tied,
                       seed=1)
    net = lm.network
    words, targets, lengths = make_feeds([np.array([3, 4, 3]), np.array([4])], 1, 2)
    check_grads(O.sum_all(net.cost), {net.words: (words, lengths),
                                      net.targets: (targets, lengths)}, tol=1e-4)


def test_fused_output_cross_entropy_matches_the_composite(rng):
    from asrkit.nnlm.ops import output_xent

    h = input_variable(3)
    t = input_variable((), np.int32)
    W = parameter((3, 6), init=rng.standard_normal((3, 6)))
    b = parameter((6,), init=rng.standard_normal(6))
    mask = np.zeros(6, np.float32)
    mask[1] = -1e9
    data = rng.standard_normal((4, 3, 3)).astype(np.float32)
    targets = rng.choice([0, 2, 3, 4, 5], (4, 3)).astype(np.int32)
    lengths = np.array([4, 1, 3], np.int32)
    feeds = {h: (data, lengths), t: (targets, lengths)}
    fused = output_xent(h, W, b, mask, t)
    comp = O.cross_entropy_with_softmax(O.times(h, W) + b + mask, t)
    np.testing.assert_allclose(fused.eval(feeds).data, comp.eval(feeds).data, rtol=1e-5,
                               atol=1e-6)
    assert np.all(fused.eval(feeds).data[1:, 1] == 0)
    check_grads(O.sum_all(output_xent(O.tanh(h), W, b, mask, t)), feeds, wrt=[h, W, b])
    with pytest.raises(ValueError, match=r"target \d+ is outside the vocabulary \[0, 6\)"):
        output_xent(h, W, b, mask, t).eval({h: (data, lengths), t: (targets + 9, lengths)})
