"""utils.offline: kernels compiled for an H100 (sm_90) on a machine without a GPU, and what ptxas says of them."""

import re

import pytest

import lessons.l04_fused_softmax as L04
from utils import offline
from utils.mode import current

pytestmark = [
    pytest.mark.skipif(not offline.available(), reason="needs Triton's NVIDIA backend and its ptxas"),
    pytest.mark.slow,
]


def softmax_job(BLOCK_SIZE, **ints):
    return offline.job(
        "softmax_kernel",
        pointers=dict(x_ptr="fp16", out_ptr="fp16"),
        ints=dict(M=4096, N=BLOCK_SIZE, stride_xm=BLOCK_SIZE, stride_om=BLOCK_SIZE, **ints),
        constexprs=dict(BLOCK_SIZE=BLOCK_SIZE),
        num_warps=4,
    )


def test_a_register_cap_reaches_ptxas():
    """job(maxnreg=...) is Triton's launch option of that name: the kernel that takes more registers without it
    takes at most the cap with it."""
    free, capped = offline.compile_kernels(L04.__file__, [softmax_job(4096), {**softmax_job(4096), "maxnreg": 32}])
    assert free.registers > 32 >= capped.registers, (free.registers, capped.registers)


def test_registers_grow_with_the_block_until_they_spill():
    """Lesson 09's table: a one-block softmax row at 4 warps fits in registers at 1024, spills at 32768."""
    small, large = offline.compile_kernels(L04.__file__, [softmax_job(1024), softmax_job(32768)])
    assert small.spill_bytes == 0 and 0 < small.registers < large.registers
    assert large.spill_bytes > 0 and "ld.global" in small.ptx


def test_a_missing_or_unknown_argument_is_named():
    job = softmax_job(1024)
    del job["ints"]["stride_om"]
    job["ints"]["stride"] = 7
    with pytest.raises(RuntimeError, match=r"no value for \['stride_om'\], unknown names \['stride'\]"):
        offline.compile_kernels(L04.__file__, [job])


@pytest.mark.skipif(not current().interpret, reason="launches are recorded under the interpreter (on a GPU they run)")
def test_every_kernel_the_lessons_checks_launch_compiles_for_an_h100():
    """Each lesson's check cells run under the interpreter while every launch is recorded; each kernel is then
    compiled for sm_90 as launched (the interpreter accepts code the compiler refuses: this is where that shows)."""
    jobs, skipped = offline.record_lesson_checks()
    kernels = offline.unique(jobs, by="kernel")
    assert len(kernels) >= 45, f"only {len(kernels)} kernels launched: did the check cells run?"
    assert len(skipped) <= 8, skipped  # the cells that need a notebook-built model
    results = offline.compile_kernels(offline.__file__, kernels, raise_errors=False)
    failed = [f"{j['path']}: {j['kernel']}: {r.error}" for j, r in zip(kernels, results) if r.error]
    assert not failed, "\n\n".join(failed)


def test_a_kernel_the_compiler_refuses_is_reported(tmp_path):
    """The interpreter runs a tl.dot of 8-row tiles; the GPU compiler refuses it (tl.dot needs 16)."""
    module = tmp_path / "tiny_dot.py"
    module.write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def dot_kernel(a_ptr, out_ptr, BLOCK: tl.constexpr):\n"
        "    r = tl.arange(0, BLOCK)\n"
        "    a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])\n"
        "    tl.store(out_ptr + r[:, None] * BLOCK + r[None, :], tl.dot(a, a))\n"
    )
    job = offline.job("dot_kernel", pointers=dict(a_ptr="fp16", out_ptr="fp32"), ints={}, constexprs=dict(BLOCK=8))
    (bad,) = offline.compile_kernels(module, [job], raise_errors=False)
    assert bad.error and "16" in bad.error
    with pytest.raises(RuntimeError, match="dot_kernel"):
        offline.compile_kernels(module, [job])
    job["constexprs"]["BLOCK"] = 16
    (good,) = offline.compile_kernels(module, [job])
    assert good.error is None and good.uses_wgmma or "mma" in good.ptx


