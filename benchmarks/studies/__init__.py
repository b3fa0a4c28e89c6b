"""Finished one-off studies: each answered one question, and its result is committed under
``benchmarks/results`` (indexed in ``benchmarks/results/README.md``). They stay runnable (smoke-tested in
``tests/test_benchmarks_studies.py``) so that a result can be reproduced, but new work goes into the lasting
tools one folder up."""
