"""Training: datasets, augmentation, the Lightning module and data module, configs and checkpoints
(`rotkws train`); the text-to-speech engines and the fit of `rotkws enroll` (enroll*.py).

Imports corpus/, model/, evaluation/ and app/'s torch-free runtime (to run an ONNX file, and the
detection rule an enrolled file stores); never export/ or benchmarks/.
"""
