"""Records step 20's comparison on a GPU: a Llama step with each RMSNorm, eager and compiled.

On a machine with a CUDA GPU, from the repository root::

    python tools/record_model_step.py

builds a ``LlamaForCausalLM`` with random weights (hidden size 2048,
intermediate size 5632, 4 layers, 16 heads, 4 key-value heads; bfloat16),
and times a training step (forward, loss, backward) and an inference forward
on 4 sequences of 2048 tokens, eager and under ``torch.compile``, with:

* the model's own ``LlamaRMSNorm``, ``F.rms_norm``, ``opguide.rms_norm``
  with its ``cpp`` and ``triton`` backends, Liger and Quack where they import
  (see :mod:`guidekit.model_step`);
* compiled only: the model's own norm with the pass of
  ``opguide.experimental.inductor_fusion``, calling the fused residual-add +
  RMSNorm of each backend;
* ``kernelized opguide.rms_norm (cpp)`` and ``(triton)``: the model given
  opguide's layer by ``kernels.kernelize`` in each group's mode
  (``Mode.TRAINING``, ``Mode.INFERENCE``, each with ``Mode.TORCH_COMPILE``
  when compiled), the layer declaring the support decided from the record
  this run replaces (``--support-from``; see :mod:`guidekit.model_swap`), so
  that each row is either opguide's operator or the model's own code,
  whichever the layer declares.

Every variant is timed in turns with the others, round after round
(:func:`guidekit.model_step.time_interleaved`). It writes
``docs/recorded/model_step_<gpu>.json`` (``<gpu>`` from the device's name,
e.g. ``h100``) with the device, the torch, CUDA, Triton, transformers and
kernels versions, the date, the configuration, every round's time, each first
call's compile time, how many times each compiled graph calls the fused
operator, the support the kernelized rows used and the ``forward`` their
norms ran, and each variant that failed with its error. Step 20 reads it.

Most of its time goes to compiling: every variant is compiled for both
steps. ``--variants`` times a subset (each in turn with the others named).
(Not ``--only``: Inductor reads an ``--only`` of the command line as a
benchmark's name and writes it, quotes and all, into its generated code.)

``--device cpu --small --out FILE`` runs the same code on the CPU with
step 20's small model, to check the tool without a GPU; it never writes into
``docs/recorded/`` on its own.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import functools
import json
import operator
import re
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # guidekit, from the checkout this tool lives in

from guidekit import model_step, model_swap  # noqa: E402
from guidekit.recorded import installed_version, short_gpu_name, tool_command  # noqa: E402

GPU_CONFIG = dict(
    vocab_size=32000,
    hidden_size=2048,
    intermediate_size=5632,
    num_hidden_layers=4,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=4096,
)
GPU_BATCH, GPU_SEQ = 4, 2048
STEPS = {
    "training step": model_step.training_step,
    "inference forward": model_step.inference_forward,
}
#: The kernels mode of each group of the record.
KERNELS_MODES = {
    ("eager", "training step"): "TRAINING",
    ("eager", "inference forward"): "INFERENCE",
    ("compiled", "training step"): "TRAINING|TORCH_COMPILE",
    ("compiled", "inference forward"): "INFERENCE|TORCH_COMPILE",
}
#: The kernelized variants, by the layer each is given.
KERNELIZED = {
    "kernelized opguide.rms_norm (cpp)": "OpguideRMSNorm",
    "kernelized opguide.rms_norm (triton)": "OpguideRMSNormTriton",
}
FUSED_CALL = re.compile(r"torch\.ops\.opguide\.fused_add_rms_norm_(?:triton_)?\.default\(")


def command_line(argv: list[str]) -> str:
    """The command as the record states it: ``--out``'s folder left out (it names a machine)."""
    return tool_command("tools/record_model_step.py", argv)


