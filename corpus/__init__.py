"""The data layer, the bottom one: audio files read and checked one way and Speech Commands folders
as labelled clips (clips.py), their speaker-disjoint splits (splits.py), the data root and its
folders (folders.py), the label names (labels.py), a wake phrase's text (phrases.py), and the
sample rate with the one offline resampler to it (rate.py).

Imports numpy, soundfile and soxr only, nothing of this project's other packages: the runtime
(app/), evaluation/, model/, training/, export/ and benchmarks/ all read audio and data folders
through here.
"""
