"""Tests of step 10's section "Index inputs and value checks" and its demo library.

The library, ``csrc/index_inputs/gather_rows.cpp``, is built here as the page
builds it (same name and build folder, so both share one build) and loaded
into this process: its namespace, ``opguide_index``, is its own. Each test
checks one claim the page makes:

* the kernel checks each index value and raises IndexError whose message names
  the value, its position and the valid range;
* metadata errors (dtype, dimensions) are TypeError/ValueError naming the
  argument, from the Python checks and from the C++ kernel alike;
* a value check in Python fails to compile with ``fullgraph=True``, while the
  wrapper that leaves it to the kernel compiles and raises IndexError at run
  time; without ``fullgraph`` the Python check splits the graph in two;
* the fake kernel of ``unique_indices`` (a data-dependent output size, from
  ``new_dynamic_size``) compiles with ``fullgraph=True`` and matches eager;
  without ``fullgraph``, Dynamo keeps it in the graph only with
  ``capture_dynamic_output_shape_ops``;
* on CUDA, the value check in Python synchronizes with the GPU.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch
from torch.utils.cpp_extension import load

from guidekit.compile_checks import source_root


def check_gather_rows_args(table: torch.Tensor, index: torch.Tensor) -> None:
    """The page's metadata checks: dtype, dimensions, device."""
    if table.dim() != 2:
        raise ValueError(f"gather_rows: table must be 2-D (rows, columns), got {table.dim()}-D")
    if index.dtype != torch.int64:
        raise TypeError(f"gather_rows: index must be int64, got {index.dtype}")
    if index.device != table.device:
        raise ValueError(
            f"gather_rows: index must be on {table.device} like table, got {index.device}"
        )


def check_index_values(table: torch.Tensor, index: torch.Tensor) -> None:
    """The page's value check in Python, the pattern it shows failing under compile."""
    if ((index < 0) | (index >= table.shape[0])).any():
        raise IndexError(f"gather_rows: index values must be in [0, {table.shape[0]})")


def gather_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    check_gather_rows_args(table, index)
    return torch.ops.opguide_index.gather_rows(table, index)


def gather_rows_checked_in_python(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    check_gather_rows_args(table, index)
    check_index_values(table, index)
    return torch.ops.opguide_index.gather_rows(table, index)


def rows_used(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return gather_rows(table, torch.ops.opguide_index.unique_indices(index))


@pytest.fixture(scope="module")
def ops():
    """Builds and loads the demo library once, and registers the page's fake kernels."""
    root = source_root()
    build_dir = root / "build" / "jit" / "opguide_index"
    build_dir.mkdir(parents=True, exist_ok=True)
    load(
        name="opguide_index",
        sources=[str(root / "csrc" / "index_inputs" / "gather_rows.cpp")],
        extra_cflags=["-O2"],
        build_directory=str(build_dir),
        is_python_module=False,
    )
    lib = torch.library.Library("opguide_index", "FRAGMENT")  # owns the fake registrations

    @torch.library.register_fake("opguide_index::gather_rows", lib=lib)
    def _(table, index):
        check_gather_rows_args(table, index)
        return table.new_empty((*index.shape, table.shape[1]))

    @torch.library.register_fake("opguide_index::unique_indices", lib=lib)
    def _(index):
        if index.dtype != torch.int64:
            raise TypeError(f"unique_indices: index must be int64, got {index.dtype}")
        count = torch.library.get_ctx().new_dynamic_size()
        return index.new_empty((count,))

    yield torch.ops.opguide_index  # the registrations last while `lib` does


@pytest.fixture(scope="module")
def raising_ops(ops):
    """``ops``, for tests that raise from the kernel: skipped where a C++ exception kills.

    Some builds of torch end the process with a signal, not an error, when an
    extension built by cpp_extension.load throws (the page checks the same way).
    """
    library = next((source_root() / "build" / "jit" / "opguide_index").glob("opguide_index*.so"))
    throw_once = (
        f"import torch; torch.ops.load_library({str(library)!r}); "
        "torch.ops.opguide_index.gather_rows(torch.zeros(1, 1), torch.tensor([1]))"
    )
    child = subprocess.run([sys.executable, "-c", throw_once], capture_output=True, text=True)
    if not (child.returncode == 1 and "IndexError" in child.stderr):
        pytest.skip(
            f"a C++ exception from the demo library ends a process here with code "
            f"{child.returncode}, not with an IndexError"
        )
    return ops


def graphs_of(fn, *args, fullgraph: bool = True, capture: bool = False) -> list[list[str]]:
    """The operators of each graph torch.compile makes of ``fn(*args)`` (as the page's)."""
    graphs = []

    def record(graph_module, example_inputs):
        nodes = [n for n in graph_module.graph.nodes if n.op in ("call_function", "call_method")]
        graphs.append([str(getattr(n.target, "__name__", n.target)) for n in nodes])
        return graph_module.forward

    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=capture):
        torch.compile(fn, fullgraph=fullgraph, backend=record)(*args)
    return graphs


TABLE = torch.arange(15.0).reshape(5, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64, torch.int32])
@pytest.mark.parametrize(
    "index",
    [
        torch.tensor(3),
        torch.tensor([], dtype=torch.int64),
        torch.tensor([[0, 4], [2, 2]]),
        torch.tensor([[4, 3, 2], [1, 0, 0]]).t(),  # not contiguous
        torch.randint(0, 5, (2, 3, 4)),
    ],
    ids=["0-d", "empty", "2-D", "transposed", "3-D"],
)
def test_gather_rows_is_indexing(ops, index, dtype):
    table = TABLE.to(dtype)
    torch.testing.assert_close(ops.gather_rows(table, index), table[index], rtol=0, atol=0)
    strided = table.t().contiguous().t()  # same values, column-major
    torch.testing.assert_close(ops.gather_rows(strided, index), table[index], rtol=0, atol=0)


