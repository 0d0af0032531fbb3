"""What the decoders and graph readers do with bad input: errors that name the option, the file
and the line; nothing a search could loop on or index out of bounds with."""

import math
import pathlib
import shutil

import numpy as np
import pytest

from asrkit.decoders.ctc import ctc_greedy, ctc_prefix_beam_search
from asrkit.decoders.decode import DecodeOptions, DecodingGraph, decode_utterance
from asrkit.decoders.fst import SymbolTable, fst_from_text, load_fst, read_fst_text
from asrkit.decoders.graph import make_graph, read_word_weights
from asrkit.decoders.viterbi import GraphArrays, viterbi_decode

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "graph"
TOKENS, LEXICON = DATA / "tokens.txt", DATA / "lexicon.txt"


@pytest.fixture(scope="module")
def loop_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("loop") / "g"
    make_graph(TOKENS, LEXICON, word_loop=True).write(folder)
    return folder


def log_softmax(x):
    return (x - np.log(np.exp(x).sum(axis=1, keepdims=True))).astype(np.float32)


@pytest.mark.parametrize("field,value,message", [
    ("beam", -5.0, "beam must be a finite number > 0, got -5.0"),
    ("beam", math.nan, "beam must be a finite number > 0, got nan"),
    ("max_active", 0, "max_active must be an integer >= 1, got 0"),
    ("min_active", -1, "min_active must be an integer >= 0"),
    ("acoustic_scale", math.inf, "acoustic_scale must be a finite number > 0, got inf"),
    ("word_insertion_penalty", math.nan, "word_insertion_penalty must be a finite number"),
    ("lattice_beam", 0.0, "lattice_beam must be a finite number > 0"),
    ("nbest", -3, "nbest must be an integer >= 1, got -3"),
    ("nbest", 2.5, "nbest must be an integer >= 1, got 2.5"),
    ("frame_shift", 0.0, "frame_shift must be a finite number > 0"),
])
def test_decode_options_refuse_values_no_search_can_use(field, value, message):
    with pytest.raises(ValueError, match=message):
        DecodeOptions(**{field: value})


def test_viterbi_and_ctc_decoders_check_their_options(loop_folder, rng):
    graph = DecodingGraph.load(str(loop_folder))
    scores = log_softmax(rng.normal(size=(12, 9)))
    with pytest.raises(ValueError, match="beam must be a finite number > 0"):
        viterbi_decode(graph.arrays, scores, beam=math.nan)
    for kwargs, message in ((dict(beam=0), "beam must be an integer >= 1"),
                            (dict(nbest=-1), "nbest must be an integer >= 1"),
                            (dict(token_beam=math.nan), "token_beam must be a number >= 0"),
                            (dict(lm_weight=math.inf), "lm_weight must be a finite number"),
                            (dict(blank=9), "blank must be a token id below 9"),
                            (dict(length=13), "length 13 exceeds the 12 frames")):
        with pytest.raises(ValueError, match=message):
            ctc_prefix_beam_search(scores, **kwargs)
    with pytest.raises(ValueError, match="blank must be an integer >= 0"):
        ctc_greedy(scores, blank=-1)


def test_scores_with_nan_or_plus_inf_are_refused_naming_the_frame(loop_folder, rng):
    graph = DecodingGraph.load(str(loop_folder))
    scores = log_softmax(rng.normal(size=(12, 9)))
    scores[:, 3] = -np.inf  # probability 0 is a score like any other
    assert decode_utterance(graph, scores).reached_final
    for bad in (np.nan, np.inf):
        s = scores.copy()
        s[7, 2] = bad
        with pytest.raises(ValueError, match="NaN or \\+inf \\(first at frame 7 of 12\\)"):
            decode_utterance(graph, s)
        with pytest.raises(ValueError, match="first at frame 7"):
            ctc_greedy(s)


def test_a_negative_epsilon_cycle_is_refused_and_a_positive_one_is_not():
    def arrays(w):
        return GraphArrays.from_arcs(3, 0, [(0, 1, 1, 0, 0.0), (1, 2, 0, 0, w),
                                            (2, 1, 0, 0, w), (1, 1, 2, 0, 0.5)], {1: 0.0})
    arrays(0.25).check()
    with pytest.raises(ValueError, match="g.npz: a cycle of epsilon arcs has a negative"):
        arrays(-0.25).check("g.npz")


