"""A contextual run in a shared folder (`matching-export format=hub`, matching.saved.shared_folder): the folder holds
the model's weights but not the encoder's, so it names the encoder by Hugging Face hub id and revision (checked by
its weights' sha256 when the folder is loaded), never by a path of the training machine."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from omegaconf import DictConfig

from matching.model.embeddings import SourceSharing
from matching.model.encoders import EncoderError
from matching.model.pretrained_encoder import MINILM, PretrainedEncoder


class ContextualSharing(SourceSharing):
    """How a run over `encoder` is shared (see the module docstring)."""

    def __init__(self, encoder: PretrainedEncoder):
        self.encoder = encoder

    def reference(self, node: Mapping, encoder: str | None, revision: str | None) -> dict:
        """The hub id and revision that a shared folder names the encoder by: `encoder` (and `revision`) when given,
        else the run's own `embeddings.model` when that is a hub id (not a local folder)."""
        model = str(node["model"])
        if encoder is None:
            if Path(model).expanduser().exists() or model.startswith(("/", ".", "~")):
                raise EncoderError(
                    f"the run's encoder is the local folder {model}; a shared folder names its encoder by hub id, so "
                    "that whoever loads it can fetch it: give encoder=<owner/name> (and encoder_revision=<commit or "
                    "tag>) of the same weights on the Hugging Face hub (they are checked by sha256 when the folder "
                    "is loaded)"
                )
            encoder, revision = (MINILM[1] if model == MINILM[0] else model), revision or node.get("revision")
        return {"hub_id": encoder, "revision": revision}

    def node(self, node: DictConfig, reference: dict | None) -> None:
        """The embeddings node of a shared folder's config names the encoder by hub id, on whatever device."""
        node.model, node.revision, node.device = reference["hub_id"], reference["revision"], "auto"

    def record(self, record: dict | None, reference: dict | None) -> dict | None:
        """The checkpoint's record of the encoder, naming it by hub id and revision."""
        return None if record is None else {**record, "encoder": reference["hub_id"], "revision": reference["revision"]}

    def card_line(self, reference: dict | None) -> str:
        """The encoder in a sentence, for the folder's model card."""
        hub_id, revision = reference["hub_id"], reference["revision"]
        return (f"contextual encoder [{hub_id}](https://huggingface.co/{hub_id}) at revision "
                f"`{revision or 'main (not pinned)'}` (weights sha256 `{self.encoder.weights[:16]}…`, checked when "
                "loaded), last hidden states averaged over each word's pieces")  # fmt: skip
