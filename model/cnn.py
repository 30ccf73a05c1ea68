"""The peer baseline: a depthwise-separable CNN on log-mel features (DS-CNN, Zhang et al. 2017,
"Hello Edge: Keyword Spotting on Microcontrollers"), a clip classifier.

    audio (B, S) → log-mel (B, T, 40) → BandNorm → conv 10×4 /2 → 4 × [dw 3×3, pw 1×1]
                 → global average pool → dropout → linear → logits (B, classes)

The log-mel front-end is built from ops that export to ONNX as they are (a fixed Conv1d whose
kernels are the windowed DFT basis, squares, a matmul by the mel matrix, a log): no torch.stft.
`net(audio, state=None) -> (logits, None)`, the contract of a bidirectional RotRNNClassifier: the
network reads whole clips and keeps no state; the runtime slides a 1 s window over a stream.
"""
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torchaudio.functional import melscale_fbanks

from .logmel import FRAME, HOP, PIXEL_MEAN, PIXEL_STD, LogMelPixels, dft_basis, mel_power
from .frontend import BandNorm, SpecAugment, check_masks
from .network import SAMPLE_RATE, ClassifierConfig

WINDOW_SECONDS = 0.025   # 25 ms analysis window (Hann)
HOP_SECONDS = 0.010      # 10 ms between frames
LOG_FLOOR = 1e-6         # log(power + LOG_FLOOR): silence stays finite


class LogMel(nn.Module):
    """Raw audio → log mel power, "valid" framing: frame t reads samples [t·hop, t·hop + window).

    audio: (B, S) float32 @ sample_rate, S ≥ window → (B, T, n_mels), T = (S − window) // hop + 1.
    Equals torchaudio's MelSpectrogram(n_fft=window, win_length=window, hop_length=hop,
    center=False, power=2, periodic Hann, HTK mel scale, no norm) followed by log(x + LOG_FLOOR).
    The DFT basis and the mel matrix are fixed buffers, not parameters.
    """

    def __init__(self, sample_rate: int = SAMPLE_RATE, n_mels: int = 40, window: int = 400,
                 hop: int = 160, f_min: float = 20.0, f_max: float | None = None):
        super().__init__()
        self.window, self.hop = window, hop
        bins = window // 2 + 1                                            # one-sided DFT, n_fft = window
        self.register_buffer("basis", dft_basis(window, window, bins), persistent=False)   # re; im
        mel = melscale_fbanks(bins, f_min, f_max or sample_rate / 2, n_mels, sample_rate)
        self.register_buffer("mel", mel.float(), persistent=False)       # (bins, n_mels)

    def forward(self, audio: Tensor) -> Tensor:
        return torch.log(mel_power(audio, self.basis, self.mel, self.hop) + LOG_FLOOR)   # (B, T, n_mels)


@dataclass
class CNNConfig(ClassifierConfig):
    labels: tuple[str, ...] = ("yes", "no")   # class names; the class count is len(labels)
    sample_rate: int = SAMPLE_RATE            # Hz of the audio the network reads
    frontend: str = "logmel25"                # "logmel25": 25 ms windows, log(power + 1e-6), a
                                              # per-band BatchNorm; "logmel": the image corpus's
                                              # pixels (model/logmel.py; n_mels must be 40)
    n_mels: int = 40                          # mel bands of the log-mel features
    channels: int = 172                       # every conv layer's width (DS-CNN-M: 172)
    blocks: int = 4                           # depthwise-separable blocks (DS-CNN-M: 4)
    dropout: float = 0.2                      # before the linear head
    mask_bands: int = 0                       # training only: SpecAugment (model/frontend.py), zero 2
    mask_frames: int = 0                      # random spans of ≤ this many bands / frames

    def __post_init__(self):
        self.labels = tuple(self.labels)
        if self.frontend not in ("logmel25", "logmel"):
            raise ValueError(f"frontend must be logmel25 or logmel, got {self.frontend!r}")
        if self.frontend == "logmel" and self.n_mels != 40:
            raise ValueError(f"the logmel front-end has 40 bands, got n_mels {self.n_mels}")
        if self.n_mels < 4:
            raise ValueError(f"n_mels must be at least 4 (the first conv is 4 bands wide), got {self.n_mels}")
        if self.channels < 1 or self.blocks < 0:
            raise ValueError(f"expected channels ≥ 1 and blocks ≥ 0, got {self.channels} and {self.blocks}")
        check_masks(self.mask_bands, self.mask_frames)

    @property
    def window(self) -> int:
        """Samples per analysis window (400 at 16 kHz; FRAME for the corpus's pixels)."""
        return FRAME if self.reads_pixels else round(WINDOW_SECONDS * self.sample_rate)

    @property
    def frontend_stride(self) -> int:
        """Samples per feature frame (160 at 16 kHz): inputs are a multiple of it."""
        return HOP if self.reads_pixels else round(HOP_SECONDS * self.sample_rate)

    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.frontend_stride

    @property
    def bidirectional(self) -> bool:
        """True in RotRNNConfig's sense: a clip classifier that reads whole clips, with no state."""
        return True

    @property
    def streaming(self) -> bool:
        return False