@pytest.mark.parametrize(
    ("index", "value", "element"),
    [
        (torch.tensor([1, 5]), 5, 1),
        (torch.tensor([[0, 1], [-1, 2]]), -1, 2),
        (torch.tensor([[0, 1], [2, 99]]).t(), 99, 3),  # position in row-major order
    ],
)
def test_out_of_range_index_is_index_error_naming_value_and_range(
    raising_ops, index, value, element
):
    message = (
        f"gather_rows: index value {value} (element {element} of index) is out of range "
        "for a table of 5 rows (valid: 0 <= index < 5)"
    )
    with pytest.raises(IndexError, match=re.escape(message)):
        raising_ops.gather_rows(TABLE, index)


def test_empty_table_refuses_every_index(raising_ops):
    with pytest.raises(IndexError, match=re.escape("valid: 0 <= index < 0")):
        raising_ops.gather_rows(torch.empty(0, 3), torch.tensor([0]))
    assert raising_ops.gather_rows(
        torch.empty(0, 3), torch.tensor([], dtype=torch.int64)
    ).shape == (0, 3)


@pytest.mark.parametrize("call", ["wrapper", "kernel"])
def test_metadata_errors_name_the_argument(raising_ops, call):
    fn = gather_rows if call == "wrapper" else raising_ops.gather_rows
    index = torch.tensor([0, 1])
    with pytest.raises(TypeError, match="gather_rows: index must be int64, got .*[Ii]nt"):
        fn(TABLE, index.int())
    with pytest.raises(ValueError, match=re.escape("gather_rows: table must be 2-D")):
        fn(TABLE.flatten(), index)
    with pytest.raises(TypeError, match="unique_indices: index must be int64"):
        raising_ops.unique_indices(index.int())


def test_device_mismatch_is_value_error_in_the_wrapper(ops):
    with pytest.raises(ValueError, match="gather_rows: index must be on cpu like table, got meta"):
        gather_rows(TABLE, torch.tensor([0]).to("meta"))


def test_metadata_checks_leave_no_trace_in_the_graph(ops):
    assert graphs_of(gather_rows, TABLE, torch.tensor([0, 4])) == [["gather_rows"]]


