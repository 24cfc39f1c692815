"""The guide's machinery: what builds, checks and measures the pages, not the operators.

``opguide/`` is the operator library a reader copies into a project of their
own; this package holds what the guide needs around it:

* :mod:`guidekit.benchmark`: GPU time and eager time of the operators, their
  peers and a same-bytes copy (``python -m guidekit.benchmark --help``), one
  module per part of the job;
* :mod:`guidekit.recorded`: the recorded results of ``docs/recorded/``, the
  sources each measured (and whether they changed since), and the small
  reader that prints a record's rows as tables and plots on the pages;
* :mod:`guidekit.compile_checks`: ``nvcc``/``hipcc`` compile checks and the
  machine code of the CUDA kernels, on machines without a GPU;
* :mod:`guidekit.buildinfo`: what an extension build sees on this machine
  (``python -m guidekit.buildinfo``);
* ``guidekit.triton_targets``: every Triton kernel of the library, in the
  launch configurations it picks, compiled for AMD and NVIDIA GPUs without a
  GPU, with its registers, spills and shared memory
  (``python -m guidekit.triton_targets``).
* :mod:`guidekit.manifests`: each route's files to take into a project of
  one's own (``manifests/``), checked against their includes and imports,
  and the files to write, cut from this repository's;
* :mod:`guidekit.wheels`: a wheel built, its needed libraries read, repaired
  with ``auditwheel`` (torch's libraries left out), installed into a fresh
  virtual environment and tested there;
* :mod:`guidekit.model_step`: a Hugging Face Llama with its RMSNorm swapped,
  and a model step timed in interleaved rounds (step 20, and
  ``tools/record_model_step.py`` on a GPU); :mod:`guidekit.model_swap`: the
  swap made with ``kernels.kernelize`` and a local layer repository
  (``guidekit/kernel_layers.py``), its layers declaring what a record
  measured; :mod:`guidekit.model_record`: that GPU record read.

It works in a checkout of the repository: ``setup.py`` installs it with an
editable install (``pip install -e .``) and leaves it out of a wheel, which
holds the operators only.
"""
