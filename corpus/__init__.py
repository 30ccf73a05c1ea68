"""The data layer: audio files read and checked one way (clips.py), Speech Commands folders as
labelled clips (clips.py) and their speaker-disjoint splits (splits.py).

numpy + soundfile only, no torch: the runtime (app/), training/, export/ and benchmarks/ all
read audio and data folders through here.
"""
