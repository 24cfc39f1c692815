r"""
Step 10.3: Operators that only write
====================================

A key/value cache update in LLM serving writes a few rows of two large
buffers at positions an index gives, and returns nothing. Such an operator
must not copy its buffers, and still owes ``torch.compile`` and autograd what
every writing operator owes. This step covers:

* a schema that writes two tensors and returns nothing, and why nothing;
* the written tensors' version counters in grad mode, ``no_grad``,
  ``inference_mode``, and when the body raises;
* ``torch.compile`` and ``torch.export`` of the call, and a written tensor
  that autograd saved;
* the wrapper's checks: inputs that need grad, two written tensors that are
  one, the index's range, duplicate indices;
* what it costs a GPU kernel to report an index out of range, four ways.
"""

# %%
# Two written tensors, nothing returned
# -------------------------------------
# ``write_rows_`` writes ``k[i]`` into ``k_cache[index[i]]`` and ``v[i]`` into
# ``v_cache[index[i]]``; a negative index skips a row (a padding token).
# ``mutates_args`` gives one alias set per written tensor (``Tensor(a0!)``,
# ``Tensor(a1!)``; in C++ by hand, ``Tensor(a!) k_cache, Tensor(b!) v_cache``)
# and the return type ``()``. The body's ``index_copy_`` writes the buffers'
# own memory. On a GPU its three boolean masks and ``int(rows.max())`` each
# make the host wait (the next cell counts them there):
import os
import textwrap
import warnings

import torch
from torch.library import custom_op


@custom_op("opguide_writes::write_rows_", mutates_args=("k_cache", "v_cache"))
def _write_rows(
    k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    index: torch.Tensor,
) -> None:  # fmt: skip
    keep = index >= 0
    rows = index[keep]
    # On a GPU, each mask and int(rows.max()) wait for the device.
    if rows.numel() and int(rows.max()) >= k_cache.shape[0]:
        bad = int(rows.max())
        raise IndexError(f"write_rows_: index {bad} is out of range for {k_cache.shape[0]} rows")
    k_cache.index_copy_(0, rows, k[keep])
    v_cache.index_copy_(0, rows, v[keep])


@_write_rows.register_fake
def _(k_cache, v_cache, k, v, index) -> None:
    # Nothing is returned, so there is no output to describe.
    return None


op = torch.ops.opguide_writes.write_rows_.default
print(op._schema)
k_cache, v_cache = torch.zeros(8, 4), torch.zeros(8, 4)
k, v = torch.ones(3, 4), torch.full((3, 4), 2.0)
index = torch.tensor([1, -1, 5])
result = op(k_cache, v_cache, k, v, index)
print(f"returned {result}; rows of k_cache written: {k_cache[:, 0].nonzero().flatten().tolist()}")

# %%
# ``torch.cuda.set_sync_debug_mode("warn")`` warns at each wait it sees (a
# prototype that misses some):
if torch.cuda.is_available():
    on_gpu = [t.cuda() for t in (k_cache, v_cache, k, v, index)]
    op(*on_gpu)  # the first call loads kernels; count the second
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            op(*on_gpu)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # One warning per wait; setting the mode may add a note that it is a prototype.
    syncs = [w for w in caught if "called a synchronizing CUDA operation" in str(w.message)]
    print(f"host syncs in one call of write_rows_ on CUDA tensors: {len(syncs)}")
    print(
        "as the prose above counts: three masks and one .max() read"
        if len(syncs) == 4
        else "Surprising: not the four waits the prose above counts (three masks, one .max())"
    )
else:
    print("SKIPPED: no CUDA GPU here; on one, this cell counts a call's host syncs")

