"""training/grow.py: a deeper network that computes what the trained one did, and learns from there."""
import pytest
import torch

from model.classifiers import checkpoint_payload, load_checkpoint
from model.cnn import CNNConfig, DSCNN
from model.network import RotRNNClassifier, RotRNNConfig
from training.grow import grow, main


def trained_like(layers=2, layer="rotrnn") -> RotRNNClassifier:
    """A small causal log-mel network with every weight random (no zero anywhere)."""
    torch.manual_seed(0)
    net = RotRNNClassifier(RotRNNConfig(labels=("a", "b", "c"), frontend="logmel", d_model=16, state=16,
                                        heads=2, layers=layers, chunk=8, layer=layer))
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return net.eval()


@pytest.mark.parametrize("layer", ["rotrnn", "lru"])
def test_the_grown_network_computes_what_the_original_did(layer):
    net = trained_like(layer=layer)
    grown = grow(net, 4).eval()
    assert len(grown.blocks) == 4 and grown.state_size == net.state_size + 2 * 16
    torch.manual_seed(1)
    pixels = torch.rand(3, 150, 40) * 255
    logits, state = net.frame_logits(pixels)
    logits_g, state_g = grown.frame_logits(pixels)
    torch.testing.assert_close(logits_g, logits, rtol=0, atol=1e-6)
    audio = torch.randn(2, 16000) * 0.1                                    # and from audio, streamed
    first, s = grown(audio[:, :8000])
    torch.testing.assert_close(grown(audio[:, 8000:], s)[0], net(audio[:, 8000:], net(audio[:, :8000])[1])[0],
                               rtol=0, atol=1e-5)
    kept = net.state_size - 16                                             # all but `pooled`
    torch.testing.assert_close(state_g[:, :kept], state[:, :kept])          # same layers, same states
    torch.testing.assert_close(state_g[:, -16:], state[:, -16:], rtol=0, atol=1e-6)


def test_the_new_blocks_learn():
    net = trained_like()
    grown = grow(net, 3).train()
    opt = torch.optim.SGD(grown.parameters(), lr=0.1)
    before = grown.blocks[2].rnn.C.detach().clone()
    logits, _ = grown.frame_logits(torch.rand(4, 60, 40) * 255)
    torch.nn.functional.cross_entropy(logits.reshape(-1, 3), torch.randint(0, 3, (4 * 60,))).backward()
    assert grown.blocks[2].rnn.C.grad.abs().sum() > 0 and grown.blocks[2].rnn.D.grad.abs().sum() > 0
    opt.step()
    assert not torch.equal(grown.blocks[2].rnn.C, before)
    assert grown.blocks[0].rnn.C.grad.abs().sum() > 0                       # the old blocks learn on


def test_it_grows_only_deeper_and_only_rotrnn():
    with pytest.raises(ValueError, match="has 2 layers already"):
        grow(trained_like(), 2)
    with pytest.raises(ValueError, match="only RotRNN classifiers grow"):
        grow(DSCNN(CNNConfig(labels=("a", "b"))), 3)


def test_the_command_writes_a_checkpoint_that_loads(tmp_path, capsys):
    src, out = tmp_path / "two.ckpt", tmp_path / "deeper" / "three.ckpt"
    net = trained_like()
    torch.save(checkpoint_payload(net, task="custom", labels=["a", "b", "c"]), src)
    assert main([str(src), "--layers", "3", "-o", str(out)]) == 0
    grown, entry = load_checkpoint(out)
    assert entry["config"]["layers"] == 3 and entry["task"] == "custom" and "two.ckpt" in entry["grown_from"]
    pixels = torch.rand(2, 120, 40) * 255
    torch.testing.assert_close(grown.frame_logits(pixels)[0], net.frame_logits(pixels)[0], rtol=0, atol=1e-6)
    with pytest.raises(SystemExit) as e:
        main([str(src), "--layers", "1", "-o", str(out)])
    assert e.value.code == 2 and "grow to more, not 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing.ckpt"), "--layers", "3", "-o", str(out)])
    assert "does not exist" in capsys.readouterr().err
