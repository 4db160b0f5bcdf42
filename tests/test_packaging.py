"""The package as a user installs it: a wheel that carries its configs and the demo's data, and whose commands work
from any folder. The fast tests build the wheel, run a command from it, and install it by its name into a fresh
virtual environment; the slow one installs it, non-editable and at the lock, into a fresh virtual environment and
trains there.

The distribution is `sentence-matching` (`matching` on PyPI is another project, one for matching games); the import
package, the commands and the configs are `matching`."""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
from conftest import CONF, FIXTURES, ROOT, SUBPROCESS_ENV

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: The console scripts of pyproject.toml.
SCRIPTS = sorted(PROJECT["scripts"])
#: What `pip install` takes, and the version it must report.
DISTRIBUTION, VERSION = PROJECT["name"], PROJECT["version"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built as `pip wheel .` builds it (setuptools from this environment: no download)."""
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        capture_output=True, text=True, env=SUBPROCESS_ENV,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "absent from the `packages` configuration" not in done.stderr, done.stderr  # a conf/ folder not listed
    escaped = re.sub(r"[-_.]+", "_", DISTRIBUTION).lower()  # a wheel file's name spells the distribution so
    (built,) = out.glob(f"{escaped}-{VERSION}-*.whl")
    return built


def test_the_wheel_carries_every_config_and_the_demo_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    configs = {f"matching/conf/{p.relative_to(CONF).as_posix()}" for p in CONF.rglob("*.yaml")}
    assert configs and configs <= names, sorted(configs - names)
    demo = {f"matching/demo_data/{p.name}" for p in (ROOT / "matching" / "demo_data").iterdir()}
    assert demo <= names, sorted(demo - names)
    page = {
        f"matching/serving/page/{p.name}" for p in (ROOT / "matching" / "serving" / "page").iterdir()
    }  # the server's page
    assert {"matching/serving/page/index.html", "matching/serving/page/page.js"} <= page <= names, sorted(page - names)
    assert "hydra_plugins/matching_ray_launcher/ray_launcher.py" in names
    assert not any(n.startswith(("conf/", "tests/", "benchmarks/")) for n in names)  # nothing at the top level


def test_a_command_of_the_unpacked_wheel_finds_its_configs_from_any_folder(wheel, tmp_path):
    """The wheel's files alone (the clone out of sight), run from a folder that has no conf/: the configs are found
    through the package."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = SUBPROCESS_ENV | {"PYTHONPATH": str(site)}
    script = "import matching.configs as c, sys; print(c.CONF); sys.exit(__import__('matching.train').train.main())"
    done = subprocess.run(
        [sys.executable, "-c", script, "task=wikiqa", "aligner=coda", "--cfg", "job"],
        cwd=elsewhere, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == str(site / "matching" / "conf")
    assert "name: wikiqa" in done.stdout and "CoDAAligner" in done.stdout


def outside_env(bin_dir: Path) -> dict[str, str]:
    """A user's shell with a fresh virtual environment's commands first on PATH: no PYTHONPATH (the clone on it would
    be imported instead of the installed package), and pip told nothing but its arguments (no configured index or
    --find-links folder of this machine)."""
    env = {
        k: v for k, v in SUBPROCESS_ENV.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("PIP_")
    }
    return env | {"PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "PIP_CONFIG_FILE": os.devnull}


def links_to_this_environment_but_the_project(folder: Path) -> list[Path]:
    """This environment's site-packages as folders of links, less this project (its package, its dist-info, an
    editable install's finder and .pth files): what a fresh environment's pip finds the dependencies installed in,
    with no index, while it still has to install the project itself."""
    folders = []
    for n, site in enumerate(dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))):
        links = folder / str(n)
        links.mkdir(parents=True)
        for entry in Path(site).iterdir():
            ours = entry.name == "matching" or "sentence_matching" in entry.name.lower()
            if not ours and entry.suffix != ".pth":
                (links / entry.name).symlink_to(entry)
        folders.append(links)
    return folders


def test_the_wheel_installs_by_its_name_and_its_commands_run_from_any_folder(wheel, tmp_path):
    """`pip install sentence-matching` with no index and the built wheel's folder as the only place to look: pip
    resolves the name to that file, installs it into a fresh virtual environment (its dependencies are this
    environment's, seen through a .pth file, so nothing is downloaded), and from a folder outside the clone the
    commands run on the configs inside the installed package, which is the one `import matching` finds."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)  # pip runs from the linked packages, as the dependencies do
    site = next((env_dir / "lib").glob("python*/site-packages"))
    links = links_to_this_environment_but_the_project(tmp_path / "dependencies")
    (site / "dependencies.pth").write_text("".join(f"{folder}\n" for folder in links))
    bin_dir = env_dir / "bin"
    env = outside_env(bin_dir)
    home = tmp_path / "elsewhere"  # no conf/ and no clone: the configs can come from the installed package alone
    home.mkdir()
    assert ROOT not in home.parents

    def run(*argv: str) -> str:
        done = subprocess.run([*argv], cwd=home, capture_output=True, text=True, env=env)
        assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    python = str(bin_dir / "python")
    installed = run(python, "-m", "pip", "install", "--no-index", "--find-links", str(wheel.parent), DISTRIBUTION)
    lines = installed.splitlines()
    assert f"Looking in links: {wheel.parent}" in lines and f"Processing {wheel}" in lines, installed
    assert f"Successfully installed {DISTRIBUTION}-{VERSION}" in installed, installed
    shown = dict(re.findall(r"^([\w-]+): (.*)$", run(python, "-m", "pip", "show", DISTRIBUTION), re.M))
    assert (shown["Name"], shown["Version"]) == (DISTRIBUTION, VERSION), shown
    assert Path(shown["Location"]).resolve() == site.resolve(), shown  # the fresh environment's, not the clone

    assert shutil.which("matching-train", path=env["PATH"]) == str(bin_dir / "matching-train")
    assert run("matching-train", "--help").startswith("Usage: matching-train ")
    composed = run("matching-train", "--cfg", "job", "task=snli", "aligner=coda")
    assert "  name: snli\n" in composed and "_target_: matching.model.aligners.CoDAAligner" in composed
    where = "import matching, matching.files as f; print(matching.__file__); print(f.config_dir())"
    package, configs = (Path(line).resolve() for line in run(python, "-c", where).splitlines())
    assert (package, configs) == (site.resolve() / "matching" / "__init__.py", site.resolve() / "matching" / "conf")


def test_every_folder_of_conf_is_a_listed_package():
    """setuptools ships a folder's YAML files only when the folder is in pyproject.toml's `packages`."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {"matching.conf"} | {
        "matching.conf." + ".".join(p.relative_to(CONF).parts) for p in CONF.rglob("*") if p.is_dir()
    }
    assert folders <= listed, sorted(folders - listed)


