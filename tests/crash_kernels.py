"""Kernels with the mistakes utils.crashes explains, one each, for tests/test_crashes.py: launched there under the
interpreter (or compiled, on a GPU) and compiled for an H100 through utils.offline from this file."""

import triton
import triton.language as tl

SCALE = 0.5  # a global the compiler refuses in a kernel (global_not_constexpr_kernel): it is no tl.constexpr


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    """A correct copy: the launch mistakes are made with it."""
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def block_not_constexpr_kernel(x_ptr, out_ptr, n, BLOCK_SIZE):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def zeros_not_constexpr_kernel(x_ptr, out_ptr, n, BLOCK_SIZE):
    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    tl.store(out_ptr + tl.arange(0, 16), tl.sum(acc))


@triton.jit
def offsets_without_pointer_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(offsets, mask=mask), mask=mask)


@triton.jit
def values_for_pointers_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.load(x, mask=mask), mask=mask)


@triton.jit
def two_block_sizes_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    half = tl.arange(0, BLOCK_SIZE // 2)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + tl.load(x_ptr + half))


@triton.jit
def store_rank_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, x[:, None] + x[None, :])  # an outer sum stored through 1-D pointers


@triton.jit
def mask_one_pointer_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr, mask=offsets < n)
    tl.store(out_ptr + offsets, x, mask=offsets < n)


@triton.jit
def store_one_pointer_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    tl.store(out_ptr, x)


@triton.jit
def small_dot_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    tile = offsets[:, None] * BLOCK_SIZE + offsets[None, :]
    a = tl.load(x_ptr + tile)
    tl.store(out_ptr + tile, tl.dot(a, a))


@triton.jit
def if_on_block_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    if x > 0:
        x = x * 2
    tl.store(out_ptr + offsets, x, mask=offsets < n)


@triton.jit
def break_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    total = 0.0
    for i in range(0, n):
        if i > 3:
            break
        total += tl.load(x_ptr + i)
    tl.store(out_ptr, total)


@triton.jit
def torch_inside_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, torch.exp(x))  # noqa: F821 - the mistake: torch is not a kernel's


@triton.jit
def loop_type_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for start in range(0, n, BLOCK_SIZE):
        acc = tl.load(x_ptr + start + offsets).to(tl.float16)
    tl.store(out_ptr + offsets, acc)


@triton.jit
def dot_of_two_dtypes_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    tile = offsets[:, None] * BLOCK_SIZE + offsets[None, :]
    a = tl.load(x_ptr + tile)
    tl.store(out_ptr + tile, tl.dot(a, a.to(tl.float16)))


@triton.jit
def dot_of_misfit_tiles_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    rows, cols = tl.arange(0, BLOCK_SIZE), tl.arange(0, 2 * BLOCK_SIZE)
    a = tl.load(x_ptr + rows[:, None] * BLOCK_SIZE + rows[None, :])  # BLOCK x BLOCK
    b = tl.load(x_ptr + cols[:, None] * BLOCK_SIZE + rows[None, :])  # 2 BLOCK x BLOCK: its rows are not a's columns
    tl.store(out_ptr + rows[:, None] * BLOCK_SIZE + rows[None, :], tl.dot(a, b))


@triton.jit
def reduction_with_dim_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets[:, None] * BLOCK_SIZE + offsets[None, :])
    tl.store(out_ptr + offsets, tl.max(x, dim=1))


@triton.jit
def number_method_kernel(x_ptr, out_ptr, scale, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, x * scale.to(tl.float32))  # scale: a Python float under the interpreter, no .to


@triton.jit
def torch_method_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, x.float())


@triton.jit
def reduction_axis_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets[:, None] * BLOCK_SIZE + offsets[None, :])
    tl.store(out_ptr + offsets, tl.sum(x, axis=2))


@triton.jit
def indexed_block_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, x - x[0])


@triton.jit
def python_max_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, x - max(x))


@triton.jit
def where_two_args_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, tl.where(offsets < n, x))


@triton.jit
def argmax_no_axis_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr, tl.argmax(tl.load(x_ptr + offsets)).to(tl.float32))


@triton.jit
def int_mask_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = n - offsets
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def exp_of_fp16_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets).to(tl.float16)
    tl.store(out_ptr + offsets, tl.exp(x))  # tl.exp, tl.log, tl.sqrt ... take fp32 and fp64 only


@triton.jit
def store_other_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n, other=0.0)


@triton.jit
def dot_1d_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    a = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, tl.dot(a, a))


