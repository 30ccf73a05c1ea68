"""The `rotkws` command (cli.py) and the subcommands that join layers: `rotkws enroll`, which trains
(training/) and then exports (export/) and chooses a threshold through the runtime (app/), and
`rotkws eval`, which scores an ONNX file (app/) or a checkpoint (training/).

The top of the import graph: it may import every package here, benchmarks/ only to run `rotkws
bench`; nothing imports it but tests/.
"""
