"""The inference object (matching.inference): one loader for every saved form, PyTorch and ONNX Runtime backends
(float32 and int8) giving the same answers within their tolerance, an exported model run without torch, threads
chosen per call, and every command's ckpt= taking what Matcher.load takes."""

import json
import subprocess
import sys

import numpy as np
import pytest

from matching import Matcher
from matching.errors import RunError
from matching.inference import load, locate
from matching.inference.threads import TOKENS_PER_THREAD, cores, thread_count

pytest.importorskip("onnxruntime")

NLI = [
    ("A man plays a guitar.", "A person makes music."),
    ("Two dogs run in a field.", "The cats sleep."),
    ("A woman reads a book in the park.", "Someone is reading outside."),
    ("Kids.", "Nobody is there at all."),
]
#: ONNX Runtime float32 against PyTorch float32: the same graph, other kernels (sums in another order).
FP32_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def exported(snli_run, tmp_path_factory):
    """The SNLI fixture run exported to ONNX (matching-export format=onnx) and as a shared folder (format=hub)."""
    from matching.export import main as export_main

    run_dir = snli_run[0]
    out = tmp_path_factory.mktemp("exported")
    assert export_main([f"ckpt={run_dir}", "format=onnx", f"out={out / 'onnx'}"]) == 0
    assert export_main([f"ckpt={run_dir}", "format=hub", f"out={out / 'hub'}"]) == 0
    return run_dir, out / "onnx", out / "hub"


def test_every_saved_form_loads_and_answers_alike(exported, tmp_path, monkeypatch):
    monkeypatch.setenv("MATCHING_ONNX_CACHE", str(tmp_path / "cache"))
    run_dir, onnx_folder, hub_folder = exported
    reference = Matcher.load(run_dir).logits(NLI)
    forms = {"run": run_dir, "checkpoints": run_dir / "checkpoints", "file": run_dir / "checkpoints" / "last.ckpt",
             "hub": hub_folder, "onnx folder": onnx_folder, "onnx file": onnx_folder / "model.onnx"}  # fmt: skip
    assert [locate(p)[0] for p in forms.values()] == ["run", "run", "run", "shared", "onnx", "onnx"]
    for name, path in forms.items():
        matcher = Matcher.load(path)
        assert matcher.backend == ("onnx" if "onnx" in name else "torch"), name
        assert matcher.labels == Matcher.load(run_dir).labels
        if name == "file":  # last.ckpt: other weights than best.ckpt's, the same shape of answer
            assert matcher.logits(NLI).shape == reference.shape
            continue
        np.testing.assert_allclose(matcher.logits(NLI), reference, atol=FP32_TOLERANCE, err_msg=name)


