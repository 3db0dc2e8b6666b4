"""Results on disk: `results.jsonl` gets one line per result the moment it is known (flushed
and synced, so an interrupted run keeps everything measured), `run.json` the run's metadata."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ValidationError

from .records import Result, RunInfo

RESULTS_FILE = "results.jsonl"
RUN_FILE = "run.json"


class ResultStore:
    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        self.results_path = out_dir / RESULTS_FILE

    def write_run(self, run: RunInfo) -> None:
        tmp = self.out_dir / (RUN_FILE + ".tmp")
        tmp.write_text(run.model_dump_json(indent=2))
        os.replace(tmp, self.out_dir / RUN_FILE)  # never a half-written run.json

    def append(self, result: Result) -> None:
        with open(self.results_path, "a", encoding="utf-8") as out:
            out.write(result.model_dump_json() + "\n")
            out.flush()
            os.fsync(out.fileno())

    def read_results(self) -> list[Result]:
        """Every complete line; a line cut short by a kill is skipped, not fatal."""
        if not self.results_path.exists():
            return []
        results = []
        for line in self.results_path.read_text(encoding="utf-8").splitlines():
            try:
                results.append(Result.model_validate(json.loads(line)))
            except (json.JSONDecodeError, ValidationError):
                continue
        return results

    def read_run(self) -> RunInfo | None:
        path = self.out_dir / RUN_FILE
        return RunInfo.model_validate_json(path.read_text()) if path.exists() else None
