"""Inference: a trained model answering new pairs, without any of training's objects.

`load(path, backend=..., quantize=...)` gives a `Predictor` (matching.inference.predictor) from any saved form of a
model (matching.inference.loader); it runs on PyTorch eager (torch_backend) or ONNX Runtime, float32 or int8
(onnx_backend), with intra-op threads chosen per call (threads). `Matcher`, `predict`, `evaluate input=`,
`visualize` and the server answer through it. Nothing here imports Lightning; an exported ONNX model is loaded and
run without torch.
"""

from matching.errors import RunError
from matching.inference.loader import BACKENDS, REPO_ID, load, locate, saved_config
from matching.inference.predictor import Predictor

__all__ = ["BACKENDS", "REPO_ID", "RunError", "Predictor", "load", "locate", "saved_config"]
