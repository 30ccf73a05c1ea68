"""The benches: `rotkws bench` (bench.py) and one file per section of BENCHMARKS.md, each writing
its own section.

Imports any package of this project but rotkws/ (the command, which runs `rotkws bench` from
here); nothing imports it but rotkws/ and tests/.
"""