def test_a_jit_helper_imported_from_another_folder_of_the_repo_is_compiled_too(tmp_path):
    """A kernel in one folder calling a helper it imports by its package path from another (a sweep in bench/sweeps
    calling lesson 05's grouped_tile or another sweep's barrier), in one import beside names that are not jit
    functions: the copy the compiler reads finds the helper from the nearest folder above that holds it."""
    (tmp_path / "shared").mkdir()
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "shared" / "helpers.py").write_text(
        "import triton\n\n\n@triton.jit\ndef twice(x):\n    return x * 2\n\n\ndef describe():\n    return 'host only'\n"
    )
    module = tmp_path / "sweeps" / "kern.py"
    module.write_text(
        "import triton\nimport triton.language as tl\nfrom shared.helpers import describe, twice\n\n\n@triton.jit\n"
        "def twice_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):\n"
        "    r = tl.arange(0, BLOCK)\n"
        "    tl.store(out_ptr + r, twice(tl.load(x_ptr + r)))\n"
    )
    job = offline.job("twice_kernel", pointers=dict(x_ptr="fp32", out_ptr="fp32"), ints={}, constexprs=dict(BLOCK=128))
    (compiled,) = offline.compile_kernels(module, [job], raise_errors=False)
    assert compiled.error is None, compiled.error
    assert "st.global" in compiled.ptx


def test_a_module_global_annotated_with_a_host_type_is_left_out(tmp_path):
    """Session 31: a test module holding `_ENV: Env | None = None` (an annotation naming a host class, as utils.mode
    has) failed to import in the compiler's copy (NameError: Env), so none of its kernels compiled. An annotated
    global is kept only when its annotation is made of names the copy knows."""
    module = tmp_path / "annotated.py"
    module.write_text(
        "import triton\nimport triton.language as tl\n\n\nclass Env:\n    pass\n\n\n"
        "_ENV: Env | None = None\nBLOCK = tl.constexpr(64)\n\n\n@triton.jit\n"
        "def copy_kernel(x_ptr, out_ptr):\n"
        "    r = tl.arange(0, BLOCK)\n"
        "    tl.store(out_ptr + r, tl.load(x_ptr + r))\n"
    )
    job = offline.job("copy_kernel", pointers=dict(x_ptr="fp32", out_ptr="fp32"), ints={}, constexprs={})
    (compiled,) = offline.compile_kernels(module, [job], raise_errors=False)
    assert compiled.error is None, compiled.error


def test_load_widths_and_the_inner_loop_read_from_ptx(capsys):
    ptx = """
$L__BB0_1:
	ld.global.b16 	%rs1, [%rd1];
$L__BB0_2:                              // =>This Inner Loop Header: Depth=1
	ld.global.L1::evict_last.v4.b32 	{%r1, %r2, %r3, %r4}, [%rd2];
	// begin inline asm
	cp.async.cg.shared.global [ %r5 + 0 ], [ %rd3 + 0 ], 0x10, %r6;
	// end inline asm
	.loc	1 2 3
	@%p1 bra 	$L__BB0_2;
$L__BB0_3:
	ret;
"""
    c = offline.Compiled(ptx=ptx, shared=0, registers=32, spill_bytes=0, ptxas="")
    assert c.global_load_bytes == {2, 16} and c.cp_async_bytes == {16} and c.loop_instructions == 3
    offline.table({"one": c, "broken": offline.Compiled("", None, None, 0, "", error="ptxas: no")})
    out = capsys.readouterr().out
    assert "16 B" in out and "2 B, 16 B" in out and "broken  did not compile: ptxas: no" in out


def test_flash_decodings_tma_kernel_loads_through_tma_for_an_h100():
    """Lesson 08's decode_attention_tma_kernel (issue 11) at the 8192-token shapes' tiles: its keys and values come
    through cp.async.bulk.tensor (TMA), none through cp.async or per-thread loads of the cache, and nothing spills."""
    import lessons.l08_llama_model as L08

    def job(D, BLOCK_N, num_stages):
        return offline.job(
            "decode_attention_tma_kernel",
            pointers=dict(
                q_ptr="bf16", k_ptr="bf16", v_ptr="bf16", lengths_ptr="i32", acc_ptr="fp32", m_ptr="fp32", l_ptr="fp32"
            ),  # fmt: skip
            ints=dict(
                KV=4, GROUP=8, max_len=8192, split_len=512, qk_scale=0.18, stride_cb=8192 * 4 * D, stride_ct=4 * D
            ),  # fmt: skip
            constexprs=dict(HEAD_DIM=D, BLOCK_H=16, BLOCK_N=BLOCK_N, DOT_PRECISION="tf32", PDL=1),
            num_warps=4,
            num_stages=num_stages,
        )

    for c in offline.compile_kernels(L08.__file__, [job(64, 64, 4), job(128, 32, 3)]):
        assert "cp.async.bulk.tensor" in c.ptx and not c.cp_async_bytes, "keys and values not loaded through TMA"
        assert c.global_load_bytes <= {4, 16}, c.global_load_bytes  # lengths and q only, no cache loads by threads
        assert c.spill_bytes == 0


