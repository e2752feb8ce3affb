"""The engine's C++ decode-attention kernel (trainer/engine/kernels.py) against `forward.attend`, its contract in
torch: values, rows of any length, grouped-query heads, strided caches, batch invariance, bad input, and the build."""

import concurrent.futures
import os
import re
import shutil
import signal
import time

import pytest
import torch

from trainer.engine import kernels
from trainer.engine.forward import attend

pytestmark = pytest.mark.skipif(not shutil.which(kernels.COMPILER), reason="the kernel needs a C++ compiler")


@pytest.fixture(scope="module")
def kernel():
    op = kernels.decode_attention_op()
    assert op is not None, "the kernel did not build on a machine with a compiler"
    return op


def random_batch(rows: int, kv_heads: int, groups: int, head_dim: int, capacity: int, lengths: list[int], seed=0):
    """q, the caches as a view of a larger pool (rows start at slot 2, capacity past the longest row), new k/v."""
    g = torch.Generator().manual_seed(seed)
    pool_k = torch.randn(rows + 3, kv_heads, capacity, head_dim, generator=g)
    pool_v = torch.randn(rows + 3, kv_heads, capacity, head_dim, generator=g)
    q = torch.randn(rows, kv_heads, groups, head_dim, generator=g)
    k_new = torch.randn(rows, kv_heads, 1, head_dim, generator=g)
    v_new = torch.randn(rows, kv_heads, 1, head_dim, generator=g)
    return q, pool_k[2 : 2 + rows], pool_v[2 : 2 + rows], torch.tensor(lengths), k_new, v_new


