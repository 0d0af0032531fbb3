"""The WFST algorithms against OpenFst (through pynini) on seeded random machines.

Acyclic machines are compared exactly by their weighted relation (every (input, output) string
pair with the semiring sum of its path weights); cyclic ones by shortest distances and n-best
weights. Where OpenFst's result is canonical (determinised and minimised acceptors) the number
of states is compared too.
"""

import numpy as np
import pytest

pynini = pytest.importorskip("pynini")

from asrkit.decoders.fst import (  # noqa: E402
    Fst,
    arcsort,
    closure,
    compose,
    concat,
    connect,
    determinize,
    from_pynini,
    invert,
    is_acyclic,
    minimize,
    paths,
    project,
    push,
    reverse,
    rmepsilon,
    shortest_distance,
    shortest_path,
    string_weights,
    topsort,
    union,
)

SEEDS = range(40)


def random_fst(seed, n_states=5, max_arcs=3, n_labels=3, eps=0.2, acyclic=True,
               acceptor=False, semiring="tropical", dyadic=False, out_eps=None, offset=0.0):
    """A seeded random machine; weights in [offset, offset + 2) (multiples of 1/8 when dyadic).
    Cyclic log-semiring machines need an offset so that the sums over cycles converge."""
    rng = np.random.default_rng(seed)
    src, dst, il, ol, w = [], [], [], [], []
    for s in range(n_states):
        for _ in range(rng.integers(0, max_arcs + 1)):
            if acyclic:
                if s == n_states - 1:
                    break
                d = int(rng.integers(s + 1, n_states))
            else:
                d = int(rng.integers(0, n_states))
            i = 0 if rng.random() < eps else int(rng.integers(1, n_labels + 1))
            if acceptor:
                o = i
            else:
                pe = eps if out_eps is None else out_eps
                o = 0 if rng.random() < pe else int(rng.integers(1, n_labels + 1))
            src.append(s)
            dst.append(d)
            il.append(i)
            ol.append(o)
            w.append(offset + (rng.integers(0, 16) / 8 if dyadic else rng.random() * 2))
    final = np.full(n_states, np.inf)
    nf = int(rng.integers(1, 3))
    for s in rng.choice(n_states, size=nf, replace=False):
        final[s] = rng.integers(0, 16) / 8 if dyadic else rng.random()
    final[n_states - 1] = 0.5
    return Fst(n_states, 0, final, src, dst, il, ol, np.array(w), semiring, dtype=np.float32)


def relation(fst):
    """{(ilabels, olabels): summed weight} of an acyclic machine."""
    return string_weights(fst)


def pynini_relation(pf, semiring):
    return relation(from_pynini(pf).with_semiring(semiring))


def assert_same_relation(a, b, tol=1e-4):
    assert set(a) == set(b), (sorted(set(a) - set(b)), sorted(set(b) - set(a)))
    for k in a:
        assert a[k] == pytest.approx(b[k], abs=tol), k


# -- conversion and text format ----------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS[:10])
def test_text_format_is_read_by_openfst_compiler(seed):
    import pywrapfst

    f = random_fst(seed, acyclic=False)
    compiler = pywrapfst.Compiler(arc_type="standard")
    compiler.write(f.to_text())
    pf = pynini.Fst.from_pywrapfst(compiler.compile())
    # fstcompile renumbers states in order of appearance; compare behaviour, not ids
    g = from_pynini(pf)
    assert g.num_arcs == f.num_arcs
    np.testing.assert_allclose(shortest_distance(g, reverse=True)[g.start],
                               shortest_distance(f, reverse=True)[f.start], rtol=1e-5)
    # and OpenFst's printout reads back into the same machine
    h = Fst.from_text(pf.print())
    np.testing.assert_allclose(np.sort(h.weight), np.sort(f.weight), rtol=1e-5)  # 6 digits


def test_to_pynini_round_trip_keeps_arrays():
    f = random_fst(3, acyclic=False)
    g = from_pynini(f.to_pynini())
    for name in ("src", "dst", "ilabel", "olabel"):
        np.testing.assert_array_equal(getattr(g, name), getattr(f, name))
    np.testing.assert_allclose(g.weight, f.weight, rtol=1e-7)
    np.testing.assert_allclose(g.final, f.final, rtol=1e-7)


# -- composition -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_compose_matches_openfst_relation(seed):
    a = random_fst(seed, eps=0.3)
    b = random_fst(seed + 1000, eps=0.3)
    ours = compose(a, b)
    ref = pynini.compose(a.to_pynini(), b.to_pynini())
    assert_same_relation(relation(ours), pynini_relation(ref, "tropical"))


