"""The benches: `rotkws bench` (bench.py, with headline.py, the README's table it shares with
converge.py) and one file per section of BENCHMARKS.md, each writing its own section
(report.py).

Imports any package of this project but rotkws/ (the command, which runs `rotkws bench` from
here). Nothing imports it but rotkws/ and the tooling beside it: tests/, and .ci/container.py,
which writes its section through report.py.
"""
