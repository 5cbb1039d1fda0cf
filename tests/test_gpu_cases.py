"""utils.gpu_cases: the checks' suspects at the GPU's cases, rounded to bf16, on this CPU. Sessions 39 and 40 spent
GPU time on checks whose named mistakes passed in bf16 at the GPU's shapes while the CPU's fp32 cases caught them;
these catch that class here. Each runs in a process of its own (utils.gpu_cases patches utils before the lessons
are imported, since a lesson picks some of its cases when it is imported)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (module, check, seeds, hints allowed to stay untold in every GPU case, with why). One draw each, for make test's
#: time (lesson 07's own test draws check_rmsnorm's inputs ten times). The attention checks take
#: 5-7 s a seed, too long for make test's ten minutes: run by hand (docs/checks.md, session 40), e.g.
#: `python -m utils.gpu_cases lessons.l06_flash_attention "check_attention(out_of, quiet=True)" --seeds 1`
CHECKS = [
    ("lessons.l07_llm_layer", "check_rmsnorm(out_of, quiet=True)", 1, {}),
    ("lessons.l07_llm_layer", "check_swiglu(out_of, quiet=True)", 1, {}),
    ("lessons.l07_llm_layer", "check_rope(out_of, quiet=True)", 1, {}),
    ("lessons.l08_llama_model", "check_decode_gemv(out_of, quiet=True)", 1, {}),
    ("lessons.l08_llama_model", "check_decode_qkv_rope(out_of, quiet=True)", 1, {}),
    ("lessons.l08_llama_model", "check_rope_kv_write(out_of, quiet=True)", 1, {}),
    ("lessons.l12_quantization", "check_w4a16(out_of, quiet=True)", 1, {}),
    ("lessons.l12_quantization", "check_w8a16(out_of, quiet=True)", 1, {}),
    ("lessons.l12_quantization", "check_quantized_decode_gemv(out_of, quiet=True)", 1, {}),
    ("lessons.l12_quantization", "check_quantized_decode_qkv_rope(out_of, quiet=True)", 1, {}),
]


def _untold(calls, setup=""):
    """[(untold, listed)] of utils.gpu_cases.untold for each (module, expression, seeds), in one fresh process."""
    script = textwrap.dedent(
        f"""
        import json
        from utils.gpu_cases import untold
        print(json.dumps([untold(m, e, s, {setup!r}) for m, e, s in {calls!r}]))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_suspect_is_told_apart_in_bf16_in_some_gpu_case():
    """For each check, every suspect it lists (but those allowed, each with its reason) differs from the reference
    by more than bf16's tolerance in at least one of its GPU cases, after rounding to bf16: a learner's kernel with
    that mistake fails the check on a GPU too. All in one process: its imports cost more than most checks."""
    results = _untold([(module, expression, seeds) for module, expression, seeds, _ in CHECKS])
    for (module, expression, _, allowed), (untold, listed) in zip(CHECKS, results):
        assert listed >= 2, f"{expression}: the spy saw {listed} suspects: is it still called?"
        left = {hint: seeds for hint, seeds in untold.items() if not any(hint.startswith(a) for a in allowed)}
        assert not left, f"{module}.{expression}: suspects told apart in no GPU case (by seed): {left}"
        for words in allowed:  # an allowance that no longer applies goes
            assert any(hint.startswith(words) for hint in untold), f"{expression}: {words!r} is told apart now"


def test_a_suspect_bf16_cannot_tell_apart_is_reported():
    """Session 39's weakness, brought back: with the norm's weight 1 +- 0.1 (as lesson 07 drew it before), the
    weight applied before normalising moves a row's output by about 0.5 %, within bf16's tolerance: reported, in
    some of three draws. The other suspects stay told apart."""
    setup = "norm_weight = lambda N, dtype=torch.float32, device=None: (0.9 + 0.2 * torch.rand(N)).to(dtype)"
    [(untold, listed)] = _untold([("lessons.l07_llm_layer", "check_rmsnorm(out_of, quiet=True)", 3)], setup)
    assert list(untold) == ["the weight is applied before normalising: the RMS is of x itself, then x * rstd is "
                            "multiplied by w"], untold  # fmt: skip
    assert listed > 10


def test_a_lesson_imported_before_the_patch_is_refused():
    """A lesson imported before utils.gpu_cases patched Env.pick picked its CPU cases at import: refused (the tests
    above import it after, and pass)."""
    code = "import lessons.l07_llm_layer\nfrom utils.gpu_cases import untold\nuntold('lessons.l07_llm_layer', '1', 1)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode != 0 and "was imported before untold patched utils" in done.stderr, done.stderr[-2000:]