def test_the_local_compaction_holds_fewer_registers_an_element():
    """Lesson 10's one-pass compaction: compact_lookback_local_kernel keeps a value and a slot an element (not a
    flag, a destination, a mask and a 64-bit address), so at the same schedule it needs fewer registers than
    compact_lookback_kernel (more programs fit on an SM: what its speed follows) and, one element a thread, no
    shared memory to rearrange for the scatter; neither spills. With L2_PREFETCH, one bulk prefetch of the block's
    values into L2 (cp.async.bulk.prefetch.L2), and no more registers. Its ticket is a relaxed atomic
    (compact_lookback_kernel's is acq_rel: a fence and an L1 invalidation at every block's start)."""
    import lessons.l10_sort_scan_data as L10

    pointers = dict(values_ptr="fp32", keep_ptr="i1", out_ptr="fp32", status_ptr="i64", ticket_ptr="i64")
    common = dict(BLOCK_SIZE=2048, LOOKBACK=32, TICKET=True, SEM="relaxed", EARLY=0)
    old, new, prefetched = offline.compile_kernels(
        L10.__file__,
        [offline.job("compact_lookback_kernel", pointers=pointers, ints=dict(n=2**28), constexprs=common)]
        + [
            offline.job(
                "compact_lookback_local_kernel",
                pointers=pointers,
                ints=dict(n=2**28),
                constexprs={**common, "PER_THREAD": 1, "L2_PREFETCH": prefetch},
            )
            for prefetch in (False, True)
        ],
    )
    assert old.spill_bytes == 0 and new.spill_bytes == 0 and prefetched.spill_bytes == 0
    assert new.registers <= 0.75 * old.registers, (new.registers, old.registers)
    assert new.shared < old.shared, (new.shared, old.shared)
    assert "prefetch.L2" not in new.ptx and prefetched.ptx.count("cp.async.bulk.prefetch.L2.global") == 1
    assert "acq_rel" in old.ptx and "acq_rel" not in new.ptx  # its ticket is relaxed: no fence at a block's start
    assert prefetched.registers <= new.registers + 2, (prefetched.registers, new.registers)


def _group_by_16_keys(*variants, sass=False):
    """Lesson 10's groupby_partials_kernel as the 16-key query launches it on 10**8 rows (two blocks of 128 rows a
    step, 4-bit counters, factors by groups of four keys, the next step loaded ahead), compiled for sm_90 once per
    dict of constexprs in variants (sass: with its machine code)."""
    import lessons.l10_sort_scan_data as L10

    pointers = dict(key_ptr="i32", value_ptr="fp32", x_ptr="fp32", threshold_ptr="fp32", sums_ptr="fp64")
    pointers.update(counts_ptr="i64", rows_ptr="i64")
    constexprs = dict(BLOCK_SIZE=128, KEYS=16, UNROLL=2, NIBBLES=True, FMA=2, WIDE=False, PREFETCH=True)
    ints = dict(n=10**8, num_keys=16)
    jobs = [offline.job("groupby_partials_kernel", pointers=pointers, ints=ints, constexprs={**constexprs, **v},
                        sass=sass)  # fmt: skip
            for v in variants]  # fmt: skip
    return offline.compile_kernels(L10.__file__, jobs)


