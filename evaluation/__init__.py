"""Evaluation without torch and without a model: real speech by split (speech.py), streams on a
timeline and detections matched to what was said in them, the DET's rates and intervals
(streams.py). Imports only corpus/ (and numpy); imported by training/, export/ and benchmarks/.
Running a model over a stream is the runtime's (app/sweep.py)."""