@pytest.mark.parametrize("seed", SEEDS[:20])
def test_compose_log_semiring_counts_each_path_once(seed):
    # the sequencing filter must not duplicate epsilon paths: visible in log-semiring sums
    a = random_fst(seed, eps=0.4, semiring="log")
    b = random_fst(seed + 77, eps=0.4, semiring="log")
    ours = compose(a, b)
    ref = pynini.compose(a.to_pynini(), b.to_pynini())
    assert_same_relation(relation(ours), pynini_relation(ref, "log"))


@pytest.mark.parametrize("seed", SEEDS[:20])
def test_compose_cyclic_distances_match(seed):
    a = random_fst(seed, acyclic=False, eps=0.3)
    b = random_fst(seed + 500, acyclic=False, eps=0.3)
    ours = compose(a, b)
    ref = from_pynini(pynini.compose(a.to_pynini(), b.to_pynini()))
    d1 = shortest_distance(ours, reverse=True)[ours.start] if ours.start >= 0 else np.inf
    d2 = shortest_distance(ref, reverse=True)[ref.start] if ref.start >= 0 else np.inf
    assert d1 == pytest.approx(d2, abs=1e-4)
    # OpenFst's Connect-ed composition has the same number of states with this filter
    assert ours.num_states == connect(ref).num_states


# -- determinisation and minimisation ----------------------------------------------------------


@pytest.mark.parametrize("semiring", ["tropical", "log"])
@pytest.mark.parametrize("seed", SEEDS)
def test_determinize_acceptor_matches_openfst(seed, semiring):
    a = random_fst(seed, n_states=6, acceptor=True, eps=0.0, semiring=semiring, dyadic=True)
    ours = determinize(a)
    assert ours.is_ideterministic()
    assert_same_relation(relation(ours), relation(a))
    # ours trims first; OpenFst would carry dead states along in its subsets
    ref = pynini.determinize(connect(a).to_pynini(), delta=1.0 / 1024)
    # OpenFst merges subsets whose residual weights agree within delta: looser in log
    assert_same_relation(relation(ours), pynini_relation(ref, semiring), tol=2e-3)
    if semiring == "tropical":
        assert ours.num_states == connect(from_pynini(ref)).num_states


@pytest.mark.parametrize("seed", SEEDS)
def test_determinize_functional_transducer(seed):
    # output = a fixed function of the input label (sometimes epsilon): functional by design
    a = random_fst(seed, n_states=6, acceptor=True, eps=0.0, dyadic=True)
    mapping = np.array([0, 2, 0, 3])
    t = a.replace(olabel=mapping[a.ilabel])
    ours = determinize(t)
    assert ours.is_ideterministic()
    ref = pynini.determinize(t.to_pynini(), delta=1.0 / 1024)
    assert_same_relation(relation(ours), pynini_relation(ref, "tropical"))


def test_determinize_rejects_non_functional():
    from asrkit.decoders.fst.determinization import NonFunctionalError

    t = Fst.from_text("0 1 1 1\n0 2 1 2\n1 3 2 2\n2 3 2 2\n3\n")
    with pytest.raises(NonFunctionalError):
        determinize(t)


@pytest.mark.parametrize("seed", SEEDS)
def test_minimize_matches_openfst_state_count(seed):
    a = random_fst(seed, n_states=7, acceptor=True, eps=0.0, dyadic=True, n_labels=2)
    d = determinize(a)
    ours = minimize(d)
    ref = pynini.minimize(pynini.determinize(a.to_pynini()))
    assert ours.num_states == connect(from_pynini(ref)).num_states
    assert_same_relation(relation(ours), relation(a))


@pytest.mark.parametrize("seed", SEEDS[:20])
def test_minimize_cyclic_deterministic_acceptor(seed):
    # unweighted cyclic DFA: the minimal state count is canonical
    a = random_fst(seed, n_states=7, acceptor=True, eps=0.0, acyclic=False, n_labels=2)
    a = a.replace(weight=np.zeros(a.num_arcs), final=np.where(np.isfinite(a.final), 0, np.inf))
    d = determinize(a)
    ours = minimize(d)
    ref = pynini.minimize(pynini.determinize(a.to_pynini()))
    assert ours.num_states == connect(from_pynini(ref)).num_states
    assert pynini.equivalent(ours.to_pynini(), ref)