def test_the_group_by_asks_rows_into_l2_ahead_without_more_registers():
    """Lesson 10's 16-key group-by with PARTIALS_VARIANT["l2_ahead"]: three bulk prefetches a step (key, value, x) in
    each of its two loops (whole trips and the tail's, each trip two steps written out), and at most a few more
    registers than without (92-96 at (128, 2, 4 warps): 5 programs an SM must still fit)."""
    plain, ahead = _group_by_16_keys({"L2_AHEAD": 0}, {"L2_AHEAD": 2})
    assert "prefetch.L2" not in plain.ptx and ahead.ptx.count("cp.async.bulk.prefetch.L2.global") == 3 * 4
    assert ahead.spill_bytes == 0 and ahead.registers <= plain.registers + 4, (ahead.registers, plain.registers)
    assert ahead.registers * 128 * 5 <= 65536


def test_the_group_by_compares_a_row_by_groups_of_four_keys():
    """Lesson 10's 16-key group-by with PARTIALS_VARIANT["groups"] (FMA = 2): written per key, compiled to one
    compare per distinct group and lane, 8 a row instead of 16 (two rows a step, four steps written out: two a
    trip in each of the two loops; 64 against 128), with as many fp64 multiply-adds, and no spill."""
    keys, groups = _group_by_16_keys({"L2_AHEAD": 2, "FMA": 1}, {"L2_AHEAD": 2, "FMA": 2})
    # the whole kernel: its second pass (by selects, where a sum came out NaN) is the same in both
    assert keys.ptx.count("setp.eq.b32") - groups.ptx.count("setp.eq.b32") == 64, "two rows a step, 8 fewer a row"
    assert keys.ptx.count("fma.rn.f64") == groups.ptx.count("fma.rn.f64") == 128
    assert groups.spill_bytes == 0


def test_the_group_by_issues_fewer_instructions_a_step_over_whole_steps():
    """Lesson 10's 16-key group-by, its machine code (SASS): the loop over whole steps (no masks, the key's range in
    one compare, the nibbles' flush counted down and jumped over, two steps a trip so that the prefetched rows need
    no copy) issues fewer instructions a trip than the tail's loop, and at most 156 a step of 2 x 128 rows where session
    23's single loop issued 184 and session 24's, one step a trip, 163 (this triton's ptxas; the kernel is bound by
    its instructions on an H200, results/h200-2026-11-28-s20/sweeps/l10zb.txt)."""
    (kernel,) = _group_by_16_keys({"L2_AHEAD": 2}, sass=True)
    loops = kernel.sass_loops()
    assert len(loops) == 3, loops  # whole trips, the tail's, the second pass by selects (infinities only)
    (_, whole), (_, tail) = loops[:2]  # a trip: two steps either way
    assert whole < tail and whole / 2 <= 156, loops
    assert kernel.sass.count("UBLKPF.L2") >= 9, "three L2 prefetches a step: two steps in the whole loop, the tail's"


def test_the_group_by_in_pairs_issues_fewer_instructions_a_step():
    """PARTIALS_VARIANT["pairs"]: a program's steps two side by side, so the L2 prefetch covers a pair (three bulk
    prefetches a trip of two steps, in the whole loop and the tail's) and the loop over whole pairs issues fewer
    instructions a step than the loop over steps P apart (sm_90, this triton's ptxas: 142 against 148)."""
    apart, pairs = _group_by_16_keys({"L2_AHEAD": 2}, {"L2_AHEAD": 2, "PAIRS": True}, sass=True)
    (_, step_pair), (_, pair_trip) = apart.sass_loops()[0], pairs.sass_loops()[0]
    assert pair_trip < step_pair - 10, (apart.sass_loops(), pairs.sass_loops())
    assert pairs.ptx.count("cp.async.bulk.prefetch.L2.global") == 3 * 2, "a pair's three columns, in each loop"
    assert pairs.spill_bytes == 0 and pairs.registers * 128 * 5 <= 65536, pairs.registers


