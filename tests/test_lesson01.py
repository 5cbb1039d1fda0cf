"""Lesson 01's exercise checks (its exported check_* functions) on the solution, on the classic wrong answers
with the hint each must give, and on stubs; and the lesson's names (one name per meaning across the course)."""

import random
import re

import numpy as np
import pytest

import utils.exercises
from utils.lessons import load

lesson = load("01")

EXERCISES = ["add_bytes", "add_flops", "matmul_flops", "matmul_bytes", "arithmetic_intensity", "ridge_point",
             "is_memory_bound"]  # fmt: skip


@pytest.mark.parametrize("name", EXERCISES)
def test_check_accepts_the_solution(name, capsys):
    getattr(lesson, f"check_{name}")(getattr(lesson, name))
    assert f"✓ {name} agrees with the reference on 20 random cases" in capsys.readouterr().out


WRONG = [
    ("add_bytes", lambda n, s: 2 * n * s, "write of out"),
    ("add_bytes", lambda n, s: 3 * n, "counts elements"),
    ("add_bytes", lambda n, s: None, "forget to `return`"),
    ("add_flops", lambda n: 2 * n, "one FLOP"),
    ("add_flops", lambda n: 3 * n, "elements moved"),
    ("matmul_flops", lambda M, N, K: M * N * K, "two FLOPs"),
    ("matmul_flops", lambda M, N, K: 2 * M * N, "K multiply-adds"),
    ("matmul_bytes", lambda M, N, K, s: (M * K + K * N) * s, "write of C"),
    ("matmul_bytes", lambda M, N, K, s: 3 * M * N * s, "M x K"),
    ("matmul_bytes", lambda M, N, K, s: M * K + K * N + M * N, "multiply by itemsize"),
    ("arithmetic_intensity", lambda f, b: b / f, "upside down"),
    ("ridge_point", lambda c, p: c.tflops[p] / c.bandwidth_gbs, "factor 1000"),
    ("ridge_point", lambda c, p: c.bandwidth_gbs * 1e9 / (c.tflops[p] * 1e12), "upside down"),
    ("is_memory_bound", lambda f, b, c, p: f / b > lesson.ridge_point(c, p), "wrong way round"),
    ("is_memory_bound", lambda f, b, c, p: "yes", "True or False"),
    # session 35: units, itemsizes and conventions named, and is_memory_bound told where it switches
    ("add_bytes", lambda n, s: 3 * n * 4, "use itemsize"),
    ("add_bytes", lambda n, s: 4 * n * s, "only written, not read"),
    ("add_bytes", lambda n, s: 3 * n * s * 8, "counts bits"),
    ("add_bytes", lambda n, s: 3 * n * s / 1e9, "factor 1e9"),
    ("add_flops", lambda n: n / 1e9, "factor 1e9"),
    ("matmul_flops", lambda M, N, K: M * N * (2 * K - 1), "not K - 1"),
    ("matmul_flops", lambda M, N, K: 2 * M * N * K / 1e12, "factor 1e12"),
    ("matmul_bytes", lambda M, N, K, s: (M * K + K * N + 2 * M * N) * s, "C is only written"),
    ("matmul_bytes", lambda M, N, K, s: (M * K + K * N + M * N) * 4, "use itemsize"),
    ("arithmetic_intensity", lambda f, b: f // b, "rounds down"),
    ("ridge_point", lambda c, p: c.tflops[p] * 1e12 / c.bandwidth_gbs, "factor 1000"),
    ("ridge_point", lambda c, p: c.tflops[p] * 1e12 / (c.bandwidth_gbs * 2**30), "GiB/s"),
    ("is_memory_bound", lambda f, b, c, p: f / b < c.tflops[p] / c.bandwidth_gbs, "off by a factor 1e-3"),
    (
        "is_memory_bound",
        lambda f, b, c, p: f / b < lesson.ridge_point(c, "fp32" if p != "fp32" else "bf16"),
        "ridge of",
    ),  # fmt: skip
    ("is_memory_bound", lambda f, b, c, p: f < lesson.ridge_point(c, p), "not at the ridge"),
    ("is_memory_bound", lambda f, b, c, p: f / b > 1, "wrong way round (False below"),
    # session 53: each got no hint (or, at 2 bytes an element, "use itemsize", which it did)
    ("add_bytes", lambda n, s: 6 * n * s, "six arrays' worth"),
    ("add_bytes", lambda n, s: n * s, "one array's worth"),
    ("add_bytes", lambda n, s: 3 * n * s / 8, "that divides by 8"),
    ("add_flops", lambda n: n - 1, "(a reduction)"),
    ("matmul_bytes", lambda M, N, K, s: 2 * (M * K + K * N + M * N) * s, "counted as read and written"),
    ("matmul_bytes", lambda M, N, K, s: (2 * M * N * K + M * N) * s, "loads of the naive triple loop"),
    ("arithmetic_intensity", lambda f, b: f / 1e9 / b, "off by a factor 1e9"),
    ("arithmetic_intensity", lambda f, b: f * b, "that multiplies"),
    ("ridge_point", lambda c, p: c.tflops[p] * 1e12 / c.bandwidth_gbs * 1e9, "a / b * c is (a / b) * c"),
    ("ridge_point", lambda c, p: c.bandwidth_gbs / c.tflops[p] * 1e3, "upside down: the ridge is FLOP/s divided by "
     "bytes/s, and then"),
    ("is_memory_bound", lambda f, b, c, p: f / b < c.tflops[p], "switches at the peak"),
    ("is_memory_bound", lambda f, b, c, p: f / b < c.tflops[p] * 1e3, "TFLOP/s * 1e3"),
    ("is_memory_bound", lambda f, b, c, p: f / b < c.bandwidth_gbs, "switches at the bandwidth in GB/s"),
]  # fmt: skip


@pytest.mark.parametrize("name, wrong, hint", WRONG, ids=[f"{w[0]}-{i}" for i, w in enumerate(WRONG)])
def test_check_names_the_classic_mistake(name, wrong, hint):
    with pytest.raises(AssertionError, match="expected|returned") as err:
        getattr(lesson, f"check_{name}")(wrong, trials=50)
    assert hint in str(err.value)


def test_two_mistakes_that_give_the_same_number_are_both_told():
    """(session 53) Six arrays of 2-byte elements are as many bytes as three of 4 bytes: a {wrong answer: hint} dict
    kept one of the two hints (the other key overwritten), and the learner who counted each array as read and
    written was told to use itemsize, which they did. A 6 n s seen at a 2-byte dtype gets both."""
    with pytest.raises(AssertionError, match="itemsize=2|, 2\\)") as err:
        lesson.check_add_bytes(lambda n, s: 6 * n * s if s == 2 else 3 * n * s, trials=200)
    assert "six arrays' worth" in str(err.value) and "use itemsize (2 here)" in str(err.value)
    with pytest.raises(AssertionError) as err:
        lesson.check_matmul_bytes(lambda M, N, K, s: (2 if s == 2 else 1) * (M * K + K * N + M * N) * s, trials=200)
    assert "counted as read and written" in str(err.value) and "use itemsize (2)" in str(err.value)


def test_ridge_point_of_another_precision_is_caught():
    with pytest.raises(AssertionError, match="precision asked for"):
        lesson.check_ridge_point(
            lambda c, p: c.tflops["fp32" if p != "fp32" else "bf16"] * 1e3 / c.bandwidth_gbs, trials=50
        )


@pytest.mark.parametrize("name", EXERCISES)
def test_stub_fails_with_not_implemented(name):
    def stub(*args):
        raise NotImplementedError

    with pytest.raises(NotImplementedError):
        getattr(lesson, f"check_{name}")(stub)


@pytest.mark.parametrize("trials", [0, -3, 2.5, True])
def test_a_check_never_succeeds_on_zero_trials(trials, capsys):
    with pytest.raises(ValueError, match="trials"):
        lesson.check_add_bytes(lesson.add_bytes, trials=trials)
    assert "✓" not in capsys.readouterr().out


def test_check_answers_reports_the_first_wrong_case():
    with pytest.raises(AssertionError, match=r"f\(3\) returned 4, expected 3\.\nHint: off by one"):
        utils.exercises.check_answers(
            "f", lambda rng: ("f(3)", 4, 3, {4: "off by one"}), trials=5, rng=random.Random(0), quiet=True
        )


def test_check_answers_takes_a_numpy_bool_for_a_yes_or_no():
    """numpy 2 names its bool type "bool": a right np.bool_ (a comparison of numpy floats) is a right answer."""
    yes = np.float64(3.0) < np.float64(5.0)
    utils.exercises.check_answers("f", lambda rng: ("f()", yes, True, {}), trials=1, quiet=True)
    with pytest.raises(AssertionError, match=r"f\(\) returned np.False_, expected True"):
        utils.exercises.check_answers("f", lambda rng: ("f()", ~yes, True, {}), trials=1, quiet=True)


@pytest.mark.parametrize(
    "got, shown", [("12", r"'12' \(str\)"), (True, r"True \(bool\)"), (np.True_, r"np.True_ \(bool\)")]
)
def test_check_answers_refuses_a_number_that_is_not_one(got, shown):
    """ "12" is not 12 and True is not 1: the check names the type returned instead of comparing it."""
    want = 12 if isinstance(got, str) else 1
    assert not utils.exercises.same(got, want)
    with pytest.raises(AssertionError, match=rf"f\(\) returned {shown}; it should return a number"):
        utils.exercises.check_answers("f", lambda rng: ("f()", got, want, {}), trials=1, quiet=True)


def test_lesson_01_defines_no_spec_of_its_own():
    """add_ref, softmax_ref and matmul_ref are the specs of lessons 02, 04 and 05; lesson 01 times PyTorch's ops."""
    for name in ("add_ref", "softmax_ref", "matmul_ref", "vector_add_bytes", "vector_add_flops"):
        assert not hasattr(lesson, name), name


def test_lesson_03_reuses_lesson_01s_counts():
    l03 = load("03")
    assert l03.add_bytes is lesson.add_bytes and l03.add_flops is lesson.add_flops
    assert lesson.add_bytes(1000, 4) == 12_000 and lesson.add_flops(1000) == 1000


# -- session 52: the held-out battery's wrong answers that passed, or got no hint


@pytest.mark.parametrize(
    "name, wrong, hint",
    [
        ("add_bytes", lambda n, s: 3 * n * s / 2**30, "factor 2**30"),  # GiB, not GB: no hint before
        ("add_bytes", lambda n, s: 3 * n * s / 2**20, "KiB, MiB or GiB"),
        ("matmul_bytes", lambda M, N, K, s: (M * K + K * N + M * N) * s / 2**30, "factor 2**30"),
        ("arithmetic_intensity", lambda f, b: round(f / b, 2), re.compile(r"rounded to (\d or )?2( or \d)? decimals")),
        ("arithmetic_intensity", lambda f, b: int(f / b), "int()"),
        ("arithmetic_intensity", lambda f, b: np.float32(f / b), "7 significant digits"),
        ("ridge_point", lambda c, p: c.tflops[p] * 2**40 / (c.bandwidth_gbs * 2**30), "decimal"),
        ("ridge_point", lambda c, p: c.tflops[p] * 2**40 / (c.bandwidth_gbs * 1e9), "decimal"),
    ],
)
def test_check_names_the_binary_unit_and_the_rounding(name, wrong, hint):
    with pytest.raises(AssertionError, match="expected") as err:
        getattr(lesson, f"check_{name}")(wrong, trials=50)
    found = hint.search(str(err.value)) if isinstance(hint, re.Pattern) else hint in str(err.value)
    assert found, str(err.value)


@pytest.mark.parametrize(
    "factor, says",
    [(2.0, "not at the ridge"), (1e9 / 2**30, "GiB/s"), (2**40 / 1e12, "decimal"), (1.024, "decimal")],
)
def test_is_memory_bound_with_a_ridge_a_little_off_is_caught(factor, says):
    """A switch at twice the ridge passed 19 runs in 20 (the cases were 0.01 to 0.9 or 1.1 to 100 ridges), one at
    ridge * 1e9 / 2**30 (GB/s taken for GiB/s) or ridge * 1.1 (TFLOP/s for 2**40) every run; the first two cases now
    sit just below and just above the ridge, at every trials."""
    for _ in range(5):
        with pytest.raises(AssertionError, match="expected") as err:
            lesson.check_is_memory_bound(lambda f, b, c, p: f / b < factor * lesson.ridge_point(c, p), trials=2)
        assert says in str(err.value), str(err.value)


@pytest.mark.parametrize("name", EXERCISES)
def test_a_check_given_the_answer_instead_of_the_function_says_so(name):
    """check_add_bytes(add_bytes(10, 4)) crashed inside the check: "'int' object is not callable"."""
    with pytest.raises(TypeError, match=rf"check_{name} takes the function {name} itself.*check_{name}\({name}\)"):
        getattr(lesson, f"check_{name}")(24000)
