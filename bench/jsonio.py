"""JSON in and out. A run killed mid-write must not stop a report, so unreadable files and cut
lines are skipped, not raised."""

import json
from pathlib import Path


def load_json(path):
    """One JSON document, or None when the file is missing or not JSON."""
    try:
        return json.loads(Path(path).read_text(errors="replace"))
    except (OSError, ValueError):
        return None


def parse_jsonl(text):
    """The JSON objects of the lines of TEXT that start with '{' (log lines and a line cut short by
    a killed process are skipped)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def read_jsonl(path):
    """parse_jsonl of a file; [] when the file is missing."""
    try:
        return parse_jsonl(Path(path).read_text(errors="replace"))
    except OSError:
        return []


def emit(obj, *files):
    """One compact JSON line on stdout (flushed, so a pipe sees it at once) and appended to FILES."""
    line = json.dumps(obj)
    print(line, flush=True)
    for f in files:
        with open(f, "a") as fh:
            fh.write(line + "\n")
    return obj


def write_json(path, obj):
    Path(path).write_text(json.dumps(obj) + "\n")

