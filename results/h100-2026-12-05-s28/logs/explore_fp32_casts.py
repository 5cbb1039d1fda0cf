"""Exploratory (not committed): each lesson kernel with its fp32 casts dropped, on a GPU (bf16/fp16 cases). A
FAILED line ('DID NOT RAISE') is a mistake its check lets pass; the message of each raise is printed."""

import pytest

import utils
from lessons import l04_fused_softmax as L4
from lessons import l07_llm_layer as L7
from utils.mutants import plant

F32 = ".to(tl.float32)"
CASES = {
    "softmax one-block": (L4, "softmax_kernel", [('other=float("-inf"))' + F32, 'other=float("-inf"))')],
                          lambda: L4.check_softmax(L4.softmax, online=False, quiet=True)),
    "softmax online": (L4, "softmax_online_kernel", [('other=float("-inf"))' + F32, 'other=float("-inf"))')] * 1,
                       lambda: L4.check_softmax(L4.softmax, quiet=True)),
    "rmsnorm x": (L7, "rmsnorm_kernel", [("other=0.0)" + F32 + "\n    if", "other=0.0)\n    if")],
                  lambda: L7.check_rmsnorm(L7.rmsnorm, quiet=True)),
    "rmsnorm x and w": (L7, "rmsnorm_kernel", [("other=0.0)" + F32 + "\n    if", "other=0.0)\n    if"),
                                               ("w = tl.load(w_ptr + cols, mask=mask, other=0.0)" + F32,
                                                "w = tl.load(w_ptr + cols, mask=mask, other=0.0)")],
                        lambda: L7.check_rmsnorm(L7.rmsnorm, quiet=True)),
    "swiglu": (L7, "swiglu_kernel", [("other=0.0)" + F32 + "\n    up", "other=0.0)\n    up"),
                                     ("N + cols, mask=mask, other=0.0)" + F32, "N + cols, mask=mask, other=0.0)")],
               lambda: L7.check_swiglu(L7.swiglu, quiet=True)),
    "rope": (L7, "_rope_heads", [("other=0.0)" + F32 + "  # first", "other=0.0)  # first"),
                                 ("other=0.0)" + F32 + "  # second", "other=0.0)  # second")],
             lambda: L7.check_rope(L7.rope, quiet=True)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_cast_dropped(case, monkeypatch, tmp_path):
    module, name, edits, check = CASES[case]
    plant(monkeypatch, tmp_path, module, name, *edits)
    if name == "_rope_heads":
        plant(monkeypatch, tmp_path, module, "rope_kernel")
    try:
        check()
    except AssertionError as e:
        print(f"\n[{case}] FAILS ITS CHECK: {str(e)[:600]}")
        return
    except Exception as e:  # noqa: BLE001
        print(f"\n[{case}] RAISES {type(e).__name__}: {str(e)[:300]}")
        return
    pytest.fail(f"[{case}] passes its check on {utils.mode.current().device}")