def test_value_check_in_python_works_eagerly(ops):
    with pytest.raises(IndexError, match=re.escape("index values must be in [0, 5)")):
        gather_rows_checked_in_python(TABLE, torch.tensor([1, 5]))
    index = torch.tensor([[0, 4]])
    assert torch.equal(gather_rows_checked_in_python(TABLE, index), TABLE[index])


def test_value_check_in_python_fails_under_fullgraph(ops):
    torch._dynamo.reset()
    compiled = torch.compile(gather_rows_checked_in_python, fullgraph=True)
    with pytest.raises(torch._dynamo.exc.TorchDynamoException) as info:
        compiled(TABLE, torch.tensor([0, 1]))
    assert not isinstance(info.value, IndexError)
    assert "data-dependent" in str(info.value).splitlines()[0].lower()


def test_value_check_in_python_splits_the_graph_without_fullgraph(ops):
    graphs = graphs_of(gather_rows_checked_in_python, TABLE, torch.tensor([0, 1]), fullgraph=False)
    assert len(graphs) == 2
    assert "gather_rows" not in graphs[0] and graphs[1] == ["gather_rows"]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_value_check_in_the_kernel_compiles_and_raises_at_run_time(raising_ops, backend):
    torch._dynamo.reset()
    compiled = torch.compile(gather_rows, fullgraph=True, backend=backend)
    index = torch.tensor([[0, 4], [2, 2]])
    assert torch.equal(compiled(TABLE, index), TABLE[index])
    with pytest.raises(IndexError, match=re.escape("index value 7 (element 3 of index)")):
        compiled(TABLE, torch.tensor([[0, 1], [2, 7]]))


INDICES = [
    torch.tensor([[0, 4], [2, 4], [4, 0]]),
    torch.tensor([3]),
    torch.tensor([1, 1, 1, 1]),
    torch.tensor([4, 3, 2, 1, 0, 0]),
]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_dynamic_size_fake_compiles_fullgraph_and_matches_eager(ops, backend, dynamic):
    torch._dynamo.reset()
    compiled = torch.compile(rows_used, fullgraph=True, backend=backend, dynamic=dynamic)
    for index in INDICES:
        expected = TABLE[torch.unique(index)]
        assert torch.equal(rows_used(TABLE, index), expected)
        assert torch.equal(compiled(TABLE, index), expected)


def test_dynamic_size_fake_gives_an_unbacked_size(ops):
    shapes = {}

    def record(graph_module, example_inputs):
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and "opguide_index" in str(node.target):
                shapes[str(node.target)] = tuple(node.meta["example_value"].shape)
        return graph_module.forward

    torch._dynamo.reset()
    torch.compile(rows_used, fullgraph=True, backend=record)(TABLE, INDICES[0])
    (count,) = shapes["opguide_index.unique_indices"]
    assert isinstance(count, torch.SymInt) and str(count).startswith("u")
    assert str(shapes["opguide_index.gather_rows"]) == f"({count}, 3)"


@pytest.mark.parametrize(
    ("fullgraph", "capture", "one_graph"),
    [(True, False, True), (False, False, False), (False, True, True)],
)
def test_capture_dynamic_output_shape_ops_matters_only_without_fullgraph(
    ops, fullgraph, capture, one_graph
):
    graphs = graphs_of(rows_used, TABLE, INDICES[0], fullgraph=fullgraph, capture=capture)
    if one_graph:
        assert len(graphs) == 1 and "unique_indices" in graphs[0], graphs
    else:
        assert graphs == [["gather_rows"]]  # unique_indices ran eagerly, outside the graph


def test_opcheck(ops):
    for index in INDICES:
        torch.library.opcheck(ops.gather_rows, (TABLE, index))
        torch.library.opcheck(ops.unique_indices, (index,))


@pytest.mark.cuda
def test_value_check_in_python_synchronizes_on_cuda():
    table = torch.randn(10, 4, device="cuda")
    index = torch.tensor([1, 2], device="cuda")
    torch.cuda.set_sync_debug_mode("error")
    try:
        torch.nn.functional.embedding(index, table)  # no error: nothing waits
        with pytest.raises(RuntimeError, match="called a synchronizing CUDA operation"):
            check_index_values(table, index)
    finally:
        torch.cuda.set_sync_debug_mode("default")
