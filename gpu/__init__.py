"""Tooling for a borrowed GPU machine: the shared data packed small enough to travel with the
checkout (carry.py), and the converge bench run there (converge.sh: benchmarks/converge.py on
the GPU). Imports corpus/ and training/; not installed with the package, nothing imports it."""
