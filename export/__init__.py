"""Checkpoint → one streaming ONNX file, verified against PyTorch and the runtime (`rotkws export`);
quantisation, metadata, calibration (`rotkws calibrate`), an enrolled wake word's threshold.

Imports corpus/, model/, evaluation/ and app/ (the runtime, to check what it wrote); never
training/ or benchmarks/.
"""
