"""Grow a trained RotRNN classifier deeper without changing what it computes.

A block is `h + half-GLU(GELU(C·x + D ⊙ u))` (model/network.py): with the recurrent layer's
output map C and skip D at zero its output is GELU(0)·σ(…) = 0, so the block passes h through
unchanged. New blocks built that way (everything else initialised as a fresh network would be)
are appended after the trained ones: the grown network's logits equal the original's, the
state gains one segment per new layer (before `pooled`; zeros to start, as every segment), and training from it
(`trainer.init_from`) starts where the original stopped, with C and D of the new blocks the
first weights to move.

    python -m training.grow training/checkpoints/kws12_more3.ckpt --layers 6 -o runs/grown6.ckpt
"""
import argparse
import sys
from pathlib import Path

import torch

from model.classifiers import build_classifier, checkpoint_payload, classifier_config, load_checkpoint
from model.network import RotRNNClassifier


def grow(net, layers: int, seed: int = 0):
    """A copy of `net` (a RotRNNClassifier) with `layers` blocks, the new ones appended and
    silent (their recurrent layer's C and D zero). ValueError when `layers` is not more."""
    if not isinstance(net, RotRNNClassifier):
        raise ValueError(f"only RotRNN classifiers grow; this is {type(net).__name__}")
    have = len(net.blocks)
    if layers <= have:
        raise ValueError(f"the network has {have} layers already; grow to more, not {layers}")
    torch.manual_seed(seed)
    grown = build_classifier(classifier_config(net) | {"layers": layers})
    missing, unexpected = grown.load_state_dict(net.state_dict(), strict=False)
    if unexpected or any(not k.startswith(tuple(f"blocks.{i}." for i in range(have, layers))) for k in missing):
        raise ValueError(f"the grown network does not hold the original's weights: {missing[:3]} {unexpected[:3]}")
    with torch.no_grad():
        for block in grown.blocks[have:]:
            block.rnn.C.zero_()
            if block.rnn.D is not None:
                block.rnn.D.zero_()
    return grown.train(net.training)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", type=Path, help="a rotkws checkpoint of a RotRNN classifier")
    p.add_argument("--layers", type=int, required=True, help="the grown network's number of blocks")
    p.add_argument("-o", "--output", type=Path, required=True, help="where the grown checkpoint goes")
    p.add_argument("--seed", type=int, default=0, help="seeds the new blocks' other weights")
    args = p.parse_args(argv)
    try:
        net, entry = load_checkpoint(args.checkpoint)
        grown = grow(net, args.layers, args.seed)
    except ValueError as e:
        p.error(str(e))
    meta = {k: v for k, v in entry.items() if k != "config"}
    meta["grown_from"] = f"{args.checkpoint} ({len(net.blocks)} layers, new blocks silent, seed {args.seed})"
    args.output.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint_payload(grown, **meta), args.output)
    print(f"{args.output}: {len(net.blocks)} → {args.layers} layers, same outputs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
