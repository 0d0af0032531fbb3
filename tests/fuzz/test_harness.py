"""The fuzz harness itself: it tells a clean failure from a traceback, a signal and a hang."""


from tests.fuzz.harness import Result, assert_clean_failure, mutations, run_cli


def test_a_missing_file_is_a_clean_failure(tmp_path):
    res = run_cli(["lm", "ppl", "--lm", str(tmp_path / "nope.arpa"), "--text",
                   str(tmp_path / "nope.txt")])
    assert_clean_failure(res, names="nope")


def test_the_checks_catch_tracebacks_signals_and_hangs():
    tb = Result(["x"], 1, "", "Traceback (most recent call last):\n  ...\nValueError: x\n")
    for bad in (tb, Result(["x"], -11, "", ""), Result(["x"], None, "", ""),
                Result(["x"], 0, "", "")):
        try:
            assert_clean_failure(bad)
        except AssertionError:
            continue
        raise AssertionError(f"not caught: {bad}")


def test_mutations_are_seeded_and_differ_from_the_input():
    data = b"\\data\\\nngram 1=3\n\n\\1-grams:\n-1.0 <s>\n-0.5 a\n-1.0 </s>\n\n\\end\\\n"
    a, b = mutations(data, 7, 20), mutations(data, 7, 20)
    assert a == b
    assert sum(m != data for m in a) >= 15
    assert len({bytes(m) for m in a}) > 10
