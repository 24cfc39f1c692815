"""Gallery thumbnails: one small diagram per step, drawn with matplotlib.

sphinx-gallery makes a step's thumbnail from its first figure; a step that
plots nothing would get the same placeholder as every other. Each of those
names a diagram here instead (``# sphinx_gallery_thumbnail_path``), drawn
when the site is built, so the pictures live as code next to the pages.
"""

from __future__ import annotations

from pathlib import Path

# Per step: the boxes of a left-to-right flow (a line break splits a label)
# and, under them, the step's point in a few words.
DIAGRAMS: dict[str, tuple[list[str], str]] = {
    "01": (["x, weight", "custom_op\nrms_norm", "y"], "an operator in Python"),
    "02": (["6 passes\nin Python", "1 pass\nin C++"], "one kernel, one read of x"),
    "03": (["row 0\nblock 0", "row 1\nblock 1", "row 2\nblock 2"], "a CUDA block per row"),
    "04": ([".cu", "hipify", ".hip"], "the same kernel on ROCm"),
    "05": (["schema", "dispatcher", "CPU, CUDA,\nMeta,\nAutograd"], "TORCH_LIBRARY registers"),
    "06": (["csrc/", "setup.py", "wheel\n_C.abi3.so"], "the build"),
    "07": (["reference", "opcheck", "gradcheck", "compile"], "tests for every claim"),
    "08": (["formula\nin Python", "C++\nFunction"], "autograd: Python, then C++"),
    "09": (["@triton.jit", "triton_op", "Inductor\nsees it"], "a Triton kernel as an operator"),
    "10": (["in place", "two outputs", "optional\nweight"], "schemas for real operators"),
    "10.2": (["version\ncounter", "autograd\nrefuses", "index\nchecks"], "the in-place contract"),
    "12": (["aten op", "your kernel\nfor one key"], "overriding ATen"),
    "13": (["namespace", "fragment", "loaded\nlibraries"], "many libraries, one dispatcher"),
    "14": (["error", "sanitizer\nexplain", "file:line"], "debugging"),
    "15": (["one wheel", "torch 2.11\nto 2.15"], "the stable ABI"),
    "16": (["export", "vmap,\nautocast", "CUDA\ngraphs"], "across PyTorch"),
    "17": (["shard 0\nGPU 0", "shard 1\nGPU 1"], "DTensor and many GPUs"),
    "18": (["template", "your_op/", "tests pass"], "your own operator"),
    "19": (["wheel", "auditwheel\nrepair", "fresh venv\ntests pass"], "ship your operator"),
}


def write_thumbnails(target: Path) -> None:
    """Writes ``target/NN.png`` for every step in DIAGRAMS (400x280 pixels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    target.mkdir(parents=True, exist_ok=True)
    for step, (boxes, point) in DIAGRAMS.items():
        fig = plt.figure(figsize=(4, 2.8), dpi=100)
        ax = fig.add_axes((0, 0, 1, 1))
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.axis("off")
        ax.text(0.05, 0.88, f"Step {step.lstrip('0')}", fontsize=15, weight="bold", color="#333")
        count = len(boxes)
        width = 0.86 / count - 0.05
        for i, label in enumerate(boxes):
            left = 0.07 + i * (width + 0.05)
            ax.add_patch(
                FancyBboxPatch(
                    (left, 0.38), width, 0.32, boxstyle="round,pad=0.01",
                    facecolor="#dbe9f6" if i < count - 1 else "#f6e3c8", edgecolor="#35608a",
                )
            )  # fmt: skip
            # about 0.85 pixels of width per point of font size per character
            longest = max(len(line) for line in label.splitlines())
            size = min(12.0, width * 400 / (0.85 * longest))
            ax.text(left + width / 2, 0.54, label, ha="center", va="center", fontsize=size)
            if i:
                ax.add_patch(
                    FancyArrowPatch(
                        (left - 0.05, 0.54), (left, 0.54), arrowstyle="-|>",
                        mutation_scale=12, color="#35608a",
                    )
                )  # fmt: skip
        ax.text(0.5, 0.17, point, ha="center", fontsize=12, style="italic", color="#333")
        fig.savefig(target / f"{step}.png")
        plt.close(fig)
