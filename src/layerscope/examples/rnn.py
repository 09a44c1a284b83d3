"""A bidirectional LSTM sequence tagger: RNN gate matmuls and tuple outputs."""

from __future__ import annotations

from torch import Tensor, nn

from layerscope.examples._seed import seeded

SEED = 1003


class LSTMTagger(nn.Module):
    """Embedding -> 1-layer bidirectional LSTM -> per-token linear tag head."""

    def __init__(
        self, vocab_size: int = 50, embed_dim: int = 16, hidden: int = 16, num_tags: int = 5
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden, num_layers=1, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, num_tags)

    def forward(self, tokens: Tensor) -> Tensor:
        seq, _ = self.lstm(self.embed(tokens))
        out: Tensor = self.head(seq)
        return out


def lstm_tagger() -> LSTMTagger:
    """A fresh LSTMTagger with fixed weights; input (N, T) token ids, output (N, T, 5)."""
    with seeded(SEED):
        return LSTMTagger()
