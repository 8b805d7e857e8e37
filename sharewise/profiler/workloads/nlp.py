"""Language workloads: BERT, GPT-2, the encoder-decoder Transformer and an LSTM language model."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from sharewise.profiler.workloads._common import InferWorkload, TrainWorkload


@dataclass(frozen=True)
class TextConfig:
    """A transformer (or LSTM) stack: ``layers`` blocks of width ``dim`` over ``seq``-token sequences."""

    vocab: int
    seq: int
    dim: int
    layers: int
    heads: int = 1
    ffn: int = 0
    dropout: float = 0.1
    batch_size: int | None = None


class SelfAttention(nn.Module):
    """Multi-head attention through ``scaled_dot_product_attention`` (fused kernels where available).

    Hand-written rather than ``nn.MultiheadAttention``/``nn.Transformer`` because their fast-path checks
    call ``.item()``, which a meta-device FLOP count cannot do.
    """

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        b, t, d = x.shape
        src = memory if memory is not None else x
        q = self.q(x).view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k, v = self.kv(src).view(b, src.shape[1], 2, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """A transformer layer: self-attention, optional cross-attention, feed-forward.

    ``pre_norm`` picks GPT-2's pre-LayerNorm; BERT and the 2017 Transformer normalize after the residual.
    """

    def __init__(self, cfg: TextConfig, pre_norm: bool, cross: bool = False, act: str = "gelu") -> None:
        super().__init__()
        self.pre_norm = pre_norm
        self.attn = SelfAttention(cfg.dim, cfg.heads, cfg.dropout)
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.cross = SelfAttention(cfg.dim, cfg.heads, cfg.dropout) if cross else None
        self.norm2 = nn.LayerNorm(cfg.dim) if cross else None
        self.ffn = nn.Sequential(
            nn.Linear(cfg.dim, cfg.ffn),
            nn.GELU() if act == "gelu" else nn.ReLU(),
            nn.Linear(cfg.ffn, cfg.dim),
        )
        self.norm3 = nn.LayerNorm(cfg.dim)
        self.drop = nn.Dropout(cfg.dropout)

    def _sub(self, x: torch.Tensor, norm: nn.Module, fn) -> torch.Tensor:
        if self.pre_norm:
            return x + self.drop(fn(norm(x)))
        return norm(x + self.drop(fn(x)))

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        x = self._sub(x, self.norm1, lambda h: self.attn(h, causal=causal))
        if self.cross is not None:
            x = self._sub(x, self.norm2, lambda h: self.cross(h, memory))
        return self._sub(x, self.norm3, self.ffn)


def _init_normal(model: nn.Module, std: float = 0.02) -> nn.Module:
    """BERT/GPT-2 initialization; PyTorch's N(0, 1) embeddings make tied-output logits explode."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
    return model


def _tokens(cfg: TextConfig, batch: int, device: torch.device, extra: int = 0) -> torch.Tensor:
    return torch.randint(0, cfg.vocab, (batch, cfg.seq + extra), device=device)


# --- BERT (Devlin et al. 2019) -------------------------------------------------------------------

MASK_FRACTION = 0.15  # share of tokens the masked-LM loss predicts, as in BERT pre-training


