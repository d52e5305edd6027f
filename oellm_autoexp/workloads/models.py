"""Models written here (no torchvision): a tiny LM for `train`, CNNs and a transformer
for `throughput`, and synthetic data that is a deterministic function of (seed, step, rank).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional


class TinyLM(nn.Module):
    """Embedding -> MLP -> vocabulary logits: predicts the next token of a synthetic sequence."""

    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        return self.head(h + self.mlp(h))


def synthetic_tokens(
    seed: int, step: int, rank: int, batch: int, seq_len: int, vocab: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) where each token follows its predecessor by a fixed affine rule.

    The rule (t -> 7t + 3 mod vocab) is learnable, so the loss falls; the start tokens come
    from a generator seeded by (seed, step, rank), so a resumed run sees the same data.
    """
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    start = torch.randint(0, vocab, (batch, 1), generator=gen)
    seq = start
    cols = [start]
    for _ in range(seq_len):
        seq = (seq * 7 + 3) % vocab
        cols.append(seq)
    full = torch.cat(cols, dim=1)
    return full[:, :-1], full[:, 1:]


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = _shortcut(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = functional.relu(self.bn1(self.conv1(x)))
        return functional.relu(self.bn2(self.conv2(out)) + self.down(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = _shortcut(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = functional.relu(self.bn1(self.conv1(x)))
        out = functional.relu(self.bn2(self.conv2(out)))
        return functional.relu(self.bn3(self.conv3(out)) + self.down(x))


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module:
    if stride == 1 and cin == cout:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class ResNet(nn.Module):
    """The ImageNet ResNet layout (He et al. 2015): stem, four stages, pooled classifier."""

    def __init__(self, block: type[BasicBlock | Bottleneck], layers: list[int], classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        stages, cin = [], 64
        for i, blocks in enumerate(layers):
            width = 64 * 2**i
            for j in range(blocks):
                stages.append(block(cin, width, 2 if (j == 0 and i > 0) else 1))
                cin = width * block.expansion
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(functional.adaptive_avg_pool2d(x, 1), 1))


def resnet18(classes: int = 1000) -> ResNet:
    return ResNet(BasicBlock, [2, 2, 2, 2], classes)


def resnet50(classes: int = 1000) -> ResNet:
    return ResNet(Bottleneck, [3, 4, 6, 3], classes)


class Transformer(nn.Module):
    """A GPT-shaped decoder (pre-norm layers with a causal mask) over a token vocabulary."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, hidden))
        layer = nn.TransformerEncoderLayer(
            hidden, heads, 4 * hidden, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.register_buffer(
            "mask", nn.Transformer.generate_square_subsequent_mask(seq_len), persistent=False
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        h = self.embed(tokens) + self.pos[:, :n]
        h = self.blocks(h, mask=self.mask[:n, :n], is_causal=True)
        return self.head(self.norm(h))


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
