"""`execute_sql`: agent SQL on the episode's EHR (clean, or base + patch), guarded, capped and timed out.

The parent process guards the text (`pipeline.gym.sqlguard`), so a refusal never reaches Polars.
Queries run in one persistent worker process: a runaway query (a cross join, a sort of billions of
rows) can then be stopped by killing the worker, which a thread cannot do, and an out-of-memory
kill takes down the worker, not the environment. The worker opens the EHR once and keeps the
patched views of the last few patches, so a query costs a plan and a scan, not a process start.

The worker is a plain `python -c` subprocess talking length-prefixed pickles over its stdin and a
private copy of its stdout: unlike multiprocessing "spawn" it never re-imports the caller's
`__main__`, and its environment (POLARS_MAX_THREADS) is set before Polars is imported.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import polars as pl

from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch
from pipeline.gym.results import ToolResult, plain_value, render_table
from pipeline.gym.sqlguard import SQLRefused, guard_sql

_HEADER = struct.Struct(">Q")  # payload length of one frame
_PROJECT_ROOT = Path(__file__).resolve().parents[2]
_WORKER_CODE = "from pipeline.gym.sqlexec import _worker_main; _worker_main()"
_CLEAN_PATCHES = ("", "[]", "null")
_BODY_GRACE_S = 30.0  # once a reply has started, the rest of it (a 10k-row result) gets this long to arrive
_MAX_ERROR_CHARS = 600


# -- framing -------------------------------------------------------------------------------------------------


def _write_frame(stream: IO[bytes], obj: Any) -> None:
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def _read_frame_blocking(stream: IO[bytes]) -> Any:
    """The next frame, or None at end of input (the parent went away)."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    payload = stream.read(size)
    if len(payload) < size:
        return None
    return pickle.loads(payload)


class _Timeout(Exception):
    pass


def _read_exact(fd: int, n: int, deadline: float) -> bytes:
    """`n` bytes from `fd` by `deadline` (monotonic); `_Timeout` when late, EOFError when the writer died."""
    buf = bytearray()
    while len(buf) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _Timeout
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            raise _Timeout
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def _read_frame(fd: int, timeout_s: float) -> Any:
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, time.monotonic() + timeout_s))
    return pickle.loads(_read_exact(fd, size, time.monotonic() + max(_BODY_GRACE_S, timeout_s)))


# -- worker side ---------------------------------------------------------------------------------------------


class _ScanRefused(Exception):
    """The Polars plan reads something other than the EHR's own Parquet files."""


_SCAN_LINE = re.compile(r"^\s*\w+ SCAN\b.*$", re.MULTILINE)


def _scan_lines(frame: pl.LazyFrame) -> set[str]:
    """The `<format> SCAN [...]` lines of the unoptimised plan: every file source Polars will read."""
    return {m.group(0).strip() for m in _SCAN_LINE.finditer(frame.explain(optimized=False))}


class _Views:
    """The EHR's frames, clean and patched; the last `size` patched views are kept (keyed by the patch hash)."""

    def __init__(self, base: Mapping[str, pl.LazyFrame], size: int):
        self.base = dict(base)
        self.size = size
        self._cache: OrderedDict[str, dict[str, pl.LazyFrame]] = OrderedDict()

    def get(self, patch_json: str) -> dict[str, pl.LazyFrame]:
        text = (patch_json or "").strip()
        if text in _CLEAN_PATCHES:
            return self.base
        key = hashlib.sha256(text.encode()).hexdigest()
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        frames = Patch.from_json(text).apply(self.base)
        self._cache[key] = frames
        while len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return frames


def _json_ready(value: Any) -> Any:
    value = plain_value(value)
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_ready(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return "\\x" + bytes(value).hex()
    return value


def _error_text(err: BaseException) -> str:
    """The first lines of a Polars error, without the plan dump that follows them."""
    text = str(err).split("Resolved plan until failure", 1)[0]
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()][:3]
    message = " ".join(lines) or "(no message)"
    if len(message) > _MAX_ERROR_CHARS:
        message = message[:_MAX_ERROR_CHARS] + " …"
    return f"{type(err).__name__}: {message}"