@pytest.mark.parametrize("seed", SEEDS[:20])
def test_minimize_keeps_transducer_relation(seed):
    a = random_fst(seed, n_states=6, acceptor=True, eps=0.0, dyadic=True)
    t = a.replace(olabel=np.array([0, 1, 1, 2])[a.ilabel])
    m = minimize(determinize(t))
    assert m.num_states <= determinize(t).num_states
    assert_same_relation(relation(m), relation(t))


# -- epsilon removal, distances, paths ---------------------------------------------------------


@pytest.mark.parametrize("semiring", ["tropical", "log"])
@pytest.mark.parametrize("seed", SEEDS)
def test_rmepsilon_matches_openfst(seed, semiring):
    a = random_fst(seed, eps=0.5, acceptor=True, semiring=semiring)
    ours = rmepsilon(a)
    assert not np.any((ours.ilabel == 0) & (ours.olabel == 0))
    ref = pynini.rmepsilon(a.to_pynini())
    assert_same_relation(relation(ours), pynini_relation(ref, semiring))


@pytest.mark.parametrize("seed", SEEDS[:20])
def test_rmepsilon_with_epsilon_cycles(seed):
    a = random_fst(seed, eps=0.5, acceptor=True, acyclic=False)
    ours = rmepsilon(a)
    ref = from_pynini(pynini.rmepsilon(a.to_pynini()))
    d1 = shortest_distance(ours, reverse=True)[ours.start] if ours.start >= 0 else np.inf
    d2 = shortest_distance(ref, reverse=True)[ref.start] if ref.start >= 0 else np.inf
    assert d1 == pytest.approx(d2, abs=1e-4)


def _pyn_distances(pf, reverse):
    n = pf.num_states()
    d = pynini.shortestdistance(pf, reverse=reverse)
    out = np.full(n, np.inf)
    for s, w in enumerate(d[:n]):
        out[s] = float(w)
    return out


