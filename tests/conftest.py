"""Shared test helpers: compose the real Hydra configs pointed at the fixtures (no network, tiny model)."""

import contextlib
import inspect
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from matching.saved.earlier_versions import current_overrides

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
FIXTURE_VECTORS = FIXTURES / "vectors" / "glove.fixture.20d.txt"


#: The tests pin fp32: `train`'s default, dtype=auto, computes in bf16 on a CPU with bf16 arithmetic and in fp32
#: elsewhere, and what a test checks must not depend on the machine it runs on. bf16 and auto have their own tests
#: (tests/test_precision.py); a test that passes its own dtype= keeps it.
PINNED_DTYPE = "dtype=fp32"


def load_by_path(name: str, path: Path):
    """A script that is no module of the package (a benchmark, the site's hook), loaded by its path once and kept in
    sys.modules under `name` (dataclasses look their module up while a class is built)."""
    import importlib.util

    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def reference_hook():
    """docs/hooks/reference.py, the site's hook that generates the command reference (MkDocs loads it by path, and
    so do the tests)."""
    return load_by_path("docs_reference", ROOT / "docs" / "hooks" / "reference.py")


def cli_overrides(tmp_path: Path) -> list[str]:
    """Command-line overrides that point a `python -m matching.train` subprocess at the fixtures, tiny model, fp32."""
    return [
        f"paths.data_dir={FIXTURES}", f"paths.cache_dir={tmp_path / 'cache'}", f"embeddings.path={FIXTURE_VECTORS}",
        "embeddings.dim=20", "model.hidden=16", "data.batch_size=4", "trainer.enable_progress_bar=false", PINNED_DTYPE,
    ]  # fmt: skip


