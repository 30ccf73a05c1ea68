"""training/: real clips through the data module, a tiny network that learns, checkpoints that
rebuild the network, resume, DDP on two real CPU processes, evaluation and bad input."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import lightning as L
import numpy as np
import pytest
import soundfile as sf
import torch
import torch.nn.functional as F

from corpus.clips import SILENCE, UNKNOWN, list_clips
from conftest import CLIPS, REPO
from model import RotRNNConfig, classifier_from_checkpoint, paper_sc35_config
from rotkws import eval_cli
from training import cli
from training.augment import AugmentConfig, augment
from training.config import load_config
from training.data import DataConfig, KWSDataModule, folder_splits, speech_commands_splits
from training.module import KWSModule, warmup_cosine
from corpus.labels import KWS12_LABELS, SC35_LABELS, task_labels

CONFIGS = sorted((REPO / "training" / "configs").glob("*.yaml"))
TINY = REPO / "training" / "configs" / "tiny.yaml"


VALIDATION = ["yes/1b4c9b89_nohash_0.wav", "no/1b4c9b89_nohash_0.wav", "go/1b4c9b89_nohash_0.wav",
              "_unknown_/bed_fe1916ba_nohash_0.wav"]


def copy_clips(root):
    """tests/data/clips as root/clips with a validation list (its speakers all hash to
    'testing', so without a list nothing would be left to train on)."""
    shutil.copytree(CLIPS, root / "clips")
    (root / "clips" / "validation_list.txt").write_text("\n".join(VALIDATION) + "\n")
    (root / "clips" / "testing_list.txt").write_text("")
    return root


@pytest.fixture(scope="module")
def clip_root(tmp_path_factory):
    return copy_clips(tmp_path_factory.mktemp("data"))


def tiny_overrides(run_dir, root, sources="[clips]", **extra) -> dict:
    """The tiny config on the 24 real clips of tests/data/clips (copied to root), into run_dir."""
    return {"data.root": str(root), "data.sources": sources, "data.noise": "null",
            "trainer.run_dir": str(run_dir), **{k.replace("__", "."): str(v) for k, v in extra.items()}}


def as_argv(config, overrides: dict) -> list[str]:
    return ["--config", str(config)] + [a for k, v in overrides.items() for a in (f"--{k}", v)]


def training_set(dm: KWSDataModule) -> tuple[torch.Tensor, torch.Tensor]:
    items = [dm.sets["training"][i] for i in range(len(dm.sets["training"]))]
    return torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items])


# -- configs ------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_config_instantiates(path):
    cfg = load_config(path)
    labels = task_labels(cfg.data.task)
    module = KWSModule({**cfg.model, "labels": list(labels)}, vars(cfg.optim), vars(cfg.augment),
                       cfg.data.task)
    assert module.net.cfg.n_classes == len(labels)
    assert KWSDataModule(cfg.data).labels == labels
    assert list(module.state_dict())[0].startswith("net.")


def test_paper_config_is_the_papers():
    cfg = load_config(REPO / "training" / "configs" / "sc35_paper.yaml")
    assert RotRNNConfig(**cfg.model, labels=SC35_LABELS) == paper_sc35_config(SC35_LABELS)
    assert (cfg.data.task, cfg.data.batch_size, cfg.trainer.max_epochs) == ("sc35", 16, 40)
    o = cfg.optim
    assert (o.lr, o.weight_decay, o.recurrent_lr, o.warmup_epochs) == (0.008, 0.04, 0.001, 1.0)
    assert len(SC35_LABELS) == 35 and len(KWS12_LABELS) == 12


def test_recurrent_parameters_get_adam_without_weight_decay(tmp_path, clip_root):
    trainer, module, _ = cli.build(load_config(TINY, tiny_overrides(tmp_path, clip_root)))
    module.trainer = trainer
    opt = module.configure_optimizers()["optimizer"]
    rest, recurrent = opt.param_groups
    assert {id(p) for p in recurrent["params"]} == {id(p) for p in module.net.recurrent_parameters()}
    assert recurrent["weight_decay"] == 0 and rest["weight_decay"] == module.optim.weight_decay
    assert len(rest["params"]) + len(recurrent["params"]) == len(list(module.net.parameters()))


def test_warmup_then_cosine():
    factors = [warmup_cosine(s, 10, 110) for s in range(110)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == 1.0
    assert factors[60] == pytest.approx(0.5) and factors[-1] < 1e-3
    assert all(a >= b for a, b in zip(factors[9:], factors[10:]))


# -- augmentation -------------------------------------------------------------------------------
def test_augment_is_deterministic_given_a_generator():
    audio = torch.randn(4, 1600) * 0.1
    noise = torch.randn(20_000) * 0.1
    cfg = AugmentConfig(preroll_prob=1.0, preroll_min_seconds=0.02, preroll_max_seconds=0.05)
    run = lambda seed: augment(audio, noise, cfg, 160, 16_000, torch.Generator().manual_seed(seed))
    a, b, c = run(0), run(0), run(1)
    assert torch.equal(a, b) and not torch.equal(a[:, -1600:], c[:, -1600:])


def test_preroll_is_a_multiple_of_the_stride_and_keeps_the_clip():
    audio = torch.rand(6, 16_000) * 0.5
    off = dict(speed_min=1.0, speed_max=1.0, shift_seconds=0.0, gain_db=0.0, noise_prob=0.0)
    cfg = AugmentConfig(**off, preroll_prob=1.0, preroll_min_seconds=0.2, preroll_max_seconds=1.0)
    for seed in range(5):
        out = augment(audio, torch.randn(50_000), cfg, 160, 16_000, torch.Generator().manual_seed(seed))
        extra = out.shape[1] - 16_000
        assert extra % 160 == 0 and 3200 <= extra <= 16_000
        torch.testing.assert_close(out[:, extra:], audio)      # the clip itself comes last, intact
    plain = augment(audio, None, AugmentConfig(**off), 160, 16_000, torch.Generator())
    torch.testing.assert_close(plain, audio)


# -- data ---------------------------------------------------------------------------------------
def test_folder_without_lists_splits_by_speaker(shared_data):
    splits = folder_splits(shared_data / "speech_commands_v0.02_test_dev", KWS12_LABELS)
    speakers = {s: {c.speaker for c in clips if c.label != SILENCE} for s, clips in splits.items()}
    assert all(speakers.values())
    assert not speakers["training"] & speakers["validation"]
    assert not speakers["training"] & speakers["testing"]
    assert not speakers["validation"] & speakers["testing"]
    assert sum(map(len, splits.values())) == 3174


def test_folder_with_lists_follows_them(shared_data):
    folder = shared_data / "speech_commands_v0.01_sample"
    listed = set((folder / "validation_list.txt").read_text().split())
    splits = folder_splits(folder, KWS12_LABELS)
    assert splits["validation"] and all(c.name in listed for c in splits["validation"])
    assert not any(c.name in listed for c in splits["training"])


def make_speech_commands(root):
    """The full dataset's layout (SpeechCommands/speech_commands_v0.02/<word>/…, split lists)
    built from the real test clips: one word folder per word, `bed` from _unknown_."""
    sc = root / "SpeechCommands" / "speech_commands_v0.02"
    names = []
    for clip in list_clips(CLIPS, KWS12_LABELS):
        if clip.label == SILENCE:
            continue
        word = clip.path.name.split("_")[0] if clip.label == UNKNOWN else clip.label
        (sc / word).mkdir(parents=True, exist_ok=True)
        shutil.copy(clip.path, sc / word / f"{clip.speaker}_nohash_0.wav")
        names.append(f"{word}/{clip.speaker}_nohash_0.wav")
    (sc / "validation_list.txt").write_text("\n".join(names[0:4]) + "\n")
    (sc / "testing_list.txt").write_text("\n".join(names[4:10]) + "\n")
    return names


def test_full_speech_commands_through_torchaudio_without_download(tmp_path):
    names = make_speech_commands(tmp_path)
    dm = KWSDataModule(DataConfig(task="sc35", root=str(tmp_path), noise=None,
                                  sources=[{"kind": "speech_commands", "path": ".", "download": False}]))
    dm.prepare_data()
    dm.setup()
    assert {s: len(d) for s, d in dm.sets.items()} == {"training": len(names) - 10, "validation": 4, "testing": 6}
    x, y = dm.sets["validation"][0]
    assert x.shape == (16_000,) and SC35_LABELS[y] == names[0].split("/")[0]
    kws = speech_commands_splits(tmp_path, KWS12_LABELS)
    assert {c.label for s in kws.values() for c in s if c.path.parent.name == "bed"} == {UNKNOWN}
    missing = DataConfig(task="sc35", root=str(tmp_path / "none"), noise=None,
                         sources=[{"kind": "speech_commands", "path": "."}])
    with pytest.raises(ValueError, match="does not exist"):
        KWSDataModule(missing).setup()


def test_silence_is_cut_from_the_noise_and_unknown_subsampled(shared_data, clip_root):
    dm = KWSDataModule(DataConfig(root=str(shared_data), sources=[str(clip_root / "clips")], unknown_share=0.05,
                                  silence_share=0.3))
    dm.setup()
    train = dm.sets["training"]
    labels = [KWS12_LABELS[train.label_of(i)] for i in range(len(train))]
    words = sum(lab not in (SILENCE, UNKNOWN) for lab in labels)
    assert labels.count(SILENCE) == round(words * 0.3 / 0.65)
    assert labels.count(UNKNOWN) <= round(words * 0.05 / 0.65)
    cut = train[len(train) - 1][0]
    assert cut.shape == (16_000,) and 0 < cut.abs().max() <= 1


# -- training -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained_tiny(tmp_path_factory, clip_root):
    """The tiny network trained 24 steps (no augmentation) on the real test clips."""
    L.seed_everything(0, verbose=False)
    run = tmp_path_factory.mktemp("tiny")
    cfg = load_config(TINY, tiny_overrides(run, clip_root, augment__enabled="false", trainer__max_epochs=20,
                                           trainer__max_steps=24))
    trainer, module, dm = cli.build(cfg)
    audio, labels = training_set(dm)
    with torch.no_grad():
        before = F.cross_entropy(module.net.eval()(audio)[0], labels).item()
    module.net.train()
    trainer.fit(module, datamodule=dm)
    with torch.no_grad():
        after = F.cross_entropy(module.net.eval()(audio)[0], labels).item()
    return run, trainer, before, after


def test_tiny_network_learns_the_real_clips(trained_tiny):
    run, trainer, before, after = trained_tiny
    assert trainer.global_step == 24
    assert after < 0.8 * before, (before, after)      # measured: 2.70 → 1.94
    log = (run / "logs" / "version_0" / "metrics.csv").read_text().splitlines()
    assert {"train/loss_epoch", "train/acc", "val/acc", "lr/group0", "lr/group1",
            "train/state_norm_0", "train/epoch_seconds"} <= set(log[0].split(","))


def test_checkpoint_rebuilds_the_network_with_weights_only(trained_tiny):
    run, trainer, _, _ = trained_tiny
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    meta = ckpt["rotkws"]
    assert meta["task"] == "kws12" and meta["labels"] == list(KWS12_LABELS)
    assert "val/acc" in meta["metrics"] and meta["data"][0]["path"] == "clips"
    assert ckpt["global_step"] == trainer.global_step
    net = classifier_from_checkpoint(ckpt)
    live = trainer.lightning_module.net.state_dict()
    assert all(torch.equal(v, live[k]) for k, v in net.state_dict().items())


def test_best_ckpt_is_saved_before_last_ckpt(tmp_path, clip_root):
    """Lightning runs checkpoint callbacks in their order: best.ckpt's first, so that last.ckpt
    holds the best val/acc as of its own epoch, which a run resumed from it must beat."""
    cfg = load_config(TINY, tiny_overrides(tmp_path, clip_root, trainer__checkpoint_every_n_steps=5))
    callbacks = cli.checkpoints(tmp_path, cfg, has_val=True)
    assert [c.monitor for c in callbacks] == ["val/acc", None, None]
    assert [c.filename for c in callbacks] == ["best", "last", "last"]
    assert [c.filename for c in cli.checkpoints(tmp_path, cfg, has_val=False)] == ["last", "last"]


def test_eval_json_on_a_tiny_checkpoint(trained_tiny, capsys):
    run, _, _, _ = trained_tiny
    ckpt = run / "checkpoints" / "last.ckpt"
    png = ckpt.with_name("confusion.png")
    assert eval_cli.main(["--checkpoint", str(ckpt), "--data", str(CLIPS), "--json", "--png", str(png)]) == 0
    result = json.loads(capsys.readouterr().out)
    confusion = np.array(result["confusion"])
    assert result["n"] == confusion.sum() == 24
    assert result["accuracy"] == pytest.approx(np.trace(confusion) / 24)
    assert set(result["per_class"]) == set(KWS12_LABELS)
    assert os.path.getsize(result["png"]) > 1000


class Crash(L.Callback):
    """Stands in for a killed process: stops the run dead after `at` steps."""

    def __init__(self, at: int):
        self.at = at

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.at:
            raise KeyboardInterrupt


def test_resume_continues_from_the_last_checkpoint(tmp_path, clip_root):
    over = tiny_overrides(tmp_path, clip_root, data__batch_size=2, trainer__max_epochs=10, trainer__max_steps=8,
                          trainer__checkpoint_every_n_steps=2, trainer__limit_val_batches=1)
    cfg = load_config(TINY, over)
    with pytest.raises(SystemExit):                    # Lightning turns the interrupt into an exit
        cli.train(cfg, callbacks=[Crash(at=5)])
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 4      # mid-epoch: 9 steps/epoch
    steps = []

    class Record(L.Callback):
        def on_train_batch_start(self, trainer, *args):
            steps.append(trainer.global_step)

    module = cli.train(cfg, resume=True, callbacks=[Record()])
    assert steps[0] == 4 and module.trainer.global_step == 8
    assert cli.main(as_argv(TINY, tiny_overrides(tmp_path / "fresh", clip_root)) + ["--resume"]) == 2


DDP_SCRIPT = """
import sys, torch, lightning as L
from training import cli
from training.config import load_config

