"""Evaluation without torch: real speech by split, streams built on a timeline, detections matched
to what was said. Imported downward by training/, export/ and benchmarks/; imports only corpus/."""