def conv_bn_relu(c_in: int, c_out: int, kernel, stride=1, padding=0, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, kernel, stride, padding, groups=groups, bias=False),
                         nn.BatchNorm2d(c_out), nn.ReLU())


def separable_block(channels: int) -> nn.Sequential:
    """3×3 depthwise + BN + ReLU, then 1×1 pointwise + BN + ReLU."""
    return nn.Sequential(conv_bn_relu(channels, channels, 3, padding=1, groups=channels),
                         conv_bn_relu(channels, channels, 1))


class DSCNN(nn.Module):
    """`net(audio, state=None) -> (logits, None)`.

    audio: (B, S) float32 @ cfg.sample_rate in [−1, 1]; S a positive multiple of
           cfg.frontend_stride (160). (window − hop) zeros go before the audio, so there are
           S / hop frames and frame t ends at sample (t + 1)·hop, as in the RotRNN's front-end.
    logits: (B, n_classes); global average pooling makes any length work, though the network
           is trained (and the runtime runs it) on 1 s clips.
    """

    def __init__(self, cfg: CNNConfig):
        super().__init__()
        self.cfg = cfg
        self.lead = cfg.window - cfg.frontend_stride                     # zeros before the audio
        if cfg.reads_pixels:
            self.logmel = LogMelPixels()
            self.norm = nn.Identity()                                     # (pixel − μ)/σ in `normalise`
        else:
            self.logmel = LogMel(cfg.sample_rate, cfg.n_mels, cfg.window, cfg.frontend_stride)
            self.norm = BandNorm(cfg.n_mels)                              # a fixed affine in eval
        self.augment = SpecAugment(cfg.mask_bands, cfg.mask_frames)
        self.stem = conv_bn_relu(1, cfg.channels, (10, 4), stride=(2, 2), padding=(5, 1))
        self.blocks = nn.Sequential(*(separable_block(cfg.channels) for _ in range(cfg.blocks)))
        self.drop = nn.Dropout(cfg.dropout)
        self.head = nn.Linear(cfg.channels, cfg.n_classes)

    def features(self, audio: Tensor) -> Tensor:
        """audio (B, S) → normalised (and, training, masked) log-mel (B, S / hop, n_mels)."""
        stride = self.cfg.frontend_stride
        if audio.dim() != 2 or audio.shape[1] == 0 or audio.shape[1] % stride:
            raise ValueError(f"expected audio of shape (batch, samples), samples a positive multiple "
                             f"of {stride}, got {tuple(audio.shape)}")
        return self.normalise(self.logmel(nn.functional.pad(audio, (self.lead, 0))))   # (B, T, F)

    def normalise(self, x: Tensor) -> Tensor:
        """Log-mel features (B, T, F) → normalised and, training, masked."""
        return self.augment((x - PIXEL_MEAN) / PIXEL_STD if self.cfg.reads_pixels else self.norm(x))

    def forward(self, audio: Tensor, state: Tensor | None = None) -> tuple[Tensor, None]:
        if state is not None:
            raise ValueError("a DS-CNN classifies whole clips: it takes no state")
        return self._classify(self.features(audio))

    def forward_features(self, pixels: Tensor, state: Tensor | None = None) -> tuple[Tensor, None]:
        """The network after its fixed front-end ("logmel" only): pixels (B, T, 40) in [0, 255]."""
        if not self.cfg.reads_pixels or state is not None:
            raise ValueError("forward_features needs the logmel front-end and takes no state")
        return self._classify(self.normalise(pixels))

    def _classify(self, x: Tensor) -> tuple[Tensor, None]:
        h = self.stem(x.unsqueeze(1))                                     # (B, C, T/2 + 1, F/2)
        h = self.blocks(h).mean((2, 3))                                   # (B, C)
        return self.head(self.drop(h)), None