def _run_query(views: _Views, allowed_scans: set[str], sql: str, patch_json: str, cfg: dict[str, Any]) -> ToolResult:
    """One query on one view; every failure becomes an error result (the worker must survive bad SQL)."""
    start = time.perf_counter()
    row_cap = int(cfg["row_cap"])
    try:
        frames = views.get(patch_json)
    except Exception as err:
        return ToolResult.error(f"the episode's EHR patch could not be applied ({_error_text(err)})")
    try:
        with pl.SQLContext(frames=frames, eager=False) as ctx:
            lazy = ctx.execute(sql)
            foreign = sorted(_scan_lines(lazy) - allowed_scans)
            if foreign:
                raise _ScanRefused(foreign[0])
            frame = lazy.limit(row_cap + 1).collect()
    except _ScanRefused as err:
        return ToolResult.error(f"query refused: it reads a source outside the EHR tables ({str(err)[:200]})",
                                seconds=time.perf_counter() - start)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:  # Polars errors, and pyo3 PanicException (a BaseException)
        return ToolResult.error(f"the query failed: {_error_text(err)}", seconds=time.perf_counter() - start)
    truncated = frame.height > row_cap
    if truncated:
        frame = frame.head(row_cap)
    row_count = None if truncated else frame.height
    content = render_table(frame, row_count, show_rows=int(cfg["show_rows"]), max_chars=int(cfg["max_chars"]))
    rows = [[_json_ready(v) for v in row] for row in frame.iter_rows()]
    return ToolResult(ok=True, content=content, columns=list(frame.columns), rows=rows, row_count=row_count,
                      truncated=truncated, seconds=time.perf_counter() - start)


def _worker_main() -> None:
    """Entry point of the worker process: open the EHR, say ready, then answer (sql, patch_json) frames."""
    cfg = json.loads(sys.argv[1])
    channel = os.fdopen(os.dup(1), "wb")  # the protocol gets a private stdout ...
    os.dup2(2, 1)  # ... and stray prints (library warnings) go to stderr
    sys.stdout = sys.stderr
    requests = sys.stdin.buffer
    try:
        ehr = EHR(cfg["ehr_dir"])
        views = _Views(ehr, size=int(cfg["cached_views"]))
        allowed = set().union(*(_scan_lines(frame) for frame in views.base.values()))
    except Exception as err:
        _write_frame(channel, ("fatal", _error_text(err)))
        return
    _write_frame(channel, ("ready", None))
    while True:
        request = _read_frame_blocking(requests)
        if request is None:
            return
        sql, patch_json = request
        try:
            result = _run_query(views, allowed, sql, patch_json, cfg)
        except Exception as err:  # rendering or conversion: still an answer, never a dead worker
            result = ToolResult.error(f"the query result could not be rendered ({_error_text(err)})")
        _write_frame(channel, result.to_dict())