def variants(device: str) -> tuple[dict, dict]:
    """The variants and those left out.

    Returns:
        ``({name: (norm forward, fusion pass backend)}, {name: why left out})``:
        a forward of ``None`` is the model's own; a kernelized variant has its
        layer's name in place of the forward and ``"kernelize"`` in place of
        the backend.
    """
    found = {
        "model's own": (None, None),
        "F.rms_norm": (model_step.f_rms_norm, None),
        "opguide.rms_norm (cpp)": (model_step.opguide_cpp, None),
    }
    missing = {}
    from opguide.backends import TRITON_INSTALLED

    if not TRITON_INSTALLED:
        missing["opguide.rms_norm (triton)"] = "triton is not installed"
    elif device == "cpu":
        missing["opguide.rms_norm (triton)"] = "on the CPU it runs in Triton's interpreter"
    else:
        found["opguide.rms_norm (triton)"] = (model_step.opguide_triton, None)
    peers, peers_missing = model_step.peer_norms()
    if device == "cpu":
        peers_missing.update({name: "GPU only" for name in peers})
        peers = {}
    found.update({name: (forward, None) for name, forward in peers.items()})
    missing.update(peers_missing)
    found["model's own + fusion pass (cpp)"] = (None, "cpp")
    if "opguide.rms_norm (triton)" in found:
        found["model's own + fusion pass (triton)"] = (None, "triton")
    try:
        import kernels  # noqa: F401
    except ImportError as err:
        missing.update({name: f"ImportError: {err}" for name in KERNELIZED})
    else:
        for name, layer in KERNELIZED.items():
            route = model_swap.LAYERS[layer]
            if route in found:
                found[name] = (layer, "kernelize")
            else:
                missing[name] = f"{route} is not measured here"
    return found, missing