def test_every_folder_of_the_package_is_listed():
    """A sub-package (or a data folder such as the server's page) left out of `packages` is left out of the wheel."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    package = ROOT / "matching"
    folders = {
        ".".join(("matching", *p.relative_to(package).parts))
        for p in package.rglob("*")
        if p.is_dir() and p.name != "__pycache__"
    }
    assert folders <= listed, sorted(folders - listed)


@pytest.mark.slow
def test_the_wheel_installed_at_the_lock_trains_offline_from_any_folder(wheel, tmp_path):
    """What `pip install sentence-matching` gives: a fresh virtual environment, the wheel and its dependencies at the
    tested versions (constraints.txt), then from a folder outside the clone: every command's --help, a short offline
    training on the shipped sample, prediction with the trained run, a two-job sweep, a config folder of the user's
    own on Hydra's search path, and `task=pairs` on the user's own files with the default embeddings (the minilm
    extra's encoder, from PyPI): offline, with no vectors file."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    # Without PYTHONPATH: a clone on it (as `PYTHONPATH=$PWD pytest` puts it) holds sentence_matching.egg-info after the
    # wheel is built, which pip takes for sentence-matching installed already, and it would install no commands
    outside = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    install = subprocess.run(
        [bin_dir / "pip", "install", "-q", "-c", ROOT / "constraints.txt", f"{wheel}[plots,minilm]"],
        capture_output=True, text=True, env=outside,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in SUBPROCESS_ENV.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["TRANSFORMERS_OFFLINE"] = "1"  # with HF_HUB_OFFLINE=1 (SUBPROCESS_ENV): nothing is fetched from the hub

    def run(*argv: str) -> str:
        done = subprocess.run([*argv], cwd=home, capture_output=True, text=True, env=env)
        assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"
        return done.stdout + done.stderr

    for script in SCRIPTS:
        assert "usage" in run(script, "--help").lower(), script
    short = ["experiment=demo", "trainer.max_epochs=1", "+trainer.limit_train_batches=4", "data.eval_batch_size=500"]
    run("matching-train", *short, "hydra.run.dir=run")
    metrics = (home / "run" / "metrics.json").read_text()
    assert '"val/acc"' in metrics
    pairs = home / "pairs.tsv"
    pairs.write_text("A man is sleeping.\tA person rests.\nTwo dogs run.\tNo animals are outside.\n")
    run("matching-predict", "ckpt=run/checkpoints/best.ckpt", f"input={pairs}", "output=predictions.jsonl")
    assert len((home / "predictions.jsonl").read_text().splitlines()) == 2
    demo = run("matching-demo", "seeds=[1]", 'train="task.epochs=1 task.splits.train.stop=200 model.hidden=16"',
               "out=demo")  # fmt: skip
    assert "softmax" in demo and (home / "demo").is_dir()
    run("matching-train", "-m", *short, "seed=1,2", "hydra.sweep.dir=sweep")
    assert len(list((home / "sweep").glob("*/metrics.json"))) == 2
    own = home / "my_conf" / "aligner"
    own.mkdir(parents=True)
    (own / "coda2.yaml").write_text("defaults:\n  - coda\n  - _self_\n\nalpha: 2.0\n")
    composed = run("matching-train", f"hydra.searchpath=[file://{home / 'my_conf'}]", "aligner=coda2", "--cfg", "job")
    assert "alpha: 2.0" in composed and "CoDAAligner" in composed
    # One's own pairs with the default embeddings: no vectors file anywhere (an empty data folder), offline
    for name in ("claims_train.tsv", "claims_dev.tsv"):
        (home / name).write_text((FIXTURES / "own" / name).read_text())
    (home / "empty").mkdir()
    own = ["task=pairs", f"task.splits.train.path={home / 'claims_train.tsv'}", "task.columns.a=claim",
           f"task.splits.dev.path={home / 'claims_dev.tsv'}", "task.columns.b=evidence", "task.columns.label=verdict",
           "trainer.max_epochs=1", f"paths.data_dir={home / 'empty'}", "hydra.run.dir=own"]  # fmt: skip
    run("matching-train", *own)
    assert '"val/acc"' in (home / "own" / "metrics.json").read_text()
    log = (home / "own" / "train.log").read_text()
    assert "embeddings: minilm_contextual, the default of task=pairs: " in log
