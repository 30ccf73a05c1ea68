"""RotRNN in pure PyTorch: the layer, the one chunked op, the keyword classifier; the DS-CNN
baseline beside it, and the dispatch between them (model/classifiers.py). Imports torch and
corpus/ (the sample rate) only: no Lightning, no file I/O beyond checkpoints."""
from .classifiers import (build_classifier, checkpoint_payload, classifier_config,
                          classifier_from_checkpoint)
from .cnn import DSCNN, CNNConfig, LogMel
from .frontend import Frontend, FrontendConfig
from .logmel import LogMelPixels
from .network import SAMPLE_RATE, Block, RotRNNClassifier, RotRNNConfig, count_parameters, paper_sc35_config
from .rotrnn import RotRNN, rotrnn_reference
from .scan import ScanKernels, chunked_scan, scan_kernels

__all__ = ["CNNConfig", "DSCNN", "SAMPLE_RATE", "Block", "Frontend", "FrontendConfig", "LogMel", "LogMelPixels", "RotRNN", "RotRNNClassifier",
           "RotRNNConfig", "ScanKernels", "build_classifier", "checkpoint_payload", "chunked_scan",
           "classifier_config", "classifier_from_checkpoint", "count_parameters", "paper_sc35_config",
           "rotrnn_reference", "scan_kernels"]