def test_the_finish_kernel_releases_the_hosts_flag_after_its_stores():
    """Lesson 10's query_finish_kernel with FLAG (a prepared query's HostMailbox): every thread's stores, then a
    barrier, then one exchange on the flag with release semantics at system scope, the last memory operation; its
    decorator (do_not_specialize) survives the offline copy of the module."""
    import lessons.l10_sort_scan_data as L10

    pointers = dict(sums_ptr="fp64", counts_ptr="i64", rows_ptr="i64", key_ptr="i32", sum_ptr="fp64")
    pointers.update(count_ptr="i64", mean_ptr="fp64", info_ptr="i64", flag_ptr="i64")
    job = offline.job("query_finish_kernel", pointers=pointers, ints=dict(num_keys=16, run=7),
                      constexprs=dict(BLOCK_SIZE=16, FLAG=True))  # fmt: skip
    (kernel,) = offline.compile_kernels(L10.__file__, [job])
    lines = [line.strip() for line in kernel.ptx.splitlines()]
    memory = [i for i, line in enumerate(lines) if re.search(r"\b(st|atom|red)\.global", line)]
    release = [i for i in memory if "atom.global.sys.release.exch" in lines[i]]
    assert len(release) == 1 and release[0] == memory[-1], [lines[i] for i in memory]
    assert any(line.startswith("bar.sync") for line in lines[memory[-2] : release[0]]), "no barrier before the flag"


def test_the_group_by_compiles_where_triton_makes_an_argument_a_constant():
    """Lesson 10's group-by compiled as a call with num_keys = 1 and n = 1 makes it: Triton turns an integer
    argument equal to 1 into a constant, which has no .to() (key_in_range failed so on the H200, session 24, where
    the interpreter passed); int32 and int64 keys."""
    pointers = dict(value_ptr="fp32", x_ptr="fp32", threshold_ptr="fp32", sums_ptr="fp64", counts_ptr="i64")
    pointers.update(rows_ptr="i64")
    constexprs = dict(BLOCK_SIZE=128, KEYS=2, UNROLL=2, NIBBLES=True, FMA=2, WIDE=False, PREFETCH=True, L2_AHEAD=2)
    jobs = [offline.job("groupby_partials_kernel", pointers={**pointers, "key_ptr": key}, ints=dict(n=n, num_keys=1),
                        constexprs=constexprs)  # fmt: skip
            for key in ("i32", "i64") for n in (1, 1000)]  # fmt: skip
    import lessons.l10_sort_scan_data as L10

    assert all(c.error is None for c in offline.compile_kernels(L10.__file__, jobs))


def test_the_group_by_loads_whole_steps_without_masks():
    """Lesson 10's 16-key group-by (as PARTIALS_VARIANT runs it): the loop over whole steps, where this step and
    the next hold no row past n, loads its six blocks of a step (two of each column; two steps a trip) without a
    mask, the tail's loop with one; nothing else loads unmasked but the threshold."""
    (kernel,) = _group_by_16_keys({"L2_AHEAD": 2, "FMA": 2})
    loads = [line.strip() for line in kernel.ptx.splitlines() if "ld.global" in line]
    unmasked = [line for line in loads if not line.startswith("@")]
    assert len(unmasked) == 1 + 2 * 6, unmasked
    assert len(loads) - len(unmasked) >= 6, "the tail's loop (and the first step's loads) keep their masks"
    assert kernel.spill_bytes == 0 and kernel.registers * 128 * 5 <= 65536, kernel.registers


def test_the_workers_source_segments_are_asts_own():
    """(session 38) The compile worker cuts each kernel's source out of its module with a segment function that
    splits the source once (ast.get_source_segment splits it at every call: about 2 s a lesson module); it must cut
    exactly what ast.get_source_segment cuts: CRLF and lone CR line ends, and columns counted in UTF-8 bytes."""
    import ast
    import re

    worker = offline._WORKER
    namespace = {"re": re}
    exec(worker[worker.index("def segments(source):") : worker.index("def module_for(path):")], namespace)
    from pathlib import Path

    lesson_05 = Path(__file__).resolve().parents[1] / "lessons" / "l05_matmul.py"
    sources = ["x = 1\r\n@triton.jit\r\ndef f(a):  # é\r\n    return 'é≈' + a  # ü\r\n\ny = {'k': '—'}\r",
               lesson_05.read_text()]  # fmt: skip
    for source in sources:
        segment = namespace["segments"](source)
        nodes = [n for top in ast.parse(source).body for n in (top, *getattr(top, "decorator_list", []))]
        assert len(nodes) >= 4
        for node in nodes:
            assert segment(node) == ast.get_source_segment(source, node), (node.lineno, type(node).__name__)
    inner = [n for n in ast.walk(ast.parse(sources[0])) if isinstance(n, ast.Constant)]  # columns past é and ≈
    assert inner and all(namespace["segments"](sources[0])(n) == ast.get_source_segment(sources[0], n) for n in inner)
