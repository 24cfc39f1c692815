"""Experiments that use private torch or Triton APIs: opt-in, off by default.

The library itself uses public APIs only. A module here may break on any
torch or Triton release; ``tests/test_experimental_*.py`` says which private
attribute went missing when one does.
"""