def test_onnx_backend_of_a_run_is_exported_once_and_matches_torch(snli_run, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MATCHING_ONNX_CACHE", str(tmp_path / "cache"))
    torch_answers = Matcher.load(snli_run[0]).logits(NLI)
    onnx = Matcher.load(snli_run[0], backend="onnx")
    assert onnx.backend == "onnx" and onnx.dtype == "fp32"
    np.testing.assert_allclose(onnx.logits(NLI), torch_answers, atol=FP32_TOLERANCE)
    graphs = list((tmp_path / "cache").rglob("model.onnx"))
    assert len(graphs) == 1 and "exported the model to ONNX once" in caplog.text
    caplog.clear()
    again = load(snli_run[0], backend="onnx")  # from the cache: no second export
    assert again.about["graph"] == graphs[0] and "exported" not in caplog.text


def test_int8_is_ort_with_quantized_weights_and_close_to_fp32(snli_run, tmp_path, monkeypatch):
    monkeypatch.setenv("MATCHING_ONNX_CACHE", str(tmp_path / "cache"))
    fp32 = Matcher.load(snli_run[0], backend="onnx")
    for reduce_range in (False, True):
        int8 = Matcher(load(snli_run[0], quantize="int8", reduce_range=reduce_range))
        assert int8.backend == "onnx-int8" and int8.dtype == "int8"
        graph = int8._predictor.backend.model_file
        assert graph.name == ("model.int8-7bit.onnx" if reduce_range else "model.int8.onnx")
        assert graph.stat().st_size < fp32._predictor.backend.model_file.stat().st_size
        # int8 weights change the logits a little (the quality is measured on dev: docs/results/performance.md)
        np.testing.assert_allclose(int8.logits(NLI), fp32.logits(NLI), atol=0.25)


def test_backend_and_quantize_mistakes_are_one_paragraph(snli_run, exported):
    with pytest.raises(RunError, match="backend must be one of auto, torch, onnx"):
        load(snli_run[0], backend="tensorrt")
    with pytest.raises(RunError, match="quantize must be int8 or none"):
        load(snli_run[0], quantize="int4")
    with pytest.raises(RunError, match="quantize=int8 runs on ONNX Runtime: give backend=onnx"):
        load(snli_run[0], backend="torch", quantize="int8")
    with pytest.raises(RunError, match="runs on ONNX Runtime only"):
        load(exported[1], backend="torch")
    with pytest.raises(RunError, match="alignments need the PyTorch model"):
        Matcher.load(exported[1]).align("A dog runs.", "An animal moves.")


NO_TORCH = r"""
import importlib.abc, json, sys

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "lightning", "pytorch_lightning", "hydra", "torchmetrics"):
            raise ImportError(f"{name} is not installed here")
        return None

sys.meta_path.insert(0, Refuse())
from matching.inference import load
from matching.data.pairs import Pair
predictor = load(sys.argv[1])
pairs = [Pair(a, b, "") for a, b in json.loads(sys.argv[2])]
print(json.dumps({"backend": predictor.backend.name, "logits": predictor.logits(pairs).tolist(),
                  "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def test_an_exported_model_answers_without_torch_lightning_or_hydra(exported):
    run_dir, onnx_folder, _ = exported
    done = subprocess.run([sys.executable, "-c", NO_TORCH, str(onnx_folder), json.dumps(NLI)], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)
    assert answer["backend"] == "onnx"
    assert not {"torch", "lightning", "hydra"} & set(answer["modules"])
    np.testing.assert_allclose(answer["logits"], Matcher.load(run_dir).logits(NLI), atol=FP32_TOLERANCE)


def test_nothing_under_the_inference_object_imports_lightning():
    code = (
        "import sys; from matching import Matcher; from matching.inference import load; "
        "import matching.inference.torch_backend; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_commands_take_every_form_of_a_model(exported, tmp_path, capsys):
    from matching.predict import main as predict_main

    run_dir, onnx_folder, hub_folder = exported
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{a}\t{b}\n" for a, b in NLI))
    outputs = {}
    for name, ckpt, extra in (("run", run_dir, []), ("checkpoints", run_dir / "checkpoints", []),
                              ("hub", hub_folder, []), ("onnx", onnx_folder, []),
                              ("run on onnx", run_dir, ["backend=onnx", f"hydra.run.dir={tmp_path}"])):  # fmt: skip
        out = tmp_path / f"{name}.jsonl"
        status = predict_main([f"ckpt={ckpt}", f"input={pairs}", f"output={out}", *extra])
        assert status == 0, capsys.readouterr().err
        outputs[name] = [json.loads(line) for line in out.read_text().splitlines()]
    labels = {name: [r["label"] for r in records] for name, records in outputs.items()}
    assert len({tuple(v) for v in labels.values()}) == 1, labels
    for records in outputs.values():
        for record, reference in zip(records, outputs["run"], strict=True):
            for label, p in record["probs"].items():
                assert p == pytest.approx(reference["probs"][label], abs=1e-4)


def test_evaluate_on_onnx_runtime_scores_the_splits_as_pytorch_does(snli_run, tmp_path):
    """`matching-evaluate backend=onnx`: the same splits, batches and metrics, the batches run by the graph's own
    session (OnnxBackend.run, a method of that runtime, not of the Backend protocol)."""
    from conftest import evaluate

    run_dir = snli_run[0]
    torch_metrics = evaluate(run_dir, out=tmp_path / "torch")
    onnx_metrics = evaluate(run_dir, overrides=["backend=onnx"], out=tmp_path / "onnx")
    assert onnx_metrics.keys() == torch_metrics.keys()
    for key, value in torch_metrics.items():
        assert onnx_metrics[key] == pytest.approx(value, abs=1e-4), key


def test_threads_one_for_a_small_call_more_for_a_big_one_never_over_the_cap():
    assert thread_count(3, tokens=10) == 3  # the user's count wins
    assert thread_count(0, tokens=400) == 1  # a 10-candidate rank: one thread
    big = thread_count(0, tokens=TOKENS_PER_THREAD["static"] * 64)
    assert 1 <= big <= cores()
    assert thread_count(0, tokens=TOKENS_PER_THREAD["static"] * 64, cap=1) == 1
    assert thread_count(0, tokens=TOKENS_PER_THREAD["contextual"] * 2, kind="contextual", cap=2) <= 2


def test_an_exported_model_is_served_on_onnx_runtime_alone(exported, tmp_path):
    """matching-serve-onnx in a process where torch, Lightning and Hydra cannot be imported (nor in its workers)."""
    import os
    import signal
    import time
    import urllib.error
    import urllib.request

    from matching.serving.server import STOP_DEADLINE_S, free_port

    run_dir, onnx_folder, _ = exported
    blocked = tmp_path / "blocked"
    for name in ("torch", "lightning", "pytorch_lightning", "hydra", "torchmetrics"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(f"raise ImportError('{name} is not installed here')\n")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked), *sys.path])}
    code = "import sys; from matching.serve_onnx import main; sys.exit(main())"
    server = subprocess.Popen([sys.executable, "-c", code, f"ckpt={onnx_folder}", f"port={port}"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def post(path: str, body: dict) -> tuple[int, dict]:
        request = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stdout.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the ONNX server did not get ready"
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as answer:
                    if answer.read() == b"ok":
                        break
            except OSError:
                time.sleep(0.3)
        status, answer = post("/classify", {"pairs": [{"a": a, "b": b} for a, b in NLI]})
        assert status == 200
        expected = Matcher.load(run_dir).predict(NLI)
        for got, want in zip(answer["predictions"], expected, strict=True):
            assert got["label"] == want["label"]
            assert got["probs"] == pytest.approx(want["probs"], abs=1e-4)
        status, refused = post("/align", {"a": "A dog runs.", "b": "An animal moves."})
        assert status == 501 and "backend=torch" in refused["error"]
        with urllib.request.urlopen(url + "/info", timeout=10) as answer:
            info = json.loads(answer.read())["model"]
        assert info["backend"] == "onnx" and info["endpoints"] == ["/classify"]
        # It stops cleanly, its second process too, though that one may still be loading (on CI this stop once
        # hung: the supervisor waited for the loading process's "ready").
        os.killpg(server.pid, signal.SIGTERM)
        status = server.wait(timeout=STOP_DEADLINE_S + 30)
        assert status == 0, server.stdout.read().decode()[-6000:]
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def _distributions(requirements: list[str]) -> dict:
    """The installed distributions that `requirements` need, their own requirements included (what pip would
    install for them), by canonical name."""
    import importlib.metadata as metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found, todo = {}, [(Requirement(r), "") for r in requirements]
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        dist = metadata.distribution(requirement.name)
        for wanted in [""] if name in found else ["", *requirement.extras]:
            todo += [(Requirement(r), wanted) for r in dist.requires or []]
        found[name] = dist
    return found


@pytest.mark.slow
def test_the_onnx_server_runs_in_a_venv_without_torch(exported, tmp_path):
    """A fresh venv holding the package and the serve-onnx extra's distributions (linked from this environment,
    as pip would install them; nothing is downloaded) and nothing else: torch cannot be imported there, and
    matching-serve-onnx serves an exported model."""
    import os
    import time
    import urllib.request
    from pathlib import Path

    import tomllib

    from matching.serving.server import free_port

    root = Path(__file__).resolve().parents[1]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["serve-onnx"]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    for dist in _distributions(extra).values():
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            source = Path(dist.locate_file(top))
            if source.exists() and not (site / top).exists() and top != "__pycache__":
                (site / top).symlink_to(source)
    (site / "matching").symlink_to(root / "matching")
    (site / "conf").symlink_to(root / "conf")  # where a source checkout keeps the configs (a wheel: matching/conf)
    python = str(venv / "bin" / "python")
    no_torch = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True)
    assert no_torch.returncode != 0 and "No module named 'torch'" in no_torch.stderr
    port = free_port()
    server = subprocess.Popen([python, "-c", "import sys; from matching.serve_onnx import main; "
                               "sys.exit(main())", f"ckpt={exported[1]}", f"port={port}"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                              env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stdout.read().decode()[-3000:]
            assert time.monotonic() < deadline
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                    if answer.read() == b"ok":
                        break
            except OSError:
                time.sleep(0.3)
        body = json.dumps({"pairs": [{"a": a, "b": b} for a, b in NLI]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/classify", body,
                                         {"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as answer:
            predictions = json.loads(answer.read())["predictions"]
        assert [p["label"] for p in predictions] == [p["label"] for p in Matcher.load(exported[0]).predict(NLI)]
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def test_the_onnx_server_refuses_a_run_in_one_paragraph(snli_run, capsys):
    from matching.serve_onnx import main as serve_onnx_main

    assert serve_onnx_main([f"ckpt={snli_run[0]}", "port=1"]) == 2
    said = capsys.readouterr().err
    assert "not an exported ONNX model" in said and "format=onnx" in said and "Traceback" not in said
