"""The word states of new text (predict, rank, visualize, serve, evaluate input=), computed by a contextual run's
encoder outside the model, each distinct text of a call once.

A text's states depend on its words and the encoder alone, never on the text it is paired with, so `TextStates`
encodes each distinct text of a call once (`remember`: a query paired with each of its candidates runs once) and
reads the states of texts it already holds from an index of known texts (a matching.inference.StateIndex, attached
by `use_index`). The encoder is the frozen pretrained one, or a trained run's fine-tuned one (`use_trained`), on
PyTorch or on another runtime (`encode_new_text_with`: matching.inference.onnx_encoder), the same word pooling after
it. States are kept in the precision the model reads them in: float16 for the frozen encoder, as training's cache
holds them; float32 for a fine-tuned one, whose model trained on float32 states.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
from torch import Tensor

from matching.model.encoders import WordEncoder, pool_words
from matching.model.pretrained_encoder import PretrainedEncoder


class TextStates:
    """New text's word states by `encoder` (see the module docstring), `batch_size` texts at a time, on `device`.

    `encoded` counts the texts run through the encoder (a figure for benchmarks and tests); `index` is the attached
    index of known texts' states, or None; `runtime`, when set, runs the encoder's Transformer in place of PyTorch:
    (ids, mask) -> piece states."""

    def __init__(self, encoder: PretrainedEncoder, batch_size: int, device: str):
        self.encoder, self.batch_size, self.device = encoder, batch_size, device
        self._frozen: WordEncoder | None = None  # the pretrained encoder, loaded on first use
        self._trained: WordEncoder | None = None  # a trained run's fine-tuned encoder (`use_trained`)
        self.trained_sha256: str | None = None  # the sha256 of its trained layers
        self.index = None  # a matching.inference.StateIndex of known texts' states, or None
        self._remembered: dict[tuple[str, ...], np.ndarray] = {}  # the current call's states (`remember`)
        self.encoded = 0
        self.runtime: Callable[[Tensor, Tensor], Tensor] | None = None

    # -- which encoder ---------------------------------------------------------------------------------------------
    @property
    def module(self) -> WordEncoder:
        """The encoder of new text: a trained run's fine-tuned one (`use_trained`), else the frozen pretrained
        encoder, which also builds the training cache of a frozen run (loaded on first use)."""
        if self._trained is not None:
            return self._trained
        if self._frozen is None:
            self._frozen = self.encoder.word_encoder(0).to(self.device)
        return self._frozen

    @property
    def fine_tuned(self) -> bool:
        """Whether new text is encoded by a trained run's fine-tuned encoder."""
        return self._trained is not None

    def use_trained(self, encoder: WordEncoder) -> None:
        """A trained run's fine-tuned encoder (the model's own module, in the model's mode and place) encodes new
        text from now on, outside the model, so that a call encodes each distinct text once and an index can hold
        a fine-tuned run's states (keyed by the sha256 of its trained layers)."""
        # the frozen weights are the encoder's files, already in the key (weights_sha256): only the trained layers
        digest = hashlib.sha256()
        for name, tensor in sorted(encoder.layers[encoder.frozen_layers :].state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
        self._trained, self.trained_sha256, self._remembered = encoder, digest.hexdigest(), {}

    def encode_new_text_with(self, runtime: Callable[[Tensor, Tensor], Tensor] | None) -> None:
        """Encode new text with `runtime` ((ids, mask) -> piece states: matching.inference.onnx_encoder), the same
        word pooling after it; None: the PyTorch module (`module`)."""
        self.runtime = runtime

    def on_device(self, device: str) -> None:
        """Run the frozen encoder on `device` from now on (loaded there when next needed)."""
        if device != self.device:
            self.device, self._frozen = device, None

    # -- what the states are -----------------------------------------------------------------------------------------
    @property
    def weights_sha256(self) -> str:
        """The sha256 of the weights that compute new text's states: the encoder's files', or a trained run's
        fine-tuned layers' (its index, its encoder on ONNX Runtime are keyed by it)."""
        return self.trained_sha256 or self.encoder.weights

    @property
    def state_dtype(self) -> type:
        """The float type new text's states are kept in: float16 for the frozen encoder (as its training cache
        holds them), float32 for a fine-tuned one (the model trained on its float32 states)."""
        return np.float16 if self._trained is None else np.float32

    def state_key(self) -> dict:
        """What a text's word states depend on besides its words, wherever the encoder lies (an index's key): a
        fine-tuned run's states depend on its own weights."""
        key = {k: v for k, v in self.encoder.identity().items() if k != "encoder"}
        if self.trained_sha256 is not None:
            key |= {"fine_tuned_sha256": self.trained_sha256, "states": "float32"}
        return key

    # -- known texts -------------------------------------------------------------------------------------------------
    def use_index(self, index) -> None:
        """Read known texts' states from `index` (a matching.inference.StateIndex checked against this encoder by
        its caller), or from none (None)."""
        self.index = index

    def known_states(self, words: Sequence[str]) -> np.ndarray | None:
        """A text's states without running the encoder: from the current call's (`remember`), else from the attached
        index; None when neither holds it."""
        key = tuple(words)
        found = self._remembered.get(key)
        if found is None and self.index is not None:
            found = self.index.get(key)
        return found

    @contextmanager
    def remember(self, texts: Sequence[Sequence[str]]) -> Iterator[None]:
        """Within the block, the states of `texts` (each distinct one encoded once, now) are known: a call's batches
        then never encode a text twice (a query paired with each of its candidates)."""
        missing = [t for t in dict.fromkeys(map(tuple, texts)) if self.known_states(t) is None]
        states = self.encode(missing)
        before = self._remembered
        self._remembered = before | {t: s.astype(self.state_dtype) for t, s in zip(missing, states, strict=True)}
        try:
            yield
        finally:
            self._remembered = before

    # -- encoding ----------------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def encode(self, texts: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Each text's (len(text), dim) word states, in batches of `batch_size`: each distinct text encoded once,
        none that the call or the index already holds (`known_states`; in `state_dtype` then, as the model reads
        every state)."""
        out: list[np.ndarray] = [np.zeros((0, self.encoder.dim), np.float32)] * len(texts)
        missing: dict[tuple[str, ...], list[int]] = {}
        for i, words in enumerate(texts):
            found = self.known_states(words)
            if found is None:
                missing.setdefault(tuple(words), []).append(i)
            else:
                out[i] = found
        distinct = sorted(missing, key=len)
        self.encoded += len(distinct)
        for start in range(0, len(distinct), self.batch_size):
            chunk = distinct[start : start + self.batch_size]
            for words, states in zip(chunk, self.encode_batch(chunk), strict=True):
                for i in missing[words]:
                    out[i] = states
        return out

    @torch.inference_mode()
    def encode_batch(self, texts: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Each of `texts`' (len(text), dim) word states, float32, run together through the encoder."""
        inputs = {k: v.to(self.device) for k, v in self.encoder.pieces(texts).items()}
        words = max(len(t) for t in texts)
        if self.runtime is None:
            pooled = self.module(**inputs, texts=len(texts), words=words)
        else:  # another runtime's encoder (matching.inference.onnx_encoder), the same word pooling
            pooled = pool_words(self.runtime(inputs["ids"], inputs["mask"]), inputs["word"], inputs["row"],
                                len(texts), words)  # fmt: skip
        pooled = pooled.cpu().numpy()  # (T, W, D)
        return [pooled[i, : len(t)] for i, t in enumerate(texts)]

    def batch_states(self, texts: Sequence[Sequence[str]]) -> Tensor:
        """(len(texts), longest, dim) states of new texts (`state_dtype`), zero-padded (for a model batch)."""
        states = self.encode(texts)
        out = np.zeros((len(texts), max(len(t) for t in texts), self.encoder.dim), self.state_dtype)
        for i, s in enumerate(states):
            out[i, : len(s)] = s  # an index's states are read-only (memory-mapped): copied here
        return torch.from_numpy(out)