@triton.jit
def dot_acc_shape_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    tile = offsets[:, None] * BLOCK_SIZE + offsets[None, :]
    a = tl.load(x_ptr + tile)
    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    acc = tl.dot(a, a, acc)
    tl.store(out_ptr + offsets, acc)


@triton.jit
def dot_acc_fp16_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    tile = offsets[:, None] * BLOCK_SIZE + offsets[None, :]
    a = tl.load(x_ptr + tile).to(tl.float16)
    acc = tl.zeros((BLOCK_SIZE, BLOCK_SIZE), dtype=tl.float16)  # the product is fp32 unless out_dtype says otherwise
    acc = tl.dot(a, a, acc)
    tl.store(out_ptr + tile, acc)


@triton.jit
def zeros_int_shape_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    acc = tl.zeros(BLOCK_SIZE, dtype=tl.float32)
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, acc)


@triton.jit
def list_append_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    parts = []  # compiled, a tuple: no append (the interpreter's Python list took it)
    parts.append(tl.load(x_ptr + offsets))
    tl.store(out_ptr + offsets, parts[0])


@triton.jit
def list_comprehension_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    parts = [tl.load(x_ptr + offsets + i) for i in range(2)]  # compiled, only tuple comprehensions
    tl.store(out_ptr + offsets, parts[0] + parts[1])


@triton.jit
def loop_local_after_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for i in range(2):
        scale = tl.load(x_ptr + offsets + i)  # first assigned in the loop: compiled, gone after it
        acc += scale
    tl.store(out_ptr + offsets, acc * scale)


@triton.jit
def if_local_after_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    if tl.program_id(0) == 0:
        scale = tl.load(x_ptr + offsets)  # first assigned in a run-time if's branch: compiled, gone after it
    tl.store(out_ptr + offsets, scale)


@triton.jit
def branch_type_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    acc = 0  # an int32 number: the branch makes it a block of floats
    if tl.program_id(0) == 0:
        acc = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, acc)


@triton.jit
def branches_two_types_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    if tl.program_id(0) == 0:
        y = tl.load(x_ptr + offsets)
    else:
        y = 0  # an int32 number, the other branch a block of floats
    tl.store(out_ptr + offsets, y)


@triton.jit
def return_value_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    return tl.load(x_ptr + offsets) * 2  # a Python habit: compiled, a kernel returns nothing


@triton.jit
def global_not_constexpr_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) * SCALE)


@triton.jit
def atomic_add_values_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)
    tl.atomic_add(offsets, x)


@triton.jit
def tensor_desc_load_block_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    desc = tl.make_tensor_descriptor(x_ptr, shape=[n], strides=[1], block_shape=[BLOCK_SIZE])
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, desc.load(offsets))


@triton.jit
def tensor_desc_tl_load_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    desc = tl.make_tensor_descriptor(x_ptr, shape=[n], strides=[1], block_shape=[BLOCK_SIZE])
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.load(desc + offsets))


@triton.jit
def tensor_desc_strides_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    desc = tl.make_tensor_descriptor(x_ptr, shape=[n, n], strides=[1, n], block_shape=[BLOCK_SIZE, BLOCK_SIZE])
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.sum(desc.load([0, 0]), axis=1))


@triton.jit
def len_of_block_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, x / len(x))


@triton.jit
def pointer_indexed_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.load(x_ptr[offsets], mask=offsets < n), mask=offsets < n)


@triton.jit
def pow_block_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, x**2)


@triton.jit
def dtype_called_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.float32(tl.load(x_ptr + offsets)))


@triton.jit
def pid_axis_3_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(3) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


@triton.jit
def shift_float_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, (x >> 4) & 0xF)


@triton.jit
def float_range_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for start in range(0, n / BLOCK_SIZE):  # the interpreter runs a float bound
        acc += tl.load(x_ptr + start * BLOCK_SIZE + offsets)
    tl.store(out_ptr + offsets, acc)


@triton.jit
def static_assert_fails_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    tl.static_assert(BLOCK_SIZE % 64 == 0, "BLOCK_SIZE must be a multiple of 64")
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))


@triton.jit
def dtype_constexpr_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr, DTYPE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets).to(DTYPE).to(tl.float32))


@triton.jit
def accumulator_from_a_number_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    acc = 0.0  # a number: the loop makes it a block of BLOCK_SIZE
    for start in range(0, n, BLOCK_SIZE):
        acc += tl.load(x_ptr + start + offsets, mask=start + offsets < n, other=0.0)
    tl.store(out_ptr + offsets, acc)