class Dump(L.Callback):
    def on_train_start(self, trainer, module):
        torch.save(module.net.state_dict(), f"{OUT}/init{trainer.global_rank}.pt")
    def on_train_end(self, trainer, module):
        torch.save({"step": trainer.global_step, "world": trainer.world_size,
                    "net": module.net.state_dict()}, f"{OUT}/rank{trainer.global_rank}.pt")

args = sys.argv[1:]
cfg = load_config(args[0], dict(zip(args[1::2], args[2::2])))
trainer, module, dm = cli.build(cfg, [Dump()])
trainer.fit(module, datamodule=dm)
"""


def test_ddp_two_cpu_processes_agree_on_the_weights(tmp_path, clip_root):
    script = tmp_path / "ddp_train.py"
    script.write_text(f"OUT = {str(tmp_path)!r}\n" + textwrap.dedent(DDP_SCRIPT))
    over = tiny_overrides(tmp_path / "run", clip_root, trainer__devices=2, trainer__strategy="ddp",
                          trainer__max_steps=3, trainer__max_epochs=10, data__batch_size=4,
                          trainer__limit_val_batches=0)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(script), str(TINY), *[a for kv in over.items() for a in kv]],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2] and [r["step"] for r in ranks] == [3, 3]
    init = torch.load(tmp_path / "init0.pt", weights_only=True)
    for name, w in ranks[0]["net"].items():
        assert torch.equal(w, ranks[1]["net"][name]), name
    assert any(not torch.equal(w, init[n]) for n, w in ranks[0]["net"].items())


# -- bad input ----------------------------------------------------------------------------------
def run_cli(capsys, argv) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


def test_unknown_config_keys_are_named(tmp_path, capsys):
    assert "model.d_modle" in run_cli(capsys, ["--config", str(TINY), "--model.d_modle", "8"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  max_epoch: 3\n")
    assert "trainer.max_epoch" in run_cli(capsys, ["--config", str(bad)])
    assert "no_such.yaml" in run_cli(capsys, ["--config", str(tmp_path / "no_such.yaml")])
    assert "7 heads" in run_cli(capsys, ["--config", str(TINY), "--model.heads", "7"])
    assert "model.d_model" in run_cli(capsys, ["--config", str(TINY), "--model.d_model", "wide"])


def test_missing_root_and_empty_folder_are_named(tmp_path, capsys):
    err = run_cli(capsys, as_argv(TINY, tiny_overrides(tmp_path, root=tmp_path / "nowhere")))
    assert "nowhere" in err and "does not exist" in err
    (tmp_path / "empty" / "yes").mkdir(parents=True)
    err = run_cli(capsys, as_argv(TINY, tiny_overrides(tmp_path, root=tmp_path, sources="[empty]")))
    assert "no clips in" in err and "empty" in err


def test_wrong_sample_rate_is_named(tmp_path, capsys):
    root = copy_clips(tmp_path / "data")
    victim = next((root / "clips" / "no").iterdir())
    x, _ = sf.read(victim)
    sf.write(victim, x[::2], 8000)
    err = run_cli(capsys, as_argv(TINY, tiny_overrides(tmp_path, root=root)))
    assert victim.name in err and "8000 Hz" in err and "16000 Hz" in err


def test_a_corrupt_clip_is_skipped_and_counted(tmp_path):
    root = copy_clips(tmp_path / "data")
    (root / "clips" / "yes" / "deadbeef_nohash_0.wav").write_bytes(b"not audio at all" * 100)
    dm = KWSDataModule(DataConfig(root=str(root), sources=["clips"], noise=None))
    with pytest.warns(UserWarning, match="deadbeef_nohash_0.wav"):
        dm.setup()
    assert len(dm.skipped) == 1 and sum(len(d) for d in dm.sets.values()) >= 24 - 1


@pytest.mark.slow      # one optimiser step of the 6-layer network over 16,000 steps, then its export
def test_paper_config_trains_a_step_and_exports(tmp_path, clip_root):
    """sc35_paper.yaml as it is (raw 16 kHz, bidirectional, 6 layers) on the real clips: one
    optimiser step that moves the weights, a checkpoint, and a verified ONNX clip classifier."""
    from export.onnx import export_onnx, read_metadata
    from model.classifiers import load_checkpoint
    config = REPO / "training" / "configs" / "sc35_paper.yaml"
    over = {"data.root": str(clip_root), "data.sources": "[clips]", "data.num_workers": "0",
            "data.batch_size": "2", "trainer.run_dir": str(tmp_path), "trainer.max_steps": "1",
            "trainer.limit_val_batches": "0", "trainer.accelerator": "cpu", "trainer.devices": "1",
            "trainer.progress_bar": "false"}
    cfg = load_config(config, over)
    start = {}

    class First(L.Callback):
        def on_train_start(self, trainer, module):
            start["weights"] = torch.nn.utils.parameters_to_vector(module.net.parameters()).detach().clone()

    module = cli.train(cfg, callbacks=[First()])
    assert module.trainer.global_step == 1
    net, entry = load_checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    assert entry["config"]["bidirectional"] and entry["config"]["layers"] == 6
    moved = torch.nn.utils.parameters_to_vector(net.parameters()) - start["weights"]
    assert torch.isfinite(moved).all() and moved.abs().max() > 0
    path = export_onnx(net, tmp_path / "sc35.onnx")
    meta = read_metadata(path)
    assert json.loads(meta["streaming"]) is False and len(json.loads(meta["labels"])) == 35


def test_init_from_a_checkpoint_with_other_labels_copies_all_but_the_head(capsys):
    """training/configs/sc36.yaml starts from kws12.ckpt: 12 labels there, 36 here."""
    from corpus.labels import SC36_LABELS
    from model.classifiers import load_checkpoint
    from training.module import KWSModule
    path = REPO / "training" / "checkpoints" / "kws12.ckpt"
    source, _ = load_checkpoint(path)
    model = source.cfg.to_dict() | {"labels": list(SC36_LABELS)}
    module = KWSModule(model, {}, task="sc36")
    head = module.net.head.weight.detach().clone()
    cli.init_weights(module, path)
    got, want = module.net.state_dict(), source.state_dict()
    assert all(torch.equal(got[k], v) for k, v in want.items() if not k.startswith("head."))
    assert torch.equal(got["head.weight"], head) and head.shape[0] == len(SC36_LABELS) == 36
    assert "every weight but the head's copied" in capsys.readouterr().err
