"""The GPUs the kernels are compiled for, and what one launch and one compile record."""

from __future__ import annotations

import dataclasses

#: The environment variable that selects every configuration by default.
FULL_ENV = "OPGUIDE_TRITON_TARGETS_FULL"


@dataclasses.dataclass(frozen=True)
class Target:
    """One GPU to compile for, with the properties the launch rules and the budget read.

    Attributes:
        name: the architecture, as Triton spells it (``gfx942``, ``sm_90``).
        backend: ``"hip"`` or ``"cuda"``.
        arch: ``GPUTarget``'s arch: the gfx name, or the compute capability as an int.
        warp_size: threads per warp (wavefront).
        gpu: the GPU whose counts are used below.
        capability: what ``torch.cuda.get_device_capability`` reports on it.
        sm_count: ``multi_processor_count`` (SMs or CUs) of that GPU.
        smem_per_block: the largest shared memory (LDS) one block may use, bytes.
        regs_per_thread: the most 32-bit registers (VGPRs on AMD) one thread may use.
        regfile_per_lane: AMD: VGPRs per lane of one SIMD, shared by its waves;
            NVIDIA: 32-bit registers per SM, shared by its threads.
        regs_total: the most registers one thread may use in all: on CDNA (gfx90a,
            gfx942, gfx950) 256 architectural + 256 accumulation VGPRs.
        simds: AMD: SIMDs per CU over which a workgroup's waves are spread.
    """

    name: str
    backend: str
    arch: object
    warp_size: int
    gpu: str
    capability: tuple[int, int]
    sm_count: int
    smem_per_block: int
    regs_per_thread: int
    regfile_per_lane: int
    regs_total: int
    simds: int = 4

    def gpu_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget(self.backend, self.arch, self.warp_size)

    def register_budget(self, num_warps: int) -> int:
        """Registers per thread (arch + accumulation VGPRs on AMD) a block of num_warps may use."""
        if self.backend == "cuda":
            # All threads of a block are resident on one SM at once.
            per_thread = self.regfile_per_lane // (num_warps * self.warp_size)
            return min(self.regs_per_thread, per_thread // 8 * 8)  # allocated in units of 8
        # A workgroup's waves are spread over the CU's SIMDs, and the waves on one
        # SIMD share its VGPR file.
        waves_per_simd = -(-num_warps // self.simds)
        return min(self.regs_total, self.regfile_per_lane // waves_per_simd)


# Sources of the numbers below:
# - AMD: LLVM's AMDGPUUsage ("Processors", and the register limits of each
#   generation), the AMD CDNA2/CDNA3/CDNA4 ISA guides and the "GPU hardware
#   specifications" table of the ROCm documentation: 64 KiB LDS per workgroup on
#   gfx90a, gfx942 and gfx1100, 160 KiB on gfx950; 512 VGPRs per lane per SIMD
#   on CDNA (256 architectural + 256 accumulation, one unified file), at most
#   256 architectural VGPRs per wave; RDNA3 (gfx1100, Navi 31) has 1536 VGPRs
#   per lane per SIMD and at most 256 per wave. ROCm reports the gfx version as
#   the capability: (9, 0), (9, 4), (9, 5), (11, 0).
# - NVIDIA: the CUDA C++ Programming Guide, "Compute Capabilities", technical
#   specifications: 255 registers per thread, 64 Ki 32-bit registers per SM,
#   shared memory per block (opt-in) 163 KiB on 8.0, 227 KiB on 9.0 and 10.0.
# - SM and CU counts: MI250X (one GCD), MI300X, MI355X, RX 7900 XTX, A100 SXM,
#   H100 SXM, B200, from the vendors' data sheets. They change which kernel a
#   long row takes (opguide.triton.launch's planners), not how a kernel compiles.
TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("gfx90a", "hip", "gfx90a", 64, "MI250X", (9, 0), 110, 64 * 1024, 256, 512, 512),
        Target("gfx942", "hip", "gfx942", 64, "MI300X", (9, 4), 304, 64 * 1024, 256, 512, 512),
        Target("gfx950", "hip", "gfx950", 64, "MI355X", (9, 5), 256, 160 * 1024, 256, 512, 512),
        Target(
            "gfx1100", "hip", "gfx1100", 32, "RX 7900 XTX", (11, 0), 96, 64 * 1024, 256, 1536, 256
        ),
        Target("sm_80", "cuda", 80, 32, "A100", (8, 0), 108, 163 * 1024, 255, 65536, 255),
        Target("sm_90", "cuda", 90, 32, "H100", (9, 0), 132, 227 * 1024, 255, 65536, 255),
        Target("sm_100", "cuda", 100, 32, "B200", (10, 0), 148, 227 * 1024, 255, 65536, 255),
    )
}

#: The library's Triton package, and its modules that hold kernels.
LIBRARY = "opguide.triton"
KERNEL_MODULES = tuple(f"{LIBRARY}.{name}" for name in ("forward", "backward", "split", "fused"))
_DTYPES = ("float32", "float16", "bfloat16")
#: Row lengths: each power of two from 1 to 2**23 (past the longest row any
#: target splits, so every kernel is reached) and the lengths 1, 2, 4 and 8
#: above it, which give every ALIGN the kernels specialise on.
ROW_LENGTHS = tuple(sorted({2**e + d for e in range(24) for d in (0, 1, 2, 4, 8)}))


@dataclasses.dataclass(frozen=True)
class Launch:
    """One launch of a kernel, as the library makes it.

    Attributes:
        module: the module that defines the kernel.
        kernel: its name there (a ``@triton.jit`` or ``@triton.autotune`` object).
        args: the positional arguments: a tensor as ``"*dtype"``, an int or a float.
        options: the keyword arguments (constexprs, ``num_warps``, launch options),
            sorted by name.
    """

    module: str
    kernel: str
    args: tuple
    options: tuple

    @property
    def kw(self) -> dict:
        return dict(self.options)

    def config(self) -> str:
        """The constexprs and options that pick a compiled variant, as ``K=v`` words."""
        return " ".join(f"{k}={v}" for k, v in self.options)

    def dtypes(self) -> str:
        return ",".join(sorted({a[1:] for a in self.args if isinstance(a, str)}))


@dataclasses.dataclass
class Usage:
    """What one compile of a kernel for one target uses, and whether it fits.

    Attributes:
        kernel, config, dtypes, target: what was compiled, for which GPU.
        status: ``"ok"``, ``"spill"``, ``"over budget"`` or ``"error"``.
        regs: registers per thread (architectural VGPRs on AMD).
        agprs: AMD accumulation VGPRs (0 on NVIDIA).
        sgprs: AMD scalar registers (None on NVIDIA).
        spills: bytes spilled (NVIDIA: stores + loads) or VGPRs spilled (AMD).
        sgpr_spills: AMD: SGPRs spilled (into VGPR lanes, or memory).
        scratch: per-thread local memory: NVIDIA stack frame, AMD private segment, bytes.
        shared: shared memory (LDS) bytes per block.
        reg_budget, smem_budget: the limits checked.
        reason: why it is not ok.
        seconds: compile time (0 for a cached result).
        cached: whether it came from the cache.
    """

    kernel: str
    config: str
    dtypes: str
    target: str
    status: str = "ok"
    regs: int | None = None
    agprs: int = 0
    sgprs: int | None = None
    spills: int = 0
    sgpr_spills: int = 0
    scratch: int = 0
    shared: int = 0
    num_warps: int = 0
    reg_budget: int = 0
    smem_budget: int = 0
    reason: str = ""
    seconds: float = 0.0
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"