class BertEncoder(nn.Module):
    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.seq, cfg.dim)
        self.segment = nn.Embedding(2, cfg.dim)
        self.norm = nn.LayerNorm(cfg.dim)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, pre_norm=False) for _ in range(cfg.layers))

    def forward(self, tokens: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.drop(self.norm(self.tok(tokens) + self.pos(pos) + self.segment(types)))
        for block in self.blocks:
            x = block(x)
        return x


class BertForMaskedLM(nn.Module):
    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        self.encoder = BertEncoder(cfg)
        self.transform = nn.Sequential(nn.Linear(cfg.dim, cfg.dim), nn.GELU(), nn.LayerNorm(cfg.dim))
        self.decoder_bias = nn.Parameter(torch.zeros(cfg.vocab))

    def forward(self, tokens: torch.Tensor, types: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        h = self.encoder(tokens, types)
        # Gather the masked positions by index (not a boolean mask) so shapes stay static on any device.
        h = h.gather(1, masked.unsqueeze(-1).expand(-1, -1, h.shape[-1]))
        return F.linear(self.transform(h), self.encoder.tok.weight, self.decoder_bias)


class BertClassifier(nn.Module):
    def __init__(self, cfg: TextConfig, classes: int = 2) -> None:
        super().__init__()
        self.encoder = BertEncoder(cfg)
        self.pooler = nn.Linear(cfg.dim, cfg.dim)
        self.head = nn.Linear(cfg.dim, classes)

    def forward(self, tokens: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        h = self.encoder(tokens, types)
        return self.head(torch.tanh(self.pooler(h[:, 0])))


def _bert_batch(cfg: TextConfig, batch: int, device: torch.device) -> dict[str, torch.Tensor]:
    n_mask = max(1, round(MASK_FRACTION * cfg.seq))
    return {
        "tokens": _tokens(cfg, batch, device),
        # Sentence A then sentence B, split in the middle, as in next-sentence pairs.
        "types": (torch.arange(cfg.seq, device=device) >= cfg.seq // 2).long().expand(batch, -1),
        "masked": torch.rand(batch, cfg.seq, device=device).argsort(dim=1)[:, :n_mask],
        "targets": torch.randint(0, cfg.vocab, (batch, n_mask), device=device),
    }


_BERT_CONFIGS = {
    "tiny": TextConfig(vocab=512, seq=16, dim=32, layers=1, heads=2, ffn=64, batch_size=2),
    "small": TextConfig(vocab=8192, seq=32, dim=128, layers=2, heads=2, ffn=512),
    "full": TextConfig(vocab=30522, seq=128, dim=768, layers=12, heads=12, ffn=3072),
}


class Bert(TrainWorkload):
    name = "bert"
    family = "bert"
    default_batch_size = 32
    description = "BERT-base encoder, masked-LM pre-training step on 128-token sequences, AdamW"
    configs = _BERT_CONFIGS

    def make_model(self) -> nn.Module:
        return _init_normal(BertForMaskedLM(self.cfg))

    def make_batch(self) -> dict[str, torch.Tensor]:
        return _bert_batch(self.cfg, self.batch_size, self.device)

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

    def loss(self) -> torch.Tensor:
        b = self.batch
        logits = self.model(b["tokens"], b["types"], b["masked"])
        return F.cross_entropy(logits.flatten(0, 1), b["targets"].flatten())


class BertInfer(InferWorkload):
    name = "bert_infer"
    family = "bert"
    default_batch_size = 32
    description = "BERT-base sequence-classification inference (eval mode, no autograd), 128 tokens"
    configs = {**_BERT_CONFIGS, "small": TextConfig(vocab=8192, seq=128, dim=128, layers=2, heads=2, ffn=512)}

    def make_model(self) -> nn.Module:
        return _init_normal(BertClassifier(self.cfg))

    def make_batch(self) -> dict[str, torch.Tensor]:
        return _bert_batch(self.cfg, self.batch_size, self.device)

    def forward(self) -> torch.Tensor:
        return self.model(self.batch["tokens"], self.batch["types"])


# --- GPT-2 (Radford et al. 2019) -----------------------------------------------------------------


class GPT(nn.Module):
    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.seq, cfg.dim)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, pre_norm=True) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.drop(self.tok(tokens) + self.pos(pos))
        for block in self.blocks:
            x = block(x, causal=True)
        # The output projection is tied to the token embedding, as in GPT-2.
        return F.linear(self.norm(x), self.tok.weight)


class GPT2(TrainWorkload):
    name = "gpt2"
    family = "gpt"
    default_batch_size = 8
    description = "GPT-2 small (124M) decoder-only causal LM step on 1024-token context, AdamW"
    configs = {
        "tiny": TextConfig(vocab=512, seq=16, dim=32, layers=1, heads=2, ffn=128, batch_size=2),
        "small": TextConfig(vocab=4096, seq=64, dim=128, layers=2, heads=4, ffn=512),
        "full": TextConfig(vocab=50257, seq=1024, dim=768, layers=12, heads=12, ffn=3072),
    }

    def make_model(self) -> nn.Module:
        return _init_normal(GPT(self.cfg))

    def make_batch(self) -> dict[str, torch.Tensor]:
        # One extra token so inputs and next-token targets are both ``seq`` long.
        return {"tokens": _tokens(self.cfg, self.batch_size, self.device, extra=1)}

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)

    def loss(self) -> torch.Tensor:
        tokens = self.batch["tokens"]
        logits = self.model(tokens[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())

    def clip_gradients(self) -> None:
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)


# --- Transformer for translation (Vaswani et al. 2017, base) -------------------------------------


def _sinusoid(length: int, dim: int) -> torch.Tensor:
    pos = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table


class Seq2SeqTransformer(nn.Module):
    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        self.scale = math.sqrt(cfg.dim)
        # One embedding shared by source, target and output projection (joint BPE vocabulary).
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.register_buffer("pos", _sinusoid(cfg.seq, cfg.dim), persistent=False)
        self.drop = nn.Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(Block(cfg, pre_norm=False, act="relu") for _ in range(cfg.layers))
        self.decoder = nn.ModuleList(
            Block(cfg, pre_norm=False, cross=True, act="relu") for _ in range(cfg.layers)
        )
        # fairseq's scheme: embeddings at std dim**-0.5 so the sqrt(dim) input scale gives unit variance.
        nn.init.normal_(self.embed.weight, 0.0, cfg.dim**-0.5)

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.drop(self.embed(tokens) * self.scale + self.pos[: tokens.shape[1]])

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        memory = self._embed(src)
        for block in self.encoder:
            memory = block(memory)
        x = self._embed(tgt)
        for block in self.decoder:
            x = block(x, memory, causal=True)
        return F.linear(x, self.embed.weight)


class Transformer(TrainWorkload):
    name = "transformer"
    family = "transformer"
    default_batch_size = 64
    description = "Transformer-base encoder-decoder translation step (Multi30k-like, label smoothing), Adam"
    configs = {
        "tiny": TextConfig(vocab=512, seq=12, dim=32, layers=1, heads=2, ffn=64, batch_size=2),
        "small": TextConfig(vocab=2048, seq=16, dim=64, layers=2, heads=2, ffn=256),
        "full": TextConfig(vocab=10000, seq=32, dim=512, layers=6, heads=8, ffn=2048),
    }

    def make_model(self) -> nn.Module:
        return Seq2SeqTransformer(self.cfg)

    def make_batch(self) -> dict[str, torch.Tensor]:
        b, n, v = self.batch_size, self.cfg.seq, self.cfg.vocab
        return {
            "src": torch.randint(0, v, (b, n), device=self.device),
            "tgt": torch.randint(0, v, (b, n + 1), device=self.device),
        }

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

    def loss(self) -> torch.Tensor:
        tgt = self.batch["tgt"]
        logits = self.model(self.batch["src"], tgt[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), label_smoothing=0.1)


# --- LSTM language model (Zaremba et al. 2014, medium; PyTorch word_language_model) --------------


class LSTMLanguageModel(nn.Module):
    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.drop = nn.Dropout(cfg.dropout)
        self.lstm = nn.LSTM(cfg.dim, cfg.dim, cfg.layers, dropout=cfg.dropout, batch_first=True)
        self.decoder = nn.Linear(cfg.dim, cfg.vocab)
        self.decoder.weight = self.embed.weight  # tied input/output embeddings (Press & Wolf 2017)
        # The reference's U(-0.1, 0.1): N(0, 1) tied weights start the loss well above log(vocab).
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.drop(self.embed(tokens)))
        return self.decoder(self.drop(out))


class LSTMLM(TrainWorkload):
    name = "lstm_lm"
    family = "lstm"
    default_batch_size = 20
    description = "2-layer LSTM word language model (650 units, WikiText-2 vocab, BPTT 35), SGD with clipping"
    configs = {
        "tiny": TextConfig(vocab=512, seq=8, dim=32, layers=2, dropout=0.5, batch_size=2),
        "small": TextConfig(vocab=4096, seq=35, dim=128, layers=2, dropout=0.5),
        "full": TextConfig(vocab=33278, seq=35, dim=650, layers=2, dropout=0.5),
    }

    def make_model(self) -> nn.Module:
        return LSTMLanguageModel(self.cfg)

    def make_batch(self) -> dict[str, torch.Tensor]:
        return {"tokens": _tokens(self.cfg, self.batch_size, self.device, extra=1)}

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=20.0)

    def loss(self) -> torch.Tensor:
        tokens = self.batch["tokens"]
        logits = self.model(tokens[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())

    def clip_gradients(self) -> None:
        nn.utils.clip_grad_norm_(self.model.parameters(), 0.25)