# -- parent side ---------------------------------------------------------------------------------------------


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill the worker (and anything it started) and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def _death_reason(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        hint = ", probably out of memory" if -returncode == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exit code {returncode}"


class SQLExecutor:
    """Runs guarded agent SQL on an EHR in a persistent, killable worker process.

    `execute(query, patch_json)` never raises on agent input: refusals, SQL errors, timeouts and a
    dead worker all come back as `ToolResult.error(...)`. Use one executor per thread (calls are
    serialised by a lock); `close()` (or leaving a `with` block) stops the worker.
    """

    def __init__(self, ehr_dir: str | Path, timeout_s: float = 10.0, row_cap: int = 10_000, show_rows: int = 20,
                 max_chars: int = 4000, cached_views: int = 4, startup_timeout_s: float = 120.0):
        self.ehr_dir = Path(ehr_dir).resolve()
        self.tables: tuple[str, ...] = tuple(EHR(self.ehr_dir))  # fails here, not in the worker, if not built
        self.timeout_s = float(timeout_s)
        self.row_cap = int(row_cap)
        self.startup_timeout_s = float(startup_timeout_s)
        self._cfg = {"ehr_dir": str(self.ehr_dir), "row_cap": self.row_cap, "show_rows": int(show_rows),
                     "max_chars": int(max_chars), "cached_views": int(cached_views)}
        self.requests_sent = 0  # queries that reached a worker (refused ones never do)
        self.workers_started = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._ready = False
        self._finalizer: weakref.finalize | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._spawn()  # warm start: the worker imports Polars while the agent is still thinking

    # -- worker lifecycle ----------------------------------------------------------------------------------
    def _spawn(self) -> None:
        env = dict(os.environ)
        env.setdefault("POLARS_MAX_THREADS", "2")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
        self._stderr = tempfile.TemporaryFile(prefix="sqlworker-")  # noqa: SIM115 (lives as long as the worker)
        self._proc = subprocess.Popen([sys.executable, "-c", _WORKER_CODE, json.dumps(self._cfg)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                      env=env, start_new_session=True)
        self._ready = False
        self.workers_started += 1
        self._finalizer = weakref.finalize(self, _stop, self._proc)

    def _discard(self) -> str:
        """Stop the current worker; returns the tail of its stderr (for error messages)."""
        tail = ""
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._proc is not None:
            _stop(self._proc)
            self._proc = None
        if self._stderr is not None:
            try:
                self._stderr.seek(0, os.SEEK_END)
                self._stderr.seek(max(0, self._stderr.tell() - 2000))
                lines = self._stderr.read().decode(errors="replace").strip().splitlines()
                tail = lines[-1] if lines else ""
            finally:
                self._stderr.close()
                self._stderr = None
        self._ready = False
        return tail

    def _wait_ready(self) -> str | None:
        """None when the worker is ready, else why it could not start (it is discarded then)."""
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                self._discard()
            self._spawn()
        if self._ready:
            return None
        assert self._proc is not None and self._proc.stdout is not None
        try:
            kind, message = _read_frame(self._proc.stdout.fileno(), self.startup_timeout_s)
        except _Timeout:
            self._discard()
            return f"the SQL worker did not start within {self.startup_timeout_s:g} s"
        except EOFError:
            returncode = self._proc.poll()
            tail = self._discard()
            return f"the SQL worker exited at start-up ({_death_reason(returncode)}): {tail}"
        if kind != "ready":
            self._discard()
            return f"the SQL worker could not open the EHR at {self.ehr_dir}: {message}"
        self._ready = True
        return None

    # -- API -------------------------------------------------------------------------------------------------
    def execute(self, query: str, patch_json: str = "[]") -> ToolResult:
        """Run one agent query on the base EHR overlaid with `patch_json` (a `Patch` as JSON; "[]" = clean)."""
        start = time.perf_counter()
        if not isinstance(patch_json, str):
            return ToolResult.error(f"patch_json must be a JSON string, got {type(patch_json).__name__}")
        try:
            guard_sql(query, self.tables)
        except SQLRefused as err:
            return ToolResult.error(f"query refused: {err.reason}", seconds=time.perf_counter() - start)
        with self._lock:
            if self._closed:
                return ToolResult.error("the SQL tool is closed")
            try:
                result = self._roundtrip(query, patch_json)
            except Exception as err:  # a broken pipe or a bug here must not end the episode
                self._discard()
                result = ToolResult.error(f"the SQL tool failed ({type(err).__name__}: {err}); it is restarted "
                                          "for the next query")
        result.seconds = time.perf_counter() - start
        return result

    def _roundtrip(self, query: str, patch_json: str) -> ToolResult:
        problem = self._wait_ready()
        if problem is not None:
            return ToolResult.error(problem)
        assert self._proc is not None and self._proc.stdin is not None and self._proc.stdout is not None
        self.requests_sent += 1
        try:
            _write_frame(self._proc.stdin, (query, patch_json))
            reply = _read_frame(self._proc.stdout.fileno(), self.timeout_s)
        except _Timeout:
            self._discard()
            self._spawn()  # non-blocking: the fresh worker starts up while the agent reads the error
            return ToolResult.error(f"query timed out after {self.timeout_s:g} s; it was stopped. Narrow it "
                                    "(filter by subject_id or hadm_id, avoid cross joins, aggregate or add LIMIT) "
                                    "and try again")
        except (EOFError, BrokenPipeError):
            returncode = self._proc.poll()
            if returncode is None:
                try:
                    returncode = self._proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    returncode = None
            self._discard()
            return ToolResult.error(f"the SQL worker died while running the query ({_death_reason(returncode)}); "
                                    "a fresh one runs the next query. Avoid huge intermediate results "
                                    "such as cross joins")
        return ToolResult(**reply)

    def close(self) -> None:
        """Stop the worker; later calls return an error result."""
        with self._lock:
            self._closed = True
            self._discard()

    def __enter__(self) -> SQLExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("ready" if self._ready else "starting")
        return f"SQLExecutor({str(self.ehr_dir)!r}, timeout_s={self.timeout_s:g}, row_cap={self.row_cap}, {state})"
