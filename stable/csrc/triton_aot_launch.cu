// opguide's launcher of Triton kernels compiled ahead of time
// (csrc/triton_aot/triton_aot_launch.cu, torch-free), compiled into this
// library: setuptools takes sources only from paths inside this folder.
#include "../../csrc/triton_aot/triton_aot_launch.cu"