def run_in_forked_child(check, timeout_s: float = 90.0) -> None:
    """Run `check()` in a forked child; fail unless it returns True in time."""
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest, whatever `check` does
        passed = False
        try:
            signal.alarm(int(timeout_s))
            passed = bool(check())
        finally:
            os._exit(0 if passed else 1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child did not finish in {timeout_s:g} s")


@pytest.mark.parametrize(
    ("kv_heads", "groups", "head_dim"),
    # The smoke base; grouped-query heads; Qwen3's head_dim and the fast path's widest; the plain loops' head_dim.
    [(1, 1, 64), (2, 3, 64), (2, 2, 128), (1, 2, 256), (1, 4, 80)],
)
def test_the_kernel_equals_attention_in_torch(kernel, kv_heads, groups, head_dim):
    lengths = [0, 1, 17, 300, 512]  # no cached key (only its own), one, many, the whole capacity
    q, k_cache, v_cache, past_len, k_new, v_new = random_batch(5, kv_heads, groups, head_dim, 512, lengths)
    out = kernel(q, k_cache, v_cache, past_len, k_new, v_new, head_dim**-0.5)
    reference = attend(q, k_cache, v_cache, past_len, k_new, v_new)
    assert out.shape == (5, kv_heads, groups, head_dim)
    assert (out - reference).abs().max() < 1e-5


def test_scores_far_apart_give_torchs_softmax(kernel):
    """Score gaps of hundreds (exp underflows for all but the top keys) and of almost nothing (a flat softmax): the
    kernel's own exp (Cephes' polynomial, clamped below at exp(-87)) agrees with torch's."""
    for scale in (40.0, 1e-4):
        q, k_cache, v_cache, past_len, k_new, v_new = random_batch(4, 1, 2, 64, 256, [256, 1, 100, 7], seed=3)
        q = q * scale
        out = kernel(q, k_cache, v_cache, past_len, k_new, v_new, 64**-0.5)
        assert (out - attend(q, k_cache, v_cache, past_len, k_new, v_new)).abs().max() < 1e-5


@pytest.mark.parametrize("head_dim", [64, 80])  # the fast path and the plain loops
def test_a_rows_output_depends_neither_on_the_rest_of_the_batch_nor_on_the_threads(kernel, head_dim):
    """Rows are independent tasks: the same row alone, inside a batch, and with the batch split over 1, 2, 3 or more
    threads than rows gives the same bits (a batched matmul does not promise this: its blocking follows the shape)."""
    q, k_cache, v_cache, past_len, k_new, v_new = random_batch(6, 2, 2, head_dim, 256, [5, 250, 31, 0, 128, 77])
    batch = kernel(q, k_cache, v_cache, past_len, k_new, v_new, 0.125)
    for threads in (2, 3, 16):
        assert torch.equal(kernel(q, k_cache, v_cache, past_len, k_new, v_new, 0.125, threads), batch)
    for b in range(6):
        row = slice(b, b + 1)
        alone = kernel(q[row], k_cache[row], v_cache[row], past_len[row], k_new[row], v_new[row], 0.125)
        assert torch.equal(alone[0], batch[b])


def test_callers_on_several_threads_share_the_helpers_one_call_at_a_time(kernel):
    """The helper threads serve one split call at a time: calls from several threads at once (torch releases the GIL
    in the op) each get their own, correct result."""
    batches = [random_batch(8, 1, 2, 64, 256, [250, 3, 100, 7, 0, 64, 200, 31], seed=seed) for seed in range(4)]
    expected = [kernel(*batch, 0.125) for batch in batches]

    def call(index: int) -> bool:
        return all(torch.equal(kernel(*batches[index], 0.125, 2), expected[index]) for _ in range(50))

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert all(pool.map(call, range(4)))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_gets_helpers_of_its_own(kernel):
    """A fork copies the parent's helper pool but not its threads: the child must start its own helpers, not wait
    forever on threads that do not exist there."""
    batch = random_batch(6, 1, 2, 64, 256, [250, 3, 100, 7, 0, 64])
    expected = kernel(*batch, 0.125, 2)  # the parent's helpers exist before the fork
    run_in_forked_child(lambda: torch.equal(kernel(*batch, 0.125, 2), expected))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
def test_calls_finish_when_the_helpers_cannot_run_beside_the_caller(kernel):
    """On one core a helper runs only when the caller's thread is off the core: every call still finishes, with the
    same bits — the caller claims the chunks no helper has picked up, and waits only for chunks a helper runs."""
    batch = random_batch(8, 1, 2, 64, 256, [250, 3, 100, 7, 0, 64, 200, 31])
    expected = kernel(*batch, 0.125)

    def on_one_core() -> bool:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        return all(torch.equal(kernel(*batch, 0.125, threads), expected) for threads in (2, 4) for _ in range(200))

    run_in_forked_child(on_one_core)


def test_bfloat16_accumulates_in_fp32(kernel):
    q, k_cache, v_cache, past_len, k_new, v_new = random_batch(3, 1, 2, 64, 128, [100, 3, 128])
    half = [t.bfloat16() for t in (q, k_cache, v_cache)] + [past_len] + [t.bfloat16() for t in (k_new, v_new)]
    out = kernel(*half, 0.125)
    reference = attend(*(t.float() if t.is_floating_point() else t for t in half))
    assert out.dtype == torch.bfloat16 and (out.float() - reference).abs().max() < 1e-2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: {**a, "past_len": torch.tensor([3, 129])}, "outside the cache's 0..128"),
        (lambda a: {**a, "past_len": torch.tensor([3, -1])}, "outside the cache's 0..128"),
        (lambda a: {**a, "past_len": torch.tensor([3.0, 4.0])}, "past_len must be int64"),
        (lambda a: {**a, "k_cache": a["k_cache"].double()}, "must share a dtype"),
        (lambda a: {**a, "v_cache": a["v_cache"][:, :, :64]}, "v_cache"),
        (lambda a: {**a, "k_cache": a["k_cache"].transpose(2, 3)}, "head_dim must be contiguous"),
        (lambda a: {**a, "q": a["q"][:, :, 0]}, "q must be [rows, kv_heads, groups, head_dim]"),
        (lambda a: {**a, "threads": 0}, "threads must be >= 1, got 0"),
    ],
    ids=["too long", "negative", "float lengths", "dtype", "v shape", "strided head_dim", "q rank", "no threads"],
)
def test_bad_input_is_a_clear_error(kernel, change, message):
    q, k_cache, v_cache, past_len, k_new, v_new = random_batch(2, 1, 1, 64, 128, [3, 4])
    args = dict(q=q, k_cache=k_cache, v_cache=v_cache, past_len=past_len, k_new=k_new, v_new=v_new, scale=0.125)
    with pytest.raises(RuntimeError, match=re.escape(message)):
        kernel(**change(args))


def test_a_failed_build_says_why_and_leaves_no_library(tmp_path, monkeypatch):
    monkeypatch.setattr(kernels, "COMPILER", str(tmp_path / "no-such-c++"))
    target = tmp_path / "cache" / "decode_attention.so"
    with pytest.raises(kernels.KernelBuildError, match="no-such-c\\+\\+"):
        kernels.build(target)
    assert list(target.parent.iterdir()) == []  # the temporary output is removed too


def test_a_compile_error_is_reported_with_the_compilers_message(tmp_path, monkeypatch):
    broken = tmp_path / "decode_attention.cpp"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr(kernels, "SOURCE", broken)
    target = tmp_path / "cache" / "decode_attention.so"
    with pytest.raises(kernels.KernelBuildError, match=r"compiling decode_attention\.cpp failed"):
        kernels.build(target)
    assert not target.exists()


def test_the_build_folder_is_named_by_the_source(tmp_path, monkeypatch):
    """A changed kernel source gets a new build, never the old library under the same name."""
    before = kernels.kernel_path()
    edited = tmp_path / "decode_attention.cpp"
    edited.write_text(kernels.SOURCE.read_text() + "\n// edited\n")
    monkeypatch.setattr(kernels, "SOURCE", edited)
    assert kernels.kernel_path() != before and kernels.kernel_path().parent.parent == before.parent.parent