def test_graph_folder_files_are_checked_against_each_other(loop_folder, tmp_path):
    def copy(name):
        folder = tmp_path / name
        shutil.copytree(loop_folder, folder)
        return folder

    folder = copy("words")
    words = (folder / "words.txt").read_text().splitlines()
    (folder / "words.txt").write_text("\n".join(w for w in words if not w.startswith("cat "))
                                      + "\n")
    with pytest.raises(ValueError, match="words.txt: has no word for TLG's output label"):
        DecodingGraph.load(str(folder))
    folder = copy("json")
    text = (folder / "graph.json").read_text()
    (folder / "graph.json").write_text(text.replace('"ilabel_offset": 1', '"ilabel_offset": 0'))
    with pytest.raises(ValueError, match="graph.json: ilabel_offset is 0"):
        DecodingGraph.load(str(folder))
    (folder / "graph.json").write_text(text.replace('"num_tokens": 9', '"num_tokens": 5'))
    with pytest.raises(ValueError, match="TLG.npz: input label 9 is beyond the 5 tokens"):
        DecodingGraph.load(str(folder))
    (folder / "graph.json").write_text(text[:-20])
    with pytest.raises(ValueError, match="graph.json:\\d+: not JSON"):
        DecodingGraph.load(str(folder))
    folder = copy("npz")
    data = bytearray((folder / "TLG.npz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / "TLG.npz").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="TLG.npz: (damaged|not an) asrkit binary FST"):
        load_fst(folder / "TLG.npz")
    data = bytearray((loop_folder / "TLG.npz").read_bytes())
    central = bytes(data).index(b"PK\x01\x02")  # first central-directory record
    data[central + 10] = 99  # its compression method: zipfile raises NotImplementedError
    (folder / "TLG.npz").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="TLG.npz: damaged asrkit binary FST"):
        load_fst(folder / "TLG.npz")


def test_symbol_and_fst_text_errors_name_file_and_line(tmp_path):
    path = tmp_path / "words.txt"
    path.write_bytes(b"<eps> 0\na 1\n\xff 2\n")
    with pytest.raises(ValueError, match=f"{path}:3: not UTF-8"):
        SymbolTable.read_text(path)
    path.write_text("<eps> 0\na 3000000000\n")
    with pytest.raises(ValueError, match=f"{path}:2: .*outside 0..2147483647"):
        SymbolTable.read_text(path)
    for line, message in (("0 1 5 5 nan", "weight 'nan' is not a valid weight"),
                          ("0 1 5 5 -inf", "weight '-inf' is not a valid weight"),
                          ("0 1 99999999999 1", "input label .* is outside 0..2147483647"),
                          ("0 9999999 1 1", "state id 9999999 is far beyond")):
        with pytest.raises(ValueError, match=f"x.fst:2: {message}"):
            fst_from_text("0 1 1 1\n" + line + "\n", name="x.fst")
    fst = fst_from_text("0 1 1 1 inf\n1\n")  # +inf is the semiring zero: allowed
    assert fst.weight[0] == np.inf
    with pytest.raises(IsADirectoryError):
        read_fst_text(tmp_path)


def test_word_loop_weights_name_file_and_line(tmp_path):
    path = tmp_path / "w.txt"
    for text, message in (("cat 1\ndog nan\n", ":2: expected 'word weight' with a finite"),
                          ("cat 1\ndog inf\n", ":2: expected 'word weight' with a finite"),
                          ("cat 1\ndog 0\n", ":2: expected"), ("cat 1\ncat 2\n", ":2: .*twice"),
                          ("cat 1\nemu 2\n", ":2: word 'emu' is not in the lexicon"),
                          ("\n\n", ": no words"),
                          ("cat 1e308\ndog 1e308\n", ": the weights add up")):
        path.write_text(text)
        with pytest.raises(ValueError, match=f"{path}{message}"):
            read_word_weights(path, known=["cat", "dog"])
    path.write_text("cat 1\ndog 3\n")
    assert read_word_weights(path, known=["cat", "dog"]) == {"cat": 1.0, "dog": 3.0}


def test_text_tables_and_hotwords_that_are_not_utf8_name_file_and_line(tmp_path):
    from asrkit.decoders.context_graph import read_hotwords
    from asrkit.decoders.scoring import read_text_table

    path = tmp_path / "text"
    path.write_bytes(b"u1 the cat\nu2 a \xfe dog\n")
    with pytest.raises(ValueError, match=f"{path}:2: not UTF-8"):
        read_text_table(path)
    path.write_bytes(b"u1 the cat\nu1 a dog\n")
    with pytest.raises(ValueError, match=f"{path}:2: duplicate utterance id 'u1'"):
        read_text_table(path)
    path.write_bytes(b"u1 the cat\n\nu2  a  dog \n")
    assert read_text_table(path) == {"u1": "the cat", "u2": "a  dog"}
    path.write_bytes(b"HELLO WORLD :2.5\n\xff\n")
    with pytest.raises(ValueError, match=f"{path}:2: not UTF-8"):
        read_hotwords(path)
    with pytest.raises(IsADirectoryError):
        read_text_table(tmp_path)


def test_tokens_files_that_are_not_utf8_or_not_files_are_named(tmp_path):
    from asrkit.io.tokens import TokenError, TokenTable

    path = tmp_path / "tokens.txt"
    path.write_bytes(b"<blk> 0\n\xe9 1\n")
    with pytest.raises(TokenError, match=f"^{path}:2: not UTF-8"):
        TokenTable.read(path)
    with pytest.raises(TokenError, match=f"^{tmp_path}: is not a file"):
        TokenTable.read(tmp_path)
    path.write_text("<blk> 0\r\na 1\r\n")  # Windows line ends read as before
    assert TokenTable.read(path).symbols == ["<blk>", "a"]