# %%
# Why nothing is returned
# -----------------------
# Returning the written tensor returns an *alias* of an input, which
# ``custom_op`` refuses:
try:

    @custom_op("opguide_writes::add_one_", mutates_args=("x",))
    def _add_one(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x

    _add_one(torch.zeros(3))
except RuntimeError as error:
    print(textwrap.shorten(f"refused: {str(error).split(': ', 1)[1]}", 150, placeholder=" ..."))

# %%
# A schema that returns an alias must say so (``-> Tensor(a!)``) and the
# compiler must track it; ``-> ()`` has nothing to track. The Python wrapper
# may return the tensor it passed in, as the template's in-place operators
# do.
#
# Version counters
# ----------------
# ``custom_op``'s ``ADInplaceOrView`` kernel bumps each tensor in
# ``mutates_args`` before it calls the body (`custom_ops.py
# <https://github.com/pytorch/pytorch/blob/main/torch/_library/custom_ops.py>`__,
# ``adinplaceorview_impl``); whether the body's own ``index_copy_`` bumps again
# depends on the key it runs below. The counters this torch gives, in each
# mode and for a call whose body raises:


def versions(*tensors):
    return [t._version for t in tensors]


def call_and_measure(label, *args):
    before = versions(args[0], args[1])
    try:
        op(*args)
        raised = ""
    except IndexError as error:
        raised = f" (raised IndexError: {error})"
    after = versions(args[0], args[1])
    steps = [a - b for a, b in zip(after, before, strict=True)]
    print(f"{label:32} k_cache +{steps[0]}, v_cache +{steps[1]}{raised}")
    return steps


steps = {"grad mode": call_and_measure("grad mode", k_cache, v_cache, k, v, index)}
with torch.no_grad():
    steps["no_grad"] = call_and_measure("torch.no_grad()", k_cache, v_cache, k, v, index)
with torch.inference_mode():
    steps["inference_mode"] = call_and_measure(
        "torch.inference_mode()", k_cache, v_cache, k, v, index
    )
raised = call_and_measure(
    "grad mode, index out of range", k_cache, v_cache, k, v, torch.tensor([1, 9, 2])
)
same = len({tuple(s) for s in steps.values()}) == 1
print(f"the same steps in grad mode, under no_grad and under inference_mode: {same}")
if raised != [0, 0]:
    print(f"a call whose body raised before writing still bumped the counters by {raised}")
else:
    print("a call whose body raised left the counters alone")

# %%
# A raising call that bumps makes ``backward()`` refuse a tensor saved
# before it, though nothing was written; a C++ ``ADInplaceOrView`` kernel that
# bumps after the device kernel returns (the template's) does not. Either is
# correct; an operator's tests should say which it does.
#
# A tensor made *inside* ``inference_mode`` has no version counter at all:
with torch.inference_mode():
    cache_k, cache_v = torch.zeros(8, 4), torch.zeros(8, 4)
    op(cache_k, cache_v, k, v, index)
    try:
        print(cache_k._version)
    except RuntimeError as error:
        print(f"inference tensor: {error}")
written = cache_k[:, 0].nonzero().flatten().tolist()
print(f"is_inference(): {cache_k.is_inference()}; rows written: {written}")

# %%
# A written tensor that autograd saved
# ------------------------------------
# ``y`` saved ``k_saved``; the operator overwrites it under ``no_grad``, as
# serving code does, and ``backward()`` raises:
w = torch.randn(8, 4, requires_grad=True)
k_saved = torch.zeros(8, 4)
y = (w * k_saved).sum()
with torch.no_grad():
    op(k_saved, v_cache, k, v, index)
try:
    y.backward()
    print("backward() ran")
except RuntimeError as error:
    print(textwrap.shorten(f"backward() raised: {error}", 170, placeholder=" ..."))

# %%
# The wrapper's checks
# --------------------
# What the schema does not check, and the wrapper, body or docstring must:
#
# * **Inputs that need grad**: with nothing returned and no
#   ``register_autograd``, ``custom_op`` does not refuse them (tried below).
# * **The two written tensors are one**: ``a0`` and ``a1`` promise two;
#   eager mode does not check.
# * **The index's values**: checked by the body, which sees them
#   (:doc:`step 10.2 <10_patterns_2_inplace_and_index_inputs>`).
# * **Duplicate indices**: :meth:`torch.Tensor.index_copy_` calls the result
#   "nondeterministic since it depends on which copy occurs last". Document
#   it, refuse duplicates, or define an order; racing plain stores are a data
#   race in C++.
# * **Writes that accumulate** (``index_add_``): duplicates add atomically, in
#   an order that changes run to run (CUDA's ``atomicAdd`` takes ``__half``
#   from compute capability 7.0 and ``__nv_bfloat16`` from 8.0: the `CUDA
#   programming guide
#   <https://docs.nvidia.com/cuda/cuda-c-programming-guide/#atomicadd>`__).
#   Triton's interpreter runs a grid's programs one after another
#   (`interpreter.py
#   <https://github.com/triton-lang/triton/blob/main/python/triton/runtime/interpreter.py>`__),
#   so a missing atomic loses nothing there, and its atomics may not take
#   every dtype. This machine's Triton, asked in a process of its own:
import subprocess  # noqa: E402
import sys  # noqa: E402

ATOMIC_ADD = """
import torch, triton, triton.language as tl

@triton.jit
def add_all(total, values, n: tl.constexpr):
    i = tl.arange(0, n)
    tl.atomic_add(total + i * 0, tl.load(values + i))  # every lane into element 0

for dtype in (torch.float32, torch.float16, torch.bfloat16):
    total, values = torch.zeros(1, dtype=dtype), torch.ones(4, dtype=dtype)
    try:
        add_all[(3,)](total, values, 4)  # 3 programs x 4 values
        print(f"  {dtype}: total {total.item():g} (12 expected)")
    except Exception as error:
        print(f"  {dtype}: refused: {type(error).__name__}: {str(error)[:60]}")
"""
interpreted = subprocess.run(
    [sys.executable, "-c", ATOMIC_ADD],
    env={**os.environ, "TRITON_INTERPRET": "1"},
    capture_output=True,
    text=True,
)
print(f"tl.atomic_add under Triton's interpreter (rc {interpreted.returncode}):")
print(interpreted.stdout.rstrip() or interpreted.stderr[-500:])

# %%
# A dtype it refuses is one a Triton kernel's CPU tests skip. The wrapper's
# checks, tried:
k_grad = torch.ones(3, 4, requires_grad=True)
try:
    op(k_cache, v_cache, k_grad, v, index)
    print("an input that requires grad: accepted by the operator")
except RuntimeError as error:
    print(f"an input that requires grad: {error}")
try:
    op(k_cache, k_cache, k, v, index)
    holder = "v" if k_cache[1, 0].item() == v[0, 0].item() else "k"
    print(f"the same tensor twice: accepted; row 1 holds {holder}'s value, the last write")
except RuntimeError as error:
    print(f"the same tensor twice: {error}")


def write_rows_(k_cache, v_cache, k, v, index) -> None:
    """Writes ``k[i]`` into ``k_cache[index[i]]`` and ``v[i]`` into ``v_cache[index[i]]``.

    Args:
        k_cache, v_cache: ``(num_slots, ...)`` buffers, written in place; two
            different tensors.
        k, v: ``(num_tokens, ...)``, rows to write, not requiring grad.
        index: int64 ``(num_tokens,)``: the row of each token; negative skips it.
            With duplicate indices which token's row lands is undefined.

    Raises:
        RuntimeError: an input requires grad (grad mode on), or the buffers
            share memory.
        IndexError: an index is ``>= num_slots`` (raised by the body).
    """
    if torch.is_grad_enabled() and any(t.requires_grad for t in (k_cache, v_cache, k, v)):
        raise RuntimeError("write_rows_: an input requires grad, and write_rows_ has no backward")
    if k_cache.untyped_storage().data_ptr() == v_cache.untyped_storage().data_ptr():
        raise RuntimeError("write_rows_: k_cache and v_cache must be different tensors")
    op(k_cache, v_cache, k, v, index)


for args in [(k_cache, v_cache, k_grad, v, index), (k_cache, k_cache, k, v, index)]:
    try:
        write_rows_(*args)
    except RuntimeError as error:
        print(f"wrapper: {error}")

duplicates = torch.zeros(4, 2)
write_rows_(duplicates, torch.zeros(4, 2), torch.arange(6.0).view(3, 2), torch.zeros(3, 2),
            torch.tensor([1, 1, 1]))  # fmt: skip
print(f"three writes of row 1 on the CPU: it holds {duplicates[1].tolist()}")

# %%
# torch.compile and torch.export
# ------------------------------
# As in :doc:`step 10 <10_patterns>`, the call becomes
# ``auto_functionalized_v2`` and the graph copies the new values back into the
# buffers. A module that writes its two buffers, exported, then compiled
# (``aot_eager``) against eager:


class CacheUpdate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(8, 4))
        self.register_buffer("v_cache", torch.zeros(8, 4))

    def forward(self, k, v, index):
        op(self.k_cache, self.v_cache, k, v, index)
        return self.k_cache.sum(1)


