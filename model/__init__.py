"""RotRNN in pure PyTorch: the layer, the one chunked op, the keyword classifier."""
from .network import (SAMPLE_RATE, Block, Frontend, RotRNNClassifier, RotRNNConfig, checkpoint_payload,
                      classifier_from_checkpoint, count_parameters,
                      paper_sc35_config)
from .rotrnn import RotRNN, rotrnn_reference
from .scan import ScanKernels, chunked_scan, scan_kernels

__all__ = ["SAMPLE_RATE", "Block", "Frontend", "RotRNN", "RotRNNClassifier", "RotRNNConfig",
           "ScanKernels", "checkpoint_payload", "chunked_scan", "classifier_from_checkpoint", "count_parameters", "paper_sc35_config",
           "rotrnn_reference", "scan_kernels"]
