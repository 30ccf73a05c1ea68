"""The runtime: the keyword spotter over ONNX files (spotter.py, detection.py, twostage.py), the
CLI commands that use it (`rotkws detect`, `rotkws demo`), the Gradio page and its enroll tab, the
bundled models; and, torch-free, what training and export use of it (sweep.py, wake_rule.py,
clip_accuracy.py).

Imports corpus/ only, of this project (and numpy, onnxruntime, soundfile, soxr, gradio); never
torch, model/, training/ or export/: the runtime reads nothing but the ONNX file.
"""