with warnings.catch_warnings():
    # torch's own pytree deprecation, raised inside export on some releases
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    exported = torch.export.export(CacheUpdate(), (k, v, index)).run_decompositions({})
code = exported.graph_module.code.strip()
for line in code.splitlines():
    if "auto_functionalized" in line:  # wrapped between tokens: no name is cut in two
        wrapped = textwrap.wrap(line.strip(), 88, subsequent_indent="    ",
                                break_long_words=False, break_on_hyphens=False)  # fmt: skip
        print("\n".join(wrapped))
written_back = sorted(exported.graph_signature.buffers_to_mutate.values())
print(f"buffers the graph writes back: {written_back}")

compiled = torch.compile(lambda *a: op(*a), fullgraph=True, backend="aot_eager")
eager_k, eager_v = torch.zeros(8, 4), torch.zeros(8, 4)
compiled_k, compiled_v = torch.zeros(8, 4), torch.zeros(8, 4)
op(eager_k, eager_v, k, v, index)
compiled(compiled_k, compiled_v, k, v, index)
same = torch.equal(compiled_k, eager_k) and torch.equal(compiled_v, eager_v)
print(f"compiled call writes what the eager call writes: {same}")
print(f"version counters after the compiled call: {versions(compiled_k, compiled_v)}")

