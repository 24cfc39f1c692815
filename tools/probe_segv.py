import sys

import torch

print("loaded", opguide.__file__, torch.ops.loaded_libraries, hasattr(torch.ops.opguide, "rms_norm"), flush=True)
if "compile" in sys.argv:
    f = torch.compile(lambda x: x.sin() + 1, fullgraph=True)
    f(torch.randn(8, 8))
    print("compiled on cpu", flush=True)
try:
    torch.ones(2, 3) @ torch.ones(4, 5)
except RuntimeError as e:
    print("torch error ok:", str(e)[:60], flush=True)
try:
    torch.ops.opguide.rms_norm(torch.ones(2, 4), torch.ones(5), 1e-6)
except ValueError as e:
    print("opguide error ok:", str(e)[:60], flush=True)