@pytest.mark.parametrize("semiring", ["tropical", "log"])
@pytest.mark.parametrize("seed", SEEDS)
def test_shortest_distance_matches_openfst(seed, semiring):
    a = random_fst(seed, acyclic=seed % 2 == 0, semiring=semiring,
                   offset=1.0 if semiring == "log" else 0.0)
    pf = a.to_pynini()
    for rev in (False, True):
        ours = shortest_distance(a, reverse=rev)
        ref = _pyn_distances(pf, rev)
        np.testing.assert_allclose(ours, ref, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("seed", SEEDS)
def test_nshortest_paths_match_openfst(seed):
    a = random_fst(seed, acyclic=False, eps=0.2, n_states=6)
    ours = shortest_path(a, nshortest=4)
    ref = pynini.shortestpath(a.to_pynini(), nshortest=4)
    ours_w = sorted(w for _, _, w in paths(ours))
    ref_w = sorted(w for _, _, w in paths(from_pynini(ref)))
    np.testing.assert_allclose(ours_w, ref_w, atol=1e-4)
    if ours_w:
        best = shortest_path(a)
        (ins, outs, w), = list(paths(best))
        (rins, routs, rw), = list(paths(from_pynini(pynini.shortestpath(a.to_pynini()))))
        assert w == pytest.approx(rw, abs=1e-4)
        if len(ours_w) < 2 or ours_w[1] - ours_w[0] > 1e-3:  # unique best path
            assert (ins, outs) == (rins, routs)


@pytest.mark.parametrize("semiring", ["tropical", "log"])
@pytest.mark.parametrize("seed", SEEDS[:20])
def test_push_matches_openfst(seed, semiring):
    a = connect(random_fst(seed, semiring=semiring))
    if a.start < 0:
        return
    ours = push(a, "to_initial")
    ref = pynini.push(a.to_pynini(), push_weights=True)
    assert_same_relation(relation(ours), pynini_relation(ref, semiring))
    # after pushing, the weights leaving every non-start state sum to one
    pushed = push(a, "to_initial", remove_total_weight=True)
    for s in range(pushed.num_states):
        ws = [w for _, _, w, _ in pushed.arcs(s)] + [float(pushed.final[s])]
        from asrkit.decoders.fst.semiring import sum_np

        assert sum_np(ws, semiring) == pytest.approx(0.0, abs=1e-4)
    assert_same_relation(relation(push(a, "to_final")), relation(a))


# -- structure ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS[:20])
def test_rational_operations_match_openfst(seed):
    a = random_fst(seed)
    b = random_fst(seed + 300)
    pa, pb = a.to_pynini(), b.to_pynini()
    assert_same_relation(relation(union(a, b)), pynini_relation(pynini.union(pa, pb), "tropical"))
    assert_same_relation(relation(concat(a, b)),
                         pynini_relation(pynini.concat(pa, pb), "tropical"))
    assert_same_relation(relation(invert(a)), pynini_relation(pynini.invert(pa), "tropical"))
    assert_same_relation(relation(project(a, "output")),
                         pynini_relation(pynini.project(pa, "output"), "tropical"))
    assert_same_relation(relation(reverse(a)), pynini_relation(pynini.reverse(pa), "tropical"))
    c = connect(a)
    assert c.num_states == pynini.connect(pa.copy()).num_states()


@pytest.mark.parametrize("kind", ["star", "plus"])
@pytest.mark.parametrize("seed", SEEDS[:10])
def test_closure_matches_openfst(seed, kind):
    a = random_fst(seed, eps=0.0)
    ours = closure(a, kind)
    ref = from_pynini(pynini.closure(a.to_pynini()) if kind == "star"
                      else pynini.closure(a.to_pynini(), 1))
    for n in (1, 3, 6):
        np.testing.assert_allclose(
            sorted(w for _, _, w in paths(shortest_path(ours, n))),
            sorted(w for _, _, w in paths(shortest_path(ref, n))), atol=1e-4)


def test_topsort_and_arcsort():
    a = random_fst(5, n_states=8)
    perm = np.random.default_rng(1).permutation(a.num_states)
    from asrkit.decoders.fst import permute_states

    shuffled = permute_states(a, perm)
    t = topsort(shuffled)
    assert np.all(t.src < t.dst)
    assert_same_relation(relation(t), relation(a))
    with pytest.raises(ValueError, match="cyclic"):
        topsort(random_fst(1, acyclic=False, n_states=4, max_arcs=4))
    s = arcsort(a, "olabel")
    for st in range(s.num_states):
        labs = [o for _, o, _, _ in s.arcs(st)]
        assert labs == sorted(labs)
    assert is_acyclic(a) and not is_acyclic(closure(a))


@pytest.mark.parametrize("seed", SEEDS)
def test_determinize_kernel_equals_python_reference(seed):
    # the njit kernel and its plain-Python twin build the same machine, state for state
    from asrkit.decoders.fst.determinization import NonFunctionalError, determinize_reference

    for semiring in ("tropical", "log"):
        a = random_fst(seed, n_states=7, acceptor=True, eps=0.1, semiring=semiring)
        if seed % 2:
            a = a.replace(olabel=np.array([0, 2, 0, 3])[a.ilabel])  # functional, some eps out
        if seed % 5 == 0:
            a = a.replace(olabel=np.array([0, 2, 1, 3])[a.ilabel],
                          ilabel=np.array([1, 1, 2, 2])[a.ilabel])  # often non-functional
        outcome = []
        for fn in (determinize, determinize_reference):
            try:
                outcome.append(fn(a, max_states=200))
            except (NonFunctionalError, ValueError) as e:
                outcome.append(type(e))
        ours, ref = outcome
        if isinstance(ref, type) or isinstance(ours, type):
            assert ours is ref
            continue
        assert ours.num_states == ref.num_states
        for name in ("src", "dst", "ilabel", "olabel"):
            np.testing.assert_array_equal(getattr(ours, name), getattr(ref, name))
        np.testing.assert_allclose(ours.weight, ref.weight, atol=1e-5)
        np.testing.assert_allclose(ours.final, ref.final, atol=1e-5)


def test_determinize_emits_output_chains():
    # outputs are only known after two labels: the second arc carries both, as a chain
    t = Fst.from_text("0 1 1 5\n0 2 1 6\n1 3 2 7\n2 3 3 8\n3\n")
    d = determinize(t)
    assert d.is_ideterministic()
    assert relation(d) == {((1, 2), (5, 7)): 0.0, ((1, 3), (6, 8)): 0.0}
    f = Fst.from_text("0 1 1 5\n1 2 2 6\n2 3 3 7\n3\n0 4 1 5\n4 5 2 6\n5 6 4 7\n6\n")
    d = determinize(f)
    assert d.num_states == 5
    assert relation(d) == relation(f)


@pytest.mark.parametrize("seed", SEEDS[:20])
def test_minimize_log_semiring_keeps_relation(seed):
    a = random_fst(seed, n_states=7, acceptor=True, eps=0.0, semiring="log", n_labels=2)
    m = minimize(determinize(a))
    assert m.num_states <= determinize(a).num_states
    assert_same_relation(relation(m), relation(a), tol=2e-3)