# %%
# What to test
# ------------
# For each written tensor: the named rows hold the new values, every other
# element is untouched (``atol=0``), the version moved, the memory is the
# same. Then: an empty index and a skip value write nothing; an index out of
# range raises on every device and writes nothing out of bounds; inputs that
# need grad are refused; ``opcheck``; a compiled call matches eager. The
# template's ``scatter`` kind (``copier copy --data kind=scatter
# path/to/opguide/template my-ops``, :doc:`step 18 <18_your_own_operator>`)
# writes ``store_kv`` with every test of this list; ``--data written=...``
# sets the written tensors. It also refuses a written tensor that overlaps
# any other argument, and its kernels report a slot out of range through an
# error flag the host reads after the launch, which survives ``-DNDEBUG``.

# %%
# What reporting a bad index costs on a GPU
# -----------------------------------------
# A kernel cannot raise: given a slot past the caches it must write nothing
# out of bounds and tell the host somehow. Four ways, against skipping, in
# ``tools/bad_index.cu`` around the template's ``store_kv`` kernel (bf16 rows
# of 8 x 128, 65,536 slots), timed by ``tools/record_bad_index.py`` in loops
# between two synchronizations, interleaved, 21 rounds. ``index_copy_ (torch)``
# is PyTorch's way: two dispatcher calls, each checked by
# ``CUDA_KERNEL_ASSERT``, which ends the kernel as ``__trap()`` does and
# survives ``NDEBUG`` (`Macros.h
# <https://github.com/pytorch/pytorch/blob/main/torch/headeronly/macros/Macros.h>`__,
# `IndexKernel.cu
# <https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cuda/IndexKernel.cu>`__).
from guidekit.recorded.pages import bars_figure, recorded, say, say_stale, show, table  # noqa: E402