def group_models(found: dict, base, support: dict, forwards: list) -> dict:
    """The models of each ``(mode, step)``, from :func:`variants`' ``found``.

    A variant with a norm ``forward`` or the fusion pass is one model per
    mode (eager, and compiled), shared by both steps; a kernelized variant is
    one model per group, kernelized for the group's mode from a local layer
    repository with ``support``'s flags. ``forwards`` receives, per kernelized
    model, the ``forward`` its norms run.

    Returns:
        ``{(mode, step): {name: model}}``, in ``found``'s order.
    """
    from opguide.experimental import inductor_fusion

    groups = {key: {} for key in KERNELS_MODES}
    repository = None
    for name, (forward, how) in found.items():
        if how == "kernelize":
            import kernels

            if repository is None:
                folder = Path(tempfile.mkdtemp(prefix="layer-repository-"))
                repository = model_swap.layer_repository(folder, support)
            for (mode, step), kernels_mode in KERNELS_MODES.items():
                flag = functools.reduce(
                    operator.or_, (kernels.Mode[m] for m in kernels_mode.split("|"))
                )
                model = model_swap.kernelized(copy.deepcopy(base), repository, forward, flag)
                runs = ", ".join(sorted(model_swap.norm_forwards(model)))
                forwards.append(dict(mode=mode, step=step, variant=name, forward=runs))
                groups[mode, step][name] = torch.compile(model) if mode == "compiled" else model
            continue
        model = copy.deepcopy(base)
        if forward is not None:
            model_step.use_norm(model, forward)
        if how is None:
            eager, compiled = model, torch.compile(model)
        else:
            eager = None
            compiled = torch.compile(model, options=inductor_fusion.compile_options(how))
        for step in STEPS:
            if eager is not None:
                groups["eager", step][name] = eager
            groups["compiled", step][name] = compiled
    return groups


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="the JSON file (default docs/recorded/model_step_<gpu>.json)")
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds (default 20)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--small", action="store_true", help="step 20's small model")
    parser.add_argument(
        "--variants", nargs="+", metavar="VARIANT", help="time these alone (names as listed)"
    )
    parser.add_argument(
        "--support-from",
        metavar="FILE",
        help="the record whose measurements decide what the kernelized layers declare "
        "(default: the --out file this run replaces; none there, nothing is declared)",
    )
    args = parser.parse_args()

    from torch._inductor.utils import run_and_get_code

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA GPU is visible (use --device cpu --small --out FILE to check)")
    if args.device == "cpu" and not args.out:
        parser.error("--device cpu needs --out: a CPU run is no GPU record")
    if args.small:
        config, batch, seq = model_step.SMALL_CONFIG, model_step.SMALL_BATCH, model_step.SMALL_SEQ
    else:
        config, batch, seq = GPU_CONFIG, GPU_BATCH, GPU_SEQ
    dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU ({args.device})"
    out = Path(
        args.out or ROOT / "docs" / "recorded" / f"model_step_{short_gpu_name(device_name)}.json"
    )
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    # Each variant is a model of its own, and Dynamo compiles the shared
    # forward once per variant and step; the default limit (8) would send the
    # later ones back to eager.
    torch._dynamo.config.recompile_limit = 64

    found, missing = variants(args.device)
    if args.variants:
        unknown = sorted(set(args.variants) - set(found) - set(missing))
        if unknown:
            parser.error(f"--variants: unknown {unknown}; known: {sorted(found)}")
        found = {name: v for name, v in found.items() if name in args.variants}
        missing = {name: why for name, why in missing.items() if name in args.variants}
    # The support the kernelized rows declare: decided from the record that
    # this run replaces, read before it is overwritten.
    support_from = Path(args.support_from) if args.support_from else out
    previous = json.loads(support_from.read_text()) if support_from.exists() else None
    support = model_swap.measured_support(previous)
    kernelized = {
        "from": support_from.name if previous else None,
        "support": support,
        "forwards": [],
    }
    base = model_step.llama(config, dtype, args.device)
    ids = model_step.token_ids(config, batch, seq, args.device)
    groups = group_models(found, base, support, kernelized["forwards"])
    del base
    failed, compile_seconds, fused_calls = [], [], []
    calls = {}
    results = []

    def write(complete: bool) -> None:
        record = {
            "format": 1,
            "device": device_name,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "triton": installed_version("triton"),
            "transformers": installed_version("transformers"),
            "kernels": installed_version("kernels"),
            "date": datetime.date.today().isoformat(),
            "command": command_line(sys.argv[1:]),
            "config": config,
            "batch": batch,
            "seq": seq,
            "dtype": str(dtype).removeprefix("torch."),
            "rounds": args.rounds,
            # False while groups are still to be timed: a run stopped early
            # leaves the groups it finished.
            "complete": complete,
            "missing": missing,
            "results": results,
            "compile_seconds": compile_seconds,
            "fused_calls": fused_calls,
            "kernelized": kernelized,
            "failed": failed,
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=1) + "\n")

    # Eager first, then compiled; for each step, every variant's first call
    # (under torch.compile, the compile), then the rounds, then the file.
    for mode in ("eager", "compiled"):
        for step_name, step in STEPS.items():
            for name, model in groups[mode, step_name].items():
                start = time.perf_counter()
                try:
                    _, code = run_and_get_code(step, model, ids)
                    sync()
                except Exception as err:  # noqa: BLE001  (recorded, and the others go on)
                    lines = str(err).strip().splitlines()
                    error = f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]
                    failed.append(dict(mode=mode, step=step_name, variant=name, error=error))
                    print(f"FAILED {mode} {step_name} {name}: {error}", flush=True)
                    continue
                seconds = time.perf_counter() - start
                if mode == "compiled":
                    compile_seconds.append(dict(variant=name, step=step_name, seconds=seconds))
                    count = len(FUSED_CALL.findall("\n".join(code)))
                    fused_calls.append(dict(variant=name, step=step_name, count=count))
                    print(f"compiled {name}, {step_name}: {seconds:.1f} s, fused calls {count}")
                calls[mode, step_name, name] = functools.partial(step, model, ids)
            group = {k: v for k, v in calls.items() if k[:2] == (mode, step_name)}
            if not group:
                continue
            times = model_step.time_interleaved(group, args.rounds, sync=sync, warmup=2)
            for (_, _, name), ms in times.items():
                row = dict(mode=mode, step=step_name, variant=name, **model_step.summary(ms))
                results.append({**row, "ms": ms})
                print(f"{mode:8} {step_name:17} {name:36} {row['median']:9.3f} ms", flush=True)
            write(complete=False)
    write(complete=True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
