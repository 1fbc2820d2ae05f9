"""Public relevance judgments: BEIR-layout data sets and the NDCG that scores a
ranking against them (``amelio simulate``, the quality benchmarks)."""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from amelio.errors import InvalidInput
from amelio.text import json_lines

__all__ = ["TOP", "Dataset", "load_dataset", "ndcg_at"]

#: The rank NDCG is cut at.
TOP = 10


@dataclass(frozen=True)
class Dataset:
    corpus_path: Path
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    @property
    def max_grade(self) -> int:
        return max((g for judged in self.qrels.values() for g in judged.values()), default=1)


def load_dataset(directory: Path) -> Dataset:
    """A BEIR-layout folder; only queries with at least one positive judgment are kept."""
    corpus, queries_path = directory / "corpus.jsonl", directory / "queries.jsonl"
    qrels_path = directory / "qrels" / "test.tsv"
    for needed in (corpus, queries_path, qrels_path):
        if not needed.is_file():
            raise InvalidInput(
                f"{directory} is not a BEIR-layout data set: {needed.name} is "
                "missing (corpus.jsonl, queries.jsonl, qrels/test.tsv)."
            )
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    with qrels_path.open(encoding="utf-8") as f:
        for row in csv.reader(f, delimiter="\t"):
            if len(row) < 3 or not row[2].strip().lstrip("-").isdigit():
                continue  # the header
            if int(row[2]) > 0:
                qrels[row[0]][row[1]] = int(row[2])
    queries: dict[str, str] = {}
    with queries_path.open(encoding="utf-8") as f:
        for _number, where, record in json_lines(f, queries_path.name):
            if not isinstance(record, dict):
                raise InvalidInput(f"{where}: a query is a JSON object with _id and text.")
            if str(record["_id"]) in qrels:
                queries[str(record["_id"])] = record["text"]
    if not queries:
        raise InvalidInput(f"{directory}: no query has a positive judgment.")
    return Dataset(corpus, queries, dict(qrels))


def ndcg_at(ranking: Sequence[str], judged: dict[str, int], k: int = TOP) -> float:
    """NDCG@k with exponential gains (2^grade − 1) and log2 discounts."""

    def dcg(grades: Sequence[int]) -> float:
        return sum((2.0**g - 1) / math.log2(i + 2) for i, g in enumerate(grades[:k]))

    ideal = dcg(sorted(judged.values(), reverse=True))
    return dcg([judged.get(d, 0) for d in ranking]) / ideal if ideal else 0.0