costs = recorded("bad_index_<gpu>.json")
STRATEGIES = {
    "skip": "the token writes nothing; nobody is told",
    "flag_read": "error flag, read by the host after every launch (the template's)",
    "flag_later": "error flag, read where the host waits anyway",
    "pre_pass": "a checking kernel, read by the host, then the write",
    "trap": "__trap() in the kernel: the launch fails",
}
for name, what in STRATEGIES.items():
    say(f"{name:11} {what}")
ROUNDS = [
    {"way": way, "tokens": shape["tokens"], **t}
    for shape in costs["shapes"]
    for way, t in shape["us_per_call"].items()
]
say("us per call, median [middle half of the rounds], by token count:")
show(
    table(
        ROUNDS,
        ("way",),
        "tokens",
        lambda t: f"{t['median_us']:.1f} [{t['q1_us']:.1f}-{t['q3_us']:.1f}]",
    )
)
title = "One call of a writing operator, by how it reports a bad slot (recorded)"
_ = bars_figure(
    {
        f"{s['tokens']} token(s), us per call": {
            way: t["samples_us"] for way, t in s["us_per_call"].items()
        }
        for s in costs["shapes"]
    },
    title,
)

# %%
# Each way against skipping ("no measurable difference" where the middle
# halves overlap):
for shape in costs["shapes"]:
    t = shape["us_per_call"]
    skip = t["skip"]
    said = []
    for way in ("flag_read", "flag_later", "pre_pass", "trap"):
        if t[way]["q1_us"] <= skip["q3_us"] and skip["q1_us"] <= t[way]["q3_us"]:
            said.append(f"{way} no measurable difference")
        else:
            extra = t[way]["median_us"] - skip["median_us"]
            # flag_later and trap do skip's work on good slots: faster is noise.
            noise = " (noise)" if extra < 0 and way in ("flag_later", "trap") else ""
            said.append(f"{way} {extra:+.1f} us{noise}")
    say(f"{shape['tokens']} token(s): " + "; ".join(said))

# %%
# What each did with one bad slot (token 5 of 16):
for way, outcome in costs["bad_slot"].items():
    told = [f"{k.replace('_', ' ')}: {'none' if v == -1 else v}" for k, v in outcome.items()]
    say(f"{way}: " + ", ".join(t for t in told if not t.endswith("None")))

# %%
# The ways that tell the host during the call make it wait for the kernel
# (the pre-pass also launches twice). A flag read where the host waits anyway
# and the trap add no wait; the flag tells late, the trap ends every later
# CUDA call of the process. The template reads its flag after every launch,
# so a bad slot raises ``IndexError`` at the call (not while a CUDA graph is
# captured); a serving path can read it once a step instead.
#
# The template's writing kind, a release build, ran its CUDA tests under
# ``compute-sanitizer --tool memcheck`` (``tools/record_template_gpu.py run
# --memcheck scatter``):
import json  # noqa: E402

from guidekit.recorded import recorded_dir  # noqa: E402

memchecked = []
for path in sorted(recorded_dir().glob("template_*_cuda_*.json")):
    say_stale(path.name)
    for project in json.loads(path.read_text())["projects"]:
        if "_scatter" in project["project"] and (checked := project.get("memcheck")):
            failed = f", exit status {checked['exit_code']}" if checked.get("exit_code", 0) else ""
            tests = checked["tests"].rsplit(" in ", 1)[0]  # the counts, not the time
            errors = checked["errors"].removeprefix("ERROR SUMMARY: ")
            memchecked.append(
                f"{path.name}: {project['project']}: {tests}; memcheck {errors}{failed}"
            )
show(memchecked or ["no recorded memcheck run of the template's writing kind"])