#: Environment for subprocesses: no downloads, one thread each (two may run at once on two cores).
SUBPROCESS_ENV = os.environ | {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def big_snli(path: Path, copies: int) -> Path:
    """The SNLI training fixture repeated, so that an epoch lasts long enough to be interrupted."""
    lines = (FIXTURES / "snli" / "snli_1.0_train.jsonl").read_text().splitlines()
    path.write_text("\n".join(lines * copies) + "\n")
    return path


#: The tasks whose default embeddings are the frozen MiniLM encoder (conf/task/pairs.yaml), not GloVe.
GENERIC_TASKS = {f"task={name}" for name in ("pairs", "pairs_rank", "pairs_positives", "mrpc", "qqp", "paws")}


def compose_train(tmp_path: Path, *overrides: str, small: bool = True) -> DictConfig:
    """The `train` config as the CLI would build it, with data, cache and outputs redirected for tests."""
    base = [
        f"paths.data_dir={FIXTURES}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        f"embeddings.path={FIXTURE_VECTORS}",
        "embeddings.dim=20",
        "trainer.enable_progress_bar=false",
    ]
    if not any(o.startswith("dtype=") for o in overrides):
        base.append(PINNED_DTYPE)
    chosen = next((o.split("=", 1)[1] for o in overrides if o.startswith("embeddings=")), None)
    if chosen is None and any(o in GENERIC_TASKS for o in overrides):  # their default is the MiniLM encoder: the
        base.append("embeddings=glove")  # fixture vectors stand in, as for every other task
    if chosen not in (None, "glove", "minilm", "minilm_sample"):  # a source without a vectors file
        base = [o for o in base if not o.startswith("embeddings.path=")]
    if "embeddings=minilm_contextual" in overrides:  # no vectors file; the encoder gives its own width
        base = [o for o in base if not o.startswith(("embeddings.path=", "embeddings.dim="))]
    if small:
        base += ["model.hidden=16", "data.batch_size=4", "data.eval_batch_size=8"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=current_overrides([*base, *overrides]), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # as under `python -m matching.train`: the run records its choices
    with open_dict(cfg):
        del cfg["hydra"]
        cfg.paths.output_dir = str(tmp_path / "run")
    return cfg


def evaluate(checkpoint, split="dev", overrides=(), out=None) -> dict[str, float]:
    """The evaluate command as `matching-evaluate ckpt=... split=... [out=...] [overrides]` composes it."""
    from matching.cli import compose_config
    from matching.evaluate import evaluate as evaluate_command

    extra = [f"out={out}"] if out else []
    return evaluate_command(compose_config("evaluate", [f"ckpt={checkpoint}", f"split={split}", *extra, *overrides]))


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(autouse=True)
def offline(monkeypatch, onnx_cache):
    """Nothing may download at test time: the hub fallback must fail fast, not try the network. Nor is anything
    written into the home folder: backend=onnx exports into a cache of the session's (MATCHING_ONNX_CACHE)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("MATCHING_ONNX_CACHE", str(onnx_cache))


@pytest.fixture(autouse=True)
def no_hydra_run_left_over():
    """A command run in-process (its Hydra main) leaves its Hydra run config behind; a later test in the same
    process would read that run's overrides as its own (a sweep's `newer_keys`). Each test starts without one,
    whichever tests ran before it in its process (pytest-xdist spreads them over processes)."""
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().cfg = None
    yield
    HydraConfig.instance().cfg = None


@pytest.fixture
def make_cfg(tmp_path):
    return lambda *overrides, **kw: compose_train(tmp_path, *overrides, **kw)


@pytest.fixture(scope="session")
def snli_run(tmp_path_factory):
    """A trained 2-epoch SNLI fixture run: (run directory, metrics returned by train)."""
    from matching.training.run import train

    cfg = compose_train(tmp_path_factory.mktemp("snli"), "trainer.max_epochs=2")
    return Path(cfg.paths.output_dir), train(cfg)


@pytest.fixture(scope="session")
def wikiqa_run(tmp_path_factory):
    """A trained 2-epoch WikiQA fixture run with the CoDA aligner."""
    from matching.training.run import train

    cfg = compose_train(tmp_path_factory.mktemp("wikiqa"), "task=wikiqa", "trainer.max_epochs=2", "aligner=coda")
    return Path(cfg.paths.output_dir), train(cfg)


@contextlib.contextmanager
def serve_process(ckpt: Path, *overrides: str):
    """`matching-serve` on a checkpoint, started as a user starts it (its own process, a free local port, one thread,
    one worker): (base URL, its pid), stopped on leaving."""
    import httpx

    from matching.serving.server import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "matching.serve", f"ckpt={ckpt}", f"port={port}", "threads=1", "workers=1", *overrides]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-2000:]
        try:
            if httpx.get(f"{url}/health", timeout=2).text == "ok":
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    try:
        yield url, proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def save_tiny_encoder(folder: Path, seed: int = 0, positions: int = 32) -> Path:
    """A tiny BERT (2 layers, width 16) with a WordPiece vocabulary of letters, digits and punctuation (any
    lower-case ASCII word has pieces), saved as save_pretrained does: what the contextual embedder loads offline."""
    import string

    import torch
    import transformers
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *string.ascii_lowercase, *string.digits, *string.punctuation]
    vocab += [f"##{c}" for c in string.ascii_lowercase + string.digits] + ["the", "a", "cat", "dog", "##s", "##ing"]
    backend = Tokenizer(models.WordPiece({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]",
    )  # fmt: skip
    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=positions)  # fmt: skip
    transformers.BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory) -> Path:
    return save_tiny_encoder(tmp_path_factory.mktemp("tiny-bert"))


class FakeHub:
    """A local, file-based stand-in for the Hugging Face hub: `HfApi().create_repo/upload_folder` copy a folder into
    `root/<owner>/<name>`, and `snapshot_download` copies a repository into a cache folder and returns it, as the
    real one does. `encoders` maps hub ids to local folders (a contextual run's encoder)."""

    def __init__(self, root: Path):
        self.root, self.cache, self.encoders, self.uploads, self.downloads = root / "hub", root / "cache", {}, [], []

    def HfApi(self, *args, **kwargs):  # noqa: N802 (the name it stands in for)
        return self

    def create_repo(self, repo_id, *, exist_ok=False, private=None, **kwargs):
        (self.root / repo_id).mkdir(parents=True, exist_ok=exist_ok)

    def upload_folder(self, *, repo_id, folder_path, commit_message=None, **kwargs):
        shutil.copytree(folder_path, self.root / repo_id, dirs_exist_ok=True)
        self.uploads.append(repo_id)
        return SimpleNamespace(commit_url=f"https://huggingface.co/{repo_id}/commit/{len(self.uploads)}")

    def snapshot_download(self, repo_id, *, revision=None, **kwargs):
        self.downloads.append((repo_id, revision))
        if repo_id in self.encoders:
            return str(self.encoders[repo_id])
        if not (self.root / repo_id).is_dir():
            raise FileNotFoundError(f"404 Client Error: Repository Not Found for url: https://huggingface.co/{repo_id}")
        target = self.cache / repo_id.replace("/", "--") / (revision or "main")
        shutil.copytree(self.root / repo_id, target, dirs_exist_ok=True)
        return str(target)


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    import huggingface_hub

    hub = FakeHub(tmp_path)
    for fake, real in ((FakeHub.create_repo, huggingface_hub.HfApi.create_repo),
                       (FakeHub.upload_folder, huggingface_hub.HfApi.upload_folder),
                       (FakeHub.snapshot_download, huggingface_hub.snapshot_download)):  # fmt: skip
        ours, theirs = inspect.signature(fake).parameters, inspect.signature(real).parameters
        named = [n for n, p in ours.items() if n != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD]
        assert all(n in theirs and ours[n].kind == theirs[n].kind for n in named), fake  # called as the real one
    monkeypatch.setattr(huggingface_hub, "HfApi", hub.HfApi)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub.snapshot_download)
    return hub


@pytest.fixture
def no_unpickling(monkeypatch):
    """Every way to unpickle fails the test: pickle's load, loads and Unpickler, and torch.load (whatever its
    weights_only, which is itself an unpickler)."""

    def refuse(*args, **kwargs):
        raise AssertionError("something was unpickled")

    import torch

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(torch, "load", refuse)
