"""matching-derive-vectors without model2vec: a forward pass per word, mean pooling, PCA, GloVe text; on a tiny
encoder built on the spot (nothing downloaded)."""

import gzip

import numpy as np
import pytest
from conftest import save_tiny_encoder

from matching.derive_vectors import distill, fit_pca, main, pooled_states

transformers = pytest.importorskip("transformers")

WORDS = ["the", "cat", "cats", "dog", "running", "a", "zebra", "x9", "!", "éclair"]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("tiny-bert"))


def test_a_word_is_the_mean_of_its_framed_pieces_final_states(encoder):
    """The recipe by hand: `[CLS] pieces [SEP]` alone through the encoder, the mean over every position."""
    import torch

    model = transformers.AutoModel.from_pretrained(encoder).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(encoder)
    sequences = [[tokenizer.cls_token_id, *tokenizer(w, add_special_tokens=False)["input_ids"], tokenizer.sep_token_id]
                 for w in ["zebra", "cat", "dogs"]]  # fmt: skip
    with torch.inference_mode():
        expected = [model(input_ids=torch.tensor([s])).last_hidden_state[0].mean(0).numpy() for s in sequences]
    assert pooled_states(model, sequences, batch_size=2) == pytest.approx(np.stack(expected), abs=1e-5)


def test_the_pca_keeps_the_most_variance_and_is_signed_deterministically():
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((500, 6)) * np.array([5.0, 3.0, 2.0, 0.1, 0.1, 0.1])
    mean, components = fit_pca(rows.astype(np.float32), 3)
    assert components.shape == (6, 3) and mean == pytest.approx(rows.mean(0), abs=1e-5)
    assert np.abs(components.T @ components - np.eye(3)).max() < 1e-8  # orthonormal
    assert np.abs(np.abs(components[:3]) - np.eye(3)).max() < 0.05  # the three wide axes, in order of variance
    assert (components[np.abs(components).argmax(0), range(3)] > 0).all()  # largest loading positive
    _, again = fit_pca(-rows.astype(np.float32), 3)  # the same space, mirrored: the same signed components
    assert again == pytest.approx(components)


def test_distilled_vectors_are_deterministic_and_a_single_piece_word_is_its_piece(encoder):
    first = distill(WORDS, str(encoder), pca_dims=8)
    assert first.shape == (len(WORDS), 8) and first.dtype == np.float32 and np.isfinite(first).all()
    assert np.array_equal(first, distill(WORDS, str(encoder), pca_dims=8))  # the same run, the same numbers
    cased = distill([*WORDS, "CAT"], str(encoder), pca_dims=8)  # the tokenizer lower-cases: the piece "cat" twice
    assert np.array_equal(cased[-1], cased[1])
    assert not np.allclose(first[1], first[2])  # "cat" (one piece) and "cats" (two) differ


def test_the_command_writes_glove_text_for_the_words_of_a_file(encoder, tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("\n".join(WORDS) + "\n")
    out = tmp_path / "vectors.txt.gz"
    assert main([f"words={words}", f"encoder={encoder}", f"out={out}", "pca_dims=8", f"hydra.run.dir={tmp_path}"]) == 0
    lines = gzip.open(out, "rt", encoding="utf-8").read().splitlines()
    assert [line.split(" ")[0] for line in lines] == WORDS
    rows = np.array([[float(x) for x in line.split(" ")[1:]] for line in lines])
    assert rows == pytest.approx(distill(WORDS, str(encoder), pca_dims=8), abs=1e-5)  # 5 decimals


def test_a_missing_word_file_and_a_pca_wider_than_the_model_are_user_errors(encoder, tmp_path, capsys):
    assert main([f"words={tmp_path / 'nope.txt'}", f"encoder={encoder}", f"hydra.run.dir={tmp_path}"]) == 2
    assert "nope.txt: no such file" in capsys.readouterr().err
    (tmp_path / "w.txt").write_text("cat\n")
    assert main([f"words={tmp_path / 'w.txt'}", f"encoder={encoder}", "pca_dims=17", f"hydra.run.dir={tmp_path}"]) == 2
    assert "pca_dims=17: must be between 1 and the model's width, 16" in capsys.readouterr().err
